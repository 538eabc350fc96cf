// args: a rank's (or every rank's) launch command differs: extra arguments come last and win.
// Under the deepspeed launcher only every rank's: DeepSpeed's launch.py starts each process of a
// node with one command (the script and the user's arguments, `--local_rank` the only difference),
// so one rank's own launch line is not something a `deepspeed` job can have.
#include <fmt/format.h>

#include "harness/faults/fault.hpp"
#include "harness/model/key_checks.hpp"
#include "harness/process/supervisor.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::faults {
namespace {

class ArgsFault : public FaultOf<ArgsFault> {
 public:
  std::vector<std::string> args;
  nlohmann::json params() const override { return {{"args", args}}; }
  void setup(Host& h) override {
    std::string shown;
    for (const auto& a : args) shown += (shown.empty() ? "" : " ") + a;
    h.record("args", {{"args", args}}, rank,
             fmt::format("launch command of {} changed: {} appended (a later option wins)",
                         rank < 0 ? "every rank" : "rank " + std::to_string(rank), shown));
  }
  void adjust_rank(const Host&, int r, Launch& l) const override {
    if (rank >= 0 && rank != r) return;
    l.spec.argv.insert(l.spec.argv.end(), args.begin(), args.end());
  }
};

class ArgsKind : public FaultKind {
 public:
  std::string key() const override { return "args"; }
  std::vector<KeySpec> keys() const override {
    return {{"faults[].args", KeyType::kList, "",
             "Arguments appended to `rank`'s (or every rank's) command: its launch line differs; "
             "a later option wins"}};
  }
  std::unique_ptr<Fault> parse(const ParseContext& c, const YAML::Node& item) const override {
    auto f = std::make_unique<ArgsFault>();
    for (size_t i = 0; i < item["args"].size(); ++i) {
      f->args.push_back(item["args"][i].as<std::string>());
      if (c.s.topo.launcher == "mpirun") {  // every argument goes in the rank's app-file line
        loader::check_app_file_arg(c.file, item["args"][i], fmt::format("{}.args[{}]", c.at, i),
                                   f->args.back());
      }
    }
    if (c.s.topo.launcher == "deepspeed" && item["rank"] && item["rank"].as<int>() >= 0) {
      loader::fail_at(c.file, item["rank"], c.at + ".rank",
                      "one rank's own arguments need topology.launcher: local, mpirun or srun "
                      "(DeepSpeed's launcher starts every rank with the same arguments); leave "
                      "rank out to change every rank's command");
    }
    return f;
  }
};

}  // namespace

const FaultKind& args_kind() {
  static const ArgsKind k;
  return k;
}

}  // namespace fl::harness::faults
