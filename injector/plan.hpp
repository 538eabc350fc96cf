// Fault plans: what armed sites do. A plan is parsed from the fail(9)/fail-rs style grammar
//
//   plan    := entry (';' entry)*
//   entry   := site ('[' filter (',' filter)* ']')? '=' term ('->' term)*
//   filter  := key '=' value        key: rank, node, step, seq, micro_batch, eval, group, skip,
//                                   every; value: N, or A-B for the numeric targets
//   term    := [P '%'] [N '*'] action ['(' arg ')']
//
// e.g. FAULTLINE_FAULTS="comm.all_reduce[rank=2,seq=3]=drop;optimizer.step[step=5-9]=50%nan".
// A term with N* fires at most N times, then the next term takes over; P% fires with that
// probability. Every random choice (the P% draw, which element, which bit) comes from a
// counter-based generator keyed by (seed, site, rank, hit), so the same seed fires the same hits.
// Every firing is appended to the fired log (site, rank, step, hit, eval, action). `eval` counts
// every evaluation of the site name in the process while a plan is armed, whatever the filters,
// so `site[rank=R,eval=N]=action` fires exactly that evaluation again: replay_plan() turns a fired
// log into such a plan. The actions, one row each (argument, effect, where): actions.hpp.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "injector/site.hpp"

namespace fl::fault {

class PlanError : public Error {
 public:
  using Error::Error;
};

enum class Action : uint8_t {
  kOff,
  kError,
  kSleep,
  kHang,
  kPause,
  kCrash,
  kExit,
  kOom,
  kLeak,
  kNan,
  kInf,
  kBitflip,
  kScale,
  kCorrupt,
  kTruncate,
  kDrop,
  kReorder,
  kResize,
  kRetype,
  kDelay,
  kSkip,       // a framework call is not made on this rank (same verdict as drop)
  kRepeat,     // a framework call is made twice (model forward, evaluation)
  kDuplicate,  // a data-loader sample is yielded twice
};

std::string_view action_name(Action a);

struct Term {
  std::optional<double> percent;  // fire probability in %, or always
  std::optional<int64_t> count;   // at most this many firings, then the next term
  Action action = Action::kOff;
  std::string arg;    // raw argument text ("" if none)
  double number = 0;  // the argument as a number when it is one
};

struct Range {
  int64_t lo = INT64_MIN, hi = INT64_MAX;
  bool contains(int64_t v) const { return v >= lo && v <= hi; }
};

struct Entry {
  std::string site;
  std::optional<Range> rank, node, step, seq, micro_batch, eval;
  std::optional<std::string> group;
  int64_t skip = 0;
  int64_t every = 1;
  std::vector<Term> terms;
};

struct Plan {
  std::vector<Entry> entries;
};

// Parses `text`; errors name `origin` (e.g. "FAULTLINE_FAULTS"), the column and what was expected.
Plan parse_plan(const std::string& text, const std::string& origin = "fault plan");
std::string to_string(const Plan& plan);

struct FiredRecord {
  std::string site;
  int rank = -1;
  int64_t step = -1;
  int64_t seq = -1;
  uint64_t hit = 0;
  uint64_t eval = 0;
  std::string action;
};

// A plan that fires exactly the firings in `records` (probabilities and counts removed): the
// replay of a run's fired log.
std::string replay_plan(const std::vector<FiredRecord>& records);
// Reads a fired log written by arm() (one JSON object per line; a torn last line is skipped).
std::vector<FiredRecord> read_fired_log(const std::string& path);

// Arms `plan` for this process (replacing any other). `fired_log_path` (may be empty) receives
// one JSON line per firing.
void arm(Plan plan, uint64_t seed, const std::string& fired_log_path = "");
void disarm();
// Arms from FAULTLINE_FAULTS / FAULTLINE_FAULT_SEED / FAULTLINE_FIRED_LOG if set; returns whether
// a plan was armed. Throws PlanError on a malformed plan.
bool arm_from_env();
// Arms `text` (parsed with `origin` in its errors) with `seed`, logging firings to
// FAULTLINE_FIRED_LOG like arm_from_env: the harness's live arming goes through this.
void arm_text(const std::string& text, const std::string& origin, uint64_t seed);
std::vector<FiredRecord> fired_log();
// Called after each firing (outside the injector's lock, before the action runs): telemetry
// reports firings to the harness through this. nullptr removes it.
void set_fired_observer(std::function<void(const FiredRecord&)> observer);
// The plan armed now, in the grammar (empty when none).
std::string armed_plan();

}  // namespace fl::fault
