// args: a rank's (or every rank's) launch command differs: extra arguments come last and win.
#include <fmt/format.h>

#include "harness/faults/fault.hpp"
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
  std::unique_ptr<Fault> parse(const ParseContext&, const YAML::Node& item) const override {
    auto f = std::make_unique<ArgsFault>();
    for (const auto& a : item["args"]) f->args.push_back(a.as<std::string>());
    return f;
  }
};

}  // namespace

const FaultKind& args_kind() {
  static const ArgsKind k;
  return k;
}

}  // namespace fl::harness::faults
