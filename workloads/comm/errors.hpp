// Errors raised by the collective layer. Each is the observed symptom of something real (a rank
// that never arrived, ranks that disagree on the op), so the message names rank, group, op, seq.
#pragma once

#include <string>

#include "base/error.hpp"
#include "workloads/comm/log_dialect.hpp"

namespace fl::comm {

class CommError : public fl::Error {
 public:
  using fl::Error::Error;
};

// An op did not complete before its deadline. The flight recorder has been dumped.
class CommTimeoutError : public CommError {
 public:
  CommTimeoutError(std::string msg, std::string dump_path, TimeoutInfo info = {})
      : CommError(std::move(msg)), dump_path_(std::move(dump_path)), info_(std::move(info)) {}
  const std::string& dump_path() const { return dump_path_; }
  // The op that timed out (seq, PyTorch op type, element counts, timeout, elapsed).
  const TimeoutInfo& info() const { return info_; }

 private:
  std::string dump_path_;
  TimeoutInfo info_;
};

// Verify mode found ranks calling different ops (or the same op with different shapes) at the
// same sequence number.
class CommMismatchError : public CommError {
 public:
  using CommError::CommError;
};

}  // namespace fl::comm
