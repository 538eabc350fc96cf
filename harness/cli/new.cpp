// `faultline new SYMPTOM_ID|TEMPLATE [-o FILE]`: a scenario to start from — the catalogue's
// scenario of a symptom (scenarios/symptoms, `faultline catalog`) or a template (a clean training,
// inference or command job to add a fault to) — written to a new file that the loader has
// checked, with the editor's schema line (docs/scenario.schema.json). Never overwrites a file.
#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/cli/command.hpp"
#include "harness/model/build_paths.hpp"
#include "harness/model/scenario.hpp"
#include "harness/suite/suite.hpp"

namespace fl::cli {
namespace {

namespace fs = std::filesystem;

struct Template {
  const char* name;
  const char* summary;
  const char* text;
};

// Each loads as it is (ctest cli: NewScaffoldsScenariosThatValidate).
constexpr Template kTemplates[] = {
    {"train", "a 2-rank data-parallel training run with one fault (a frozen rank) to edit",
     R"(name: my-train-scenario
description: >
  What the scenario reproduces, in a sentence or two: the cause, what the job shows, the fix.
reference: {kind: stands-for, mechanism: "the mechanism this scenario builds", symptom: "4.11"}
topology: {ranks: 2, dp: 2}
workload: {model: tiny, steps: 10}
# What to break (docs/injector.md, `faultline keys`): e.g. freeze rank 1 after step 3.
faults:
  - {signal: STOP, rank: 1, step: 3}
expect: {symptom: "4.11", oracle: hang, hang_s: 4, ranks: [1]}
# What clears it: `faultline run FILE --fix`.
fix:
  faults: []
  expect: {absent: true}
timeouts: {run_s: 60}
seed: 7
)"},
    {"infer", "tensor-parallel serving from a checkpoint a preparation run trains",
     R"(name: my-infer-scenario
description: >
  What the scenario reproduces, in a sentence or two: the cause, what the job shows, the fix.
topology: {ranks: 2, tp: 2}
workload: {kind: infer, checkpoint: {resume: true},
           infer: {requests: 4, prompt_len: 4, new_tokens: 12}}
prepare:
  workload: {kind: train, steps: 20, checkpoint: {every: 20, resume: false}}
# What to break (docs/injector.md, `faultline keys`).
faults: []
expect: {oracle: completed}
seed: 7
)"},
    {"command",
     "any program as the job, with torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR)",
     R"(name: my-command-scenario
description: >
  What the scenario reproduces, in a sentence or two: the cause, what the job shows, the fix.
topology: {ranks: 2, dp: 2}
workload:
  kind: command
  command: ["/usr/bin/python3", "{source_dir}/workloads/torch/ddp_train.py", "--steps", "10"]
# What to break (docs/injector.md, `faultline keys`).
faults: []
expect: {oracle: completed}
timeouts: {run_s: 120, rendezvous_ms: 60000}
seed: 7
)"},
};

struct NewArgs {
  std::string what, out;
  std::string scenarios_dir = std::string(harness::this_build::source_dir()) + "/scenarios";
};

std::string template_list() {
  std::vector<std::string> names;
  for (const auto& t : kTemplates) names.push_back(t.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

// The catalogue's scenarios of `symptom`, by file name.
std::vector<std::string> catalogue_scenarios(const std::string& dir, const std::string& symptom) {
  std::vector<std::string> files;
  for (const auto& f : harness::scenario_files_under(dir + "/symptoms")) {
    const auto s = harness::load_scenario(f);
    if ((!s.ref.symptom.empty() ? s.ref.symptom : s.expect.symptom) == symptom) files.push_back(f);
  }
  std::sort(files.begin(), files.end());
  return files;
}

struct Scaffold {
  std::string text, name, from;
};

Scaffold scaffold_of(const NewArgs& a) {
  for (const auto& t : kTemplates) {
    if (a.what == t.name) return {t.text, "", fmt::format("template {} ({})", t.name, t.summary)};
  }
  const auto* symptom = harness::taxonomy().symptom(a.what);
  if (symptom == nullptr) {
    throw harness::UsageError(fmt::format(
        "new: '{}' is neither a symptom id of the taxonomy (e.g. 4.11; `faultline catalog` lists "
        "them) nor a template (allowed: {})",
        a.what, template_list()));
  }
  const auto files = catalogue_scenarios(a.scenarios_dir, a.what);
  if (files.empty()) {
    throw harness::UsageError(
        fmt::format("new: symptom {} ({}) has no scenario in {}/symptoms yet; start from a "
                    "template (allowed: {})",
                    a.what, symptom->name, a.scenarios_dir, template_list()));
  }
  std::ifstream in(files[0]);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  std::string from = fmt::format("{} (symptom {}: {}", files[0], a.what, symptom->name);
  if (files.size() > 1) from += fmt::format("; {} more in the catalogue", files.size() - 1);
  return {text, harness::load_scenario(files[0]).name, from + ")"};
}

// The file's name, when it is a valid scenario name, replaces the scaffold's.
std::string renamed(const std::string& text, const std::string& out) {
  const std::string stem = fs::path(out).stem().string();
  static const std::regex valid("[A-Za-z0-9_.-]+");
  if (!std::regex_match(stem, valid)) return text;
  static const std::regex name_line("^name: .*$", std::regex::multiline);
  return std::regex_replace(text, name_line, "name: " + stem,
                            std::regex_constants::format_first_only);
}

// The schema line: relative to the file inside the checkout (it moves with it), else absolute.
std::string schema_path(const std::string& out) {
  const fs::path source = harness::this_build::source_dir();
  const fs::path schema = source / "docs/scenario.schema.json";
  const fs::path dir = fs::absolute(out).parent_path().lexically_normal();
  const fs::path inside = dir.lexically_relative(source);
  if (inside.empty() || *inside.begin() == "..") return schema.string();
  return schema.lexically_relative(dir).string();
}

std::string header(const Scaffold& s, const std::string& out) {
  return fmt::format(
      "# yaml-language-server: $schema={}\n"
      "# Scaffolded by `faultline new` from {}.\n"
      "# Keys: `faultline keys`, docs/scenarios.md; check: `faultline validate {}`.\n",
      schema_path(out), s.from, out);
}

// Written only if the file does not exist (O_EXCL), then loaded; removed again if it does not
// load, so what stays behind validates.
void write_new(const std::string& out, const std::string& text) {
  const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0 && errno == EEXIST) {
    throw harness::UsageError(fmt::format(
        "new: {} exists; faultline new never overwrites a file (choose another -o)", out));
  }
  if (fd < 0) {
    throw harness::UsageError(
        fmt::format("new: {}: cannot create the file: {}", out, std::strerror(errno)));
  }
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  try {
    if (!ok) throw harness::UsageError(fmt::format("new: {}: short write", out));
    harness::load_scenario(out);
  } catch (...) {
    ::unlink(out.c_str());
    throw;
  }
}

int scaffold(const NewArgs& a) {
  Scaffold s = scaffold_of(a);
  const std::string name =
      s.name.empty() ? fmt::format("my-{}-scenario", a.what) : fmt::format("my-{}", s.name);
  const std::string out = a.out.empty() ? name + ".yaml" : a.out;
  write_new(out, header(s, out) + renamed(s.text, out));
  std::printf("wrote %s from %s\nrun it: faultline run %s\n", out.c_str(), s.from.c_str(),
              out.c_str());
  return 0;
}

Handler setup_new(CLI::App& sub) {
  auto a = std::make_shared<NewArgs>();
  sub.add_option("what", a->what,
                 "A symptom id (e.g. 4.11: the catalogue's scenario of it) or a template: " +
                     template_list())
      ->required();
  sub.add_option("-o,--output", a->out,
                 "The scenario file to write (must not exist; default: my-NAME.yaml here); its "
                 "name becomes the scenario's");
  return [a] { return scaffold(*a); };
}

}  // namespace

const Command& new_command() {
  static const Command c{
      "new", "Write a new scenario from a symptom's catalogue scenario or a template", setup_new};
  return c;
}

}  // namespace fl::cli
