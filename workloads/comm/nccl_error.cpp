#include "workloads/comm/nccl_error.hpp"

#include <fmt/format.h>

#include <array>

namespace fl::comm {

std::string nccl_result_name(int result) {
  static constexpr std::array<const char*, 8> kNames = {
      "ncclSuccess",         "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
      "ncclInvalidArgument", "ncclInvalidUsage",       "ncclRemoteError", "ncclInProgress"};
  if (result >= 0 && result < static_cast<int>(kNames.size())) return kNames[result];
  return fmt::format("ncclResult {}", result);
}

std::string format_nccl_error(int result, std::string_view description, std::string_view last_error,
                              std::string_view version) {
  std::string s = fmt::format("{}: {}", nccl_result_name(result), description);
  if (!version.empty()) s += fmt::format(", NCCL version {}", version);
  while (!last_error.empty() && (last_error.back() == '\n' || last_error.back() == ' ' ||
                                 last_error.back() == '\r' || last_error.back() == '\t')) {
    last_error.remove_suffix(1);
  }
  if (!last_error.empty()) s += fmt::format("; last NCCL error: {}", last_error);
  return s;
}

}  // namespace fl::comm
