#include "harness/suite/build_info.hpp"

#include <fmt/format.h>

#include "faultline_git_commit.hpp"  // generated at build time: FAULTLINE_GIT_COMMIT

namespace fl::harness {

const BuildInfo& build_info() {
  static const BuildInfo b = [] {
    BuildInfo x;
    x.version = FAULTLINE_VERSION;
    x.commit = FAULTLINE_GIT_COMMIT;
    x.build_type = FAULTLINE_BUILD_TYPE;
    x.compiler = FAULTLINE_COMPILER;
#if defined(FAULTLINE_HAVE_CUDA)
    x.cuda = true;
#endif
#if defined(FAULTLINE_HAVE_NCCL)
    x.nccl = true;
#endif
#if defined(FAULTLINE_HAVE_GRPC)
    x.grpc = true;
#endif
#if !defined(FAULTLINE_NO_FAULT_SITES)
    x.fault_sites = true;
#endif
    return x;
  }();
  return b;
}

nlohmann::json build_info_json() {
  const auto& b = build_info();
  return {{"version", b.version},
          {"commit", b.commit},
          {"build_type", b.build_type},
          {"compiler", b.compiler},
          {"options",
           {{"cuda", b.cuda}, {"nccl", b.nccl}, {"grpc", b.grpc}, {"fault_sites", b.fault_sites}}}};
}

std::string version_text() {
  const auto& b = build_info();
  auto on = [](bool x) { return x ? "on" : "off"; };
  return fmt::format(
      "faultline {}\ncommit     {}\nbuild      {}\ncompiler   {}\noptions    CUDA {}, NCCL {}, "
      "gRPC {}, fault sites {}\n",
      b.version, b.commit, b.build_type.empty() ? "(none)" : b.build_type, b.compiler, on(b.cuda),
      on(b.nccl), on(b.grpc), on(b.fault_sites));
}

}  // namespace fl::harness
