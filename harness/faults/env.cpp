// env: a rank's (or every rank's) launch environment differs: variables set, replaced or removed.
#include <fmt/format.h>

#include "harness/faults/fault.hpp"
#include "harness/model/key_checks.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::faults {
namespace {

class EnvFault : public FaultOf<EnvFault> {
 public:
  std::map<std::string, std::string> set;
  std::vector<std::string> unset;
  nlohmann::json params() const override { return {{"set", set}, {"unset", unset}}; }
  void setup(Host& h) override {
    std::vector<std::string> what;
    for (auto& [k, v] : set) what.push_back(k + "=" + v);
    for (auto& k : unset) what.push_back("unset " + k);
    std::string shown;
    for (const auto& w : what) shown += (shown.empty() ? "" : ", ") + w;
    h.record("env", {{"set", set}, {"unset", unset}}, rank,
             fmt::format("launch environment of {} changed: {}",
                         rank < 0 ? "every rank" : "rank " + std::to_string(rank),
                         shown.empty() ? "nothing" : shown));
  }
  void adjust_rank(const Host&, int r, Launch& l) const override {
    if (rank >= 0 && rank != r) return;
    for (auto& [k, v] : set) l.env[k] = v;
    for (auto& k : unset) {
      l.env.erase(k);
      l.unset.push_back(k);
    }
  }
};

class EnvKind : public FaultKind {
 public:
  std::string key() const override { return "env"; }
  std::vector<KeySpec> keys() const override {
    return {{"faults[].env", KeyType::kSection, "",
             "Change the launch environment of `rank` (or every rank)"},
            {"faults[].env.set", KeyType::kStringMap, "{}", "Variables to set or replace"},
            {"faults[].env.unset", KeyType::kList, "[]", "Variables to remove"}};
  }
  // Names and values the launch would refuse are refused here (launch_inputs.cpp).
  std::unique_ptr<Fault> parse(const ParseContext& c, const YAML::Node& item) const override {
    auto f = std::make_unique<EnvFault>();
    const auto e = item["env"];
    if (e["set"]) {
      for (auto it = e["set"].begin(); it != e["set"].end(); ++it) {
        const std::string k = it->first.Scalar(), at = c.at + ".env.set." + k;
        loader::check_env_name(c.file, it->first, at, k);
        loader::check_fault_app_file_value(c.file, it->second, at, it->second.Scalar(), c.s);
        f->set[k] = it->second.Scalar();
      }
    }
    if (e["unset"]) {
      for (size_t i = 0; i < e["unset"].size(); ++i) {
        const std::string k = e["unset"][i].as<std::string>();
        loader::check_env_name(c.file, e["unset"][i], fmt::format("{}.env.unset[{}]", c.at, i), k);
        f->unset.push_back(k);
      }
    }
    return f;
  }
};

}  // namespace

const FaultKind& env_kind() {
  static const EnvKind k;
  return k;
}

}  // namespace fl::harness::faults
