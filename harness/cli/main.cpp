// faultline: the command line. `faultline settings` prints every FAULTLINE_ setting (and the
// launcher variables the workers read) with type, default, current value and description;
// `faultline sites` lists the fault sites compiled into the workloads.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "base/settings.hpp"
#include "injector/plan.hpp"
#include "injector/site.hpp"
#include "workloads/comm/bootstrap.hpp"
#include "workloads/comm/mpi_communicator.hpp"
#include "workloads/infer/engine.hpp"
#include "workloads/train/trainer.hpp"

namespace {

// Referencing the workloads' entry points links their settings and fault sites into this binary.
__attribute__((used)) auto* const kLinkBootstrap = &fl::comm::bootstrap_worker;
__attribute__((used)) auto* const kLinkMpi = &fl::comm::MpiCommunicator::create_world;
__attribute__((used)) const auto kLinkTrain = &fl::train::Trainer::run;
__attribute__((used)) const auto kLinkInfer = &fl::infer::InferenceEngine::generate;
__attribute__((used)) auto* const kLinkPlan = &fl::fault::arm_from_env;

int print_settings(bool json) {
  auto all = fl::SettingsRegistry::instance().all();
  if (json) {
    auto arr = nlohmann::json::array();
    for (auto& s : all) {
      std::string cur;
      try {
        cur = s.current();
      } catch (const std::exception& e) {
        cur = std::string("error: ") + e.what();
      }
      arr.push_back({{"env", s.env},
                     {"type", s.type},
                     {"default", s.default_value},
                     {"current", cur},
                     {"description", s.description}});
    }
    std::printf("%s\n", arr.dump(2).c_str());
    return 0;
  }
  std::printf("%-32s %-7s %-12s %-12s %s\n", "variable", "type", "default", "current",
              "description");
  int status = 0;
  for (auto& s : all) {
    std::string cur;
    try {
      cur = s.current();
    } catch (const std::exception& e) {
      cur = "INVALID";
      std::fprintf(stderr, "faultline: %s\n", e.what());
      status = 2;
    }
    std::printf("%-32s %-7s %-12s %-12s %s\n", s.env.c_str(), s.type.c_str(),
                s.default_value.empty() ? "\"\"" : s.default_value.c_str(),
                cur.empty() ? "\"\"" : cur.c_str(), s.description.c_str());
  }
  return status;
}

int print_sites(bool json) {
  auto sites = fl::fault::all_sites();
  if (json) {
    auto arr = nlohmann::json::array();
    for (auto* s : sites) arr.push_back({{"name", s->name}, {"file", s->file}, {"line", s->line}});
    std::printf("%s\n", arr.dump(2).c_str());
    return 0;
  }
  std::printf("%-24s %s\n", "site", "location");
  for (auto* s : sites) std::printf("%-24s %s:%d\n", s->name, s->file, s->line);
  std::printf("# %zu fault sites%s\n", sites.size(),
#if defined(FAULTLINE_NO_FAULT_SITES)
              " (this build compiled them out)"
#else
              ""
#endif
  );
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"faultline: reproduce distributed deep-learning failures on purpose"};
  app.require_subcommand(1);
  bool json = false;
  auto* settings = app.add_subcommand("settings", "Print every setting with its current value");
  settings->add_flag("--json", json, "JSON output");
  auto* sites = app.add_subcommand("sites", "List the fault sites compiled into this build");
  sites->add_flag("--json", json, "JSON output");
  CLI11_PARSE(app, argc, argv);
  if (settings->parsed()) return print_settings(json);
  if (sites->parsed()) return print_sites(json);
  return 2;
}
