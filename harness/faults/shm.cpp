// shm: the run's ranks see a /dev/shm of their own, a tmpfs of `size` in the run's mount
// namespace, as a container's (Docker gives 64 MiB unless --shm-size says otherwise). What maps
// segments there and touches more than fits gets SIGBUS on the page that does not fit — the
// shared-memory transport's collectives (docs/comm.md) — rather than an error at creation.
#include <fmt/format.h>

#include "harness/faults/fault.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/run/history.hpp"
#include "harness/scenario/loader.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::faults {
namespace {

constexpr const char* kShm = "/dev/shm";

class ShmFault : public FaultOf<ShmFault> {
 public:
  int64_t bytes = 64 << 20;
  bool mounted = false;

  nlohmann::json params() const override { return {{"size_bytes", bytes}}; }
  void setup(Host& h) override {
    // A fresh tmpfs over /dev/shm inside the run's private mount namespace: the host's /dev/shm
    // and everything in it stay as they were.
    run_tool(h.box.in_mount({"mount", "-t", "tmpfs", "-o",
                             fmt::format("size={},mode=1777,nosuid,nodev", bytes), "faultline-shm",
                             kShm}));
    mounted = true;
    h.record("shm", {{"path", kShm}, {"size_bytes", bytes}}, -1,
             fmt::format("/dev/shm is a {}-byte tmpfs for the run", bytes));
  }
  void heal(Host& h, bool) override {
    if (!mounted) return;
    mounted = false;
    try {
      run_tool(h.box.in_mount({"umount", "-l", kShm}));
      h.hist.harness("fault_healed", {{"fault", "shm"}, {"path", kShm}});
    } catch (const std::exception& e) {
      try {
        h.hist.harness("heal_error", {{"fault", "shm"}, {"error", e.what()}});
      } catch (...) {
      }
    }
  }
};

class ShmKind : public FaultKind {
 public:
  std::string key() const override { return "shm"; }
  std::vector<KeySpec> keys() const override {
    return {{"faults[].shm", KeyType::kSection, "",
             "The ranks' /dev/shm is a tmpfs of its own (a container's; needs root)"},
            {"faults[].shm.size", KeyType::kString, "64m",
             "Its size (bytes; k, m, g suffixes; Docker's default is 64m)"}};
  }
  std::unique_ptr<Fault> parse(const ParseContext& c, const YAML::Node& item) const override {
    auto f = std::make_unique<ShmFault>();
    const auto n = item["shm"];
    if (n["size"]) f->bytes = loader::parse_size(c.file, n["size"], c.at + ".shm.size");
    if (f->bytes < 4096) {
      loader::fail_at(c.file, n["size"], c.at + ".shm.size",
                      fmt::format("{} bytes is below one page (allowed: 4k or more)", f->bytes));
    }
    return f;
  }
};

}  // namespace

const FaultKind& shm_kind() {
  static const ShmKind k;
  return k;
}

}  // namespace fl::harness::faults
