// restart: every rank is stopped and relaunched from the latest checkpoint (a job scheduler's
// requeue, an operator's restart). Beside another fault, `restart: true` restarts right after it.
#include <fmt/format.h>

#include "harness/faults/fault.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::faults {
namespace {

class RestartFault : public FaultOf<RestartFault> {
 public:
  nlohmann::json params() const override { return nlohmann::json::object(); }
  bool timed() const override { return true; }
  bool inject(Host& h, const Progress*, When now) override {
    h.record("restart", {{"when", when_name(now)}}, -1,
             fmt::format("restart from the latest checkpoint ({})", when_name(now)));
    return true;
  }
};

class RestartKind : public FaultKind {
 public:
  std::string key() const override { return "restart"; }
  std::vector<KeySpec> keys() const override {
    return {{"faults[].restart", KeyType::kBool, "false",
             "Restart every rank from the latest checkpoint (`at: step` or `exit`); with `file:`, "
             "right after damaging it"}};
  }
  std::vector<When> allowed_at() const override { return {When::kStep, When::kExit}; }
  std::unique_ptr<Fault> parse(const ParseContext&, const YAML::Node& item) const override {
    if (!item["restart"].as<bool>()) return nullptr;
    return std::make_unique<RestartFault>();
  }
};

}  // namespace

const FaultKind& restart_kind() {
  static const RestartKind k;
  return k;
}

}  // namespace fl::harness::faults
