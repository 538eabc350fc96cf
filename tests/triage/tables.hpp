// The project's signature tables and taxonomy, loaded once per test binary, and the shape the
// signature tests share: one framework line, the answer it must rank first.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>
#include <string>

#include "harness/triage/triage.hpp"
#include "tests/support/scratch.hpp"

namespace fl::triage::test {

// A scratch signature folder holding one file, t.yaml, with `body`. The folder's name carries the
// process id: two test binaries may write the same `name` at once under ctest -j.
inline std::string write_scratch_table(const std::string& prefix, const std::string& name,
                                       const std::string& body) {
  namespace fs = std::filesystem;
  const fs::path dir = ::fl::test::removed_at_exit(
      fs::temp_directory_path() / (prefix + name + "." + std::to_string(::getpid())));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "t.yaml") << body;
  return dir.string();
}

// The error loading the tables of folder `dir` gives ("FILE:LINE:COL: what"), or "(loaded)".
inline std::string load_error(const std::string& dir) {
  try {
    load_tables(dir, default_taxonomy_path());
  } catch (const SignatureError& e) {
    return e.what();
  }
  return "(loaded)";
}

inline const Tables& tables() {
  static const Tables t = load_tables(default_signature_dir(), default_taxonomy_path());
  return t;
}

// triage's answer to `text` with the project's tables, as `faultline triage` reads a file.
inline Result run(const std::string& text) {
  std::istringstream in(text);
  return triage(read_input(in, 16u << 20), tables());
}

// The candidate's evidence holds `signature` on line `line`. A line is cited once per candidate,
// by the first signature that matched it.
inline bool cites(const Candidate& c, const std::string& signature, size_t line) {
  return std::any_of(c.evidence.begin(), c.evidence.end(), [&](const EvidenceLine& e) {
    return e.signature == signature && e.line == line;
  });
}

// The top symptom's evidence holds `signature` on line `line`.
inline bool top_cites(const Result& r, const std::string& signature, size_t line) {
  return !r.symptoms.empty() && cites(r.symptoms.front(), signature, line);
}

// One text (usually one line a framework prints) and the answer it must rank first. A field left
// 0 or "" is not checked.
struct SignatureCase {
  const char* name;  // the test's name: what the text means
  const char* text;
  int stage;               // the answer's stage; 0: not checked
  const char* symptom;     // the top symptom
  const char* root_cause;  // the top root cause; "": not checked
  const char* signature;   // cited on line 1 as the top symptom's evidence; "": not checked
};

// The answer to `c.text` is found, with `c`'s stage, top symptom, top root cause and evidence.
inline void expect_ranked_first(const Result& r, const SignatureCase& c) {
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  if (c.stage != 0) {
    EXPECT_EQ(r.stage, c.stage);
  }
  ASSERT_FALSE(r.symptoms.empty());
  EXPECT_EQ(r.symptoms.front().id, c.symptom);
  if (*c.root_cause != '\0') {
    ASSERT_FALSE(r.root_causes.empty());
    EXPECT_EQ(r.root_causes.front().id, c.root_cause);
  }
  if (*c.signature != '\0') {
    EXPECT_TRUE(top_cites(r, c.signature, 1))
        << c.signature << " is not the top symptom's evidence on line 1";
  }
}

// The answer is found with `stage` and `symptom` first; with a `signature`, the top symptom's
// evidence holds it on `line`.
inline void expect_first(const Result& r, int stage, const std::string& symptom,
                         const std::string& signature = "", size_t line = 0) {
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, stage);
  ASSERT_FALSE(r.symptoms.empty());
  EXPECT_EQ(r.symptoms.front().id, symptom);
  if (!signature.empty()) {
    EXPECT_TRUE(top_cites(r, signature, line))
        << signature << " is not the top symptom's evidence on line " << line;
  }
}

// gtest prints a case by its name, not as bytes, and names the test after it.
inline void PrintTo(const SignatureCase& c, std::ostream* os) {
  *os << c.name;
}

inline std::string case_name(const ::testing::TestParamInfo<SignatureCase>& info) {
  return info.param.name;
}

// A words.yaml for tests: twenty stage-5 failures hold "quuxserve" and "quuxreply"; thirty of
// stage 4 do not.
inline const char* const kServeWords =
    "issues: 50\n"
    "classes:\n"
    "  \"symptoms\": {\"5.1\": 20, \"4.11\": 30}\n"
    "  \"stages\": {\"5\": 20, \"4\": 30}\n"
    "word_symptoms:\n"
    "  \"quuxserve\": {\"5.1\": 20}\n"
    "  \"quuxreply\": {\"5.1\": 20}\n"
    "  \"other\": {\"4.11\": 30}\n"
    "word_stages:\n"
    "  \"quuxserve\": {\"5\": 20}\n"
    "  \"quuxreply\": {\"5\": 20}\n"
    "  \"other\": {\"4\": 30}\n";

}  // namespace fl::triage::test
