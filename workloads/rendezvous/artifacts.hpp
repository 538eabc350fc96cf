// Artifacts a job fetches when it starts (a tokenizer, like a hub download): GET
// FAULTLINE_ARTIFACT_URL/<name> over HTTP/1.1 into FAULTLINE_ARTIFACT_CACHE, unless the cache
// already has it. Ranks of one node share the cache; one downloads under a file lock, the others
// reuse the file. A fetch is retried (3 attempts, 200 ms apart) before it fails.
#pragma once

#include <string>

#include "base/error.hpp"

namespace fl::rdzv {

class ArtifactError : public Error {
 public:
  using Error::Error;
};

// Returns the cached file's path; throws ArtifactError naming the URL and what went wrong
// (connection refused, timeout, HTTP status, short body).
std::string fetch_artifact(const std::string& name);
// The "vocab" of a fetched tokenizer.json; throws ArtifactError if it has none.
int tokenizer_vocab(const std::string& path);

}  // namespace fl::rdzv
