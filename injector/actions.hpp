// The actions of the fault-plan grammar as one table (as fail-rs lists its actions): one row per
// action with its name, the argument it takes, what it does and where it is meant to be used, and
// the function that does it. The parser checks a term's argument against its row; an armed site
// that fires runs its row's function. Adding an action is one enum value in plan.hpp and one row.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "injector/plan.hpp"
#include "injector/site.hpp"

namespace fl::fault {

// What goes between the parentheses of `action(arg)`.
enum class ActionArg : uint8_t {
  kText,            // optional; any text, kept in the fired log (crash reads a signal number)
  kNumber,          // optional; a number when given
  kRequiredNumber,  // a number, required
  kRequiredDtype,   // a dtype name (fp32, fp16, bf16, fp64, int32, int64, uint8), required
};

struct ActionSpec {
  Action action;
  std::string_view name;
  ActionArg arg;
  std::string_view where;  // the sites it is meant for
  // Does it: `key` seeds every random choice (which element, which bit); returns the verdict for
  // the site. May sleep, block, or end the process.
  Verdict (*apply)(const Term& t, SiteContext& ctx, uint64_t key);
  std::string_view effect;  // what happens when it fires, in a sentence
};

// Every action, in the order of the Action enum.
std::span<const ActionSpec> action_table();
// The row of `name`, or nullptr.
const ActionSpec* find_action(std::string_view name);
const ActionSpec& action_spec(Action a);

// Releases the sites that `pause` holds: arm() and disarm() call it (a new plan or none).
void release_paused_sites();

}  // namespace fl::fault
