#include "harness/launch/tools.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/control_auth.hpp"
#include "base/error.hpp"
#include "harness/model/build_paths.hpp"

namespace fl::harness {

namespace fs = std::filesystem;

const std::vector<std::string>& baseline_detectors() {
  // harness/detectors/CMakeLists.txt's FAULTLINE_DETECTORS, comma-separated.
  static const std::vector<std::string> d = [] {
    std::vector<std::string> names;
    std::istringstream in(FAULTLINE_DETECTORS);
    for (std::string n; std::getline(in, n, ',');) names.push_back(n);
    return names;
  }();
  return d;
}

const std::vector<std::string>& recovery_policies() {
  static const std::vector<std::string> p = {"restart", "shrink", "microbatch", "skip-batch",
                                             "reset-scale"};
  return p;
}

namespace {

std::vector<std::string> split_words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// A program named with a path is taken relative to the harness's directory (tools run in
// RUN_DIR/tools); a bare name is looked up on PATH when the tool starts.
std::vector<std::string> program(std::vector<std::string> words, const char* what) {
  if (words[0].find('/') != std::string::npos) {
    const fs::path p = fs::absolute(words[0]);
    if (::access(p.c_str(), X_OK) != 0) {
      raise<ConfigError>("{} '{}': {} is not an executable file", what, words[0], p.string());
    }
    words[0] = p.string();
  }
  return words;
}

bool is_one_of(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

std::vector<ToolCommand> resolve_tools(const std::vector<std::string>& detectors,
                                       const std::string& recovery) {
  std::vector<ToolCommand> out;
  std::set<std::string> names;
  auto add = [&](ToolCommand t) {
    std::string base = t.name;
    for (int i = 2; names.count(t.name); ++i) t.name = fmt::format("{}-{}", base, i);
    names.insert(t.name);
    out.push_back(std::move(t));
  };
  auto baseline = [](const std::string& d) {
    return ToolCommand{d, {fmt::format("{}/fl-detect-{}", this_build::tools_dir(), d)}, false};
  };
  for (const auto& spec : detectors) {
    auto words = split_words(spec);
    if (words.empty())
      raise<ConfigError>(
          "detector: an empty command (allowed: a baseline "
          "name, baseline, or a command line)");
    if (words.size() == 1 && words[0] == "baseline") {
      for (const auto& d : baseline_detectors()) add(baseline(d));
      continue;
    }
    if (is_one_of(baseline_detectors(), words[0])) {
      ToolCommand t = baseline(words[0]);
      t.argv.insert(t.argv.end(), words.begin() + 1, words.end());
      // "hang --floor-s 2" reports as "hang,floor-s=2": a sweep's variants stay apart.
      for (size_t i = 1; i < words.size(); ++i) {
        t.name += words[i].rfind("--", 0) == 0 ? "," + words[i].substr(2) : "=" + words[i];
      }
      add(std::move(t));
      continue;
    }
    add({fs::path(words[0]).filename().string(), program(words, "detector"), false});
  }
  if (!recovery.empty()) {
    auto words = split_words(recovery);
    if (words.empty()) raise<ConfigError>("recovery: an empty command");
    if (is_one_of(recovery_policies(), words[0])) {
      std::vector<std::string> argv{fmt::format("{}/fl-recover", this_build::tools_dir()),
                                    "--policy", words[0]};
      argv.insert(argv.end(), words.begin() + 1, words.end());
      add({"recover", argv, true});
    } else {
      add({fs::path(words[0]).filename().string(), program(words, "recovery"), true});
    }
  }
  return out;
}

std::vector<std::string> tool_env(const ToolCommand& t, const std::string& control_addr,
                                  const std::string& secret, const std::string& run_dir) {
  return {"FAULTLINE_CONTROL_ADDR=" + control_addr, std::string(kControlSecretEnv) + "=" + secret,
          "FAULTLINE_TOOL_NAME=" + t.name, "FAULTLINE_RUN_DIR=" + run_dir,
          std::string("FAULTLINE_PYTHON_PROTO=") + this_build::python_proto_dir()};
}

}  // namespace fl::harness
