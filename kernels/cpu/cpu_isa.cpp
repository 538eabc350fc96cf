// The simulated CPU's instruction sets: what a plugin was built for against what this rank's CPU
// has (FAULTLINE_CPU_FLAGS, as /proc/cpuinfo's flags line). A plugin's kernel built for an
// instruction set the CPU lacks traps on its first instruction of that set: the rank executes a
// real undefined instruction (ud2 on x86) and dies of SIGILL, on any host.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/settings.hpp"
#include "kernels/plugin.hpp"

namespace fl::ops {

FAULTLINE_SETTING(kCpuFlags, std::string, "FAULTLINE_CPU_FLAGS",
                  "sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma f16c",
                  "Instruction sets of a rank's simulated CPU (/proc/cpuinfo flags; plugins built "
                  "for others trap with SIGILL)");
FAULTLINE_SETTING(kJitIsa, std::string, "FAULTLINE_JIT_ISA", "native",
                  "Instruction set JIT-built plugins target: native (the best the building "
                  "rank's CPU has) or one of avx512f, avx2, avx, sse4_2, sse2");

namespace {
std::mutex g_mu;
std::map<std::string, std::string> g_plugin_isa;  // plugin -> the instruction set it needs

std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}
}  // namespace

const std::vector<std::string>& known_isas() {
  static const std::vector<std::string> all = {"avx512f", "avx2", "avx", "sse4_2", "sse2"};
  return all;
}

bool cpu_has(const std::string& isa) {
  if (isa.empty() || isa == "sse2") return true;  // x86-64's baseline
  const auto flags = words(kCpuFlags.get());
  return std::find(flags.begin(), flags.end(), isa) != flags.end();
}

std::string jit_target_isa() {
  const std::string want = kJitIsa.get();
  if (want != "native") {
    const auto& all = known_isas();
    if (std::find(all.begin(), all.end(), want) == all.end()) {
      raise<PluginError>("FAULTLINE_JIT_ISA='{}' is not allowed (allowed: native, {})", want,
                         fmt::join(all, ", "));
    }
    return want;
  }
  for (const auto& isa : known_isas()) {
    if (cpu_has(isa)) return isa;
  }
  return "sse2";
}

void note_plugin_isa(const std::string& plugin, const std::string& isa) {
  std::lock_guard lock(g_mu);
  g_plugin_isa[plugin] = isa;
}

void before_plugin_kernel(const std::string& plugin) {
  std::string isa;
  {
    std::lock_guard lock(g_mu);
    auto it = g_plugin_isa.find(plugin);
    if (it == g_plugin_isa.end()) return;
    isa = it->second;
  }
  if (cpu_has(isa)) return;
  // What the kernel log says of such a trap, then the trap itself.
  const std::string line = fmt::format(
      "traps: pid {} trap invalid opcode in libfl_{}.so: an {} instruction, which this CPU does "
      "not have (its flags: {}; FAULTLINE_CPU_FLAGS)\n",
      ::getpid(), plugin, isa, kCpuFlags.get());
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  __builtin_trap();
}

}  // namespace fl::ops
