// The words fl-detect-comm reads in a rank's error message, with the message's paths and the
// run's own name masked first (base/text_mask.hpp): a run id mismatch quotes the run ids
// (`rank 1 has run id '...'`), and a run named after a missing rank is no missing rank.
// Header-only so its unit test checks what the detector runs.
#pragma once

#include <string>
#include <string_view>

#include "base/text_mask.hpp"

namespace fl::detect::comm {

// The symptom of a setup error (class "rendezvous" or "store"), nullptr for another class.
// A rendezvous that names missing ranks (`...; missing: rank 3`) is 2.2, any other (world size,
// run id or config mismatch, a duplicate rank) 2.1; a store whose port is in use is 2.1, one that
// cannot be reached 2.2.
inline const char* setup_symptom(std::string_view cls, std::string_view message,
                                 std::string_view run) {
  const std::string msg = mask_text(message, run);
  if (cls == "rendezvous") return msg.find("missing: ") != std::string::npos ? "2.2" : "2.1";
  if (cls == "store") return msg.find("in use") != std::string::npos ? "2.1" : "2.2";
  return nullptr;
}

// A collective mismatch in training: 4.6 when the members disagree on the data type, else 4.7.
inline const char* mismatch_symptom(std::string_view message, std::string_view run) {
  return mask_text(message, run).find("dtype") != std::string::npos ? "4.6" : "4.7";
}

}  // namespace fl::detect::comm
