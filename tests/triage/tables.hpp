// The project's signature tables and taxonomy, loaded once per test binary.
#pragma once

#include "harness/triage/triage.hpp"

namespace fl::triage::test {

inline const Tables& tables() {
  static const Tables t = load_tables(default_signature_dir(), default_taxonomy_path());
  return t;
}

}  // namespace fl::triage::test
