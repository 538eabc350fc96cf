#include "harness/run/oracles.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/ranks.hpp"
#include "base/stats.hpp"

namespace fl::harness {

namespace {

constexpr double kNs = 1e9;

struct Facts {
  int64_t t_start = -1;  // first launch
  int64_t t_end = -1;    // run_end
  int world = 0;
  bool run_timeout = false;
  struct Exit {
    int rank;
    int64_t t;
    std::string klass;
    int code;
    bool signaled;
    bool by_harness;
  };
  std::vector<Exit> exits;
  std::map<int, int64_t> launch_t, exit_t;
  std::set<int> oom_killed;  // ranks the kernel's OOM killer ended (their memory cgroup says so)
  struct Step {
    int rank;
    int64_t t, step;
    std::optional<double> loss;  // nullopt: not finite
    double step_time;
    double interval;  // since the rank's previous step ended (older histories: step_time)
    double comm;      // the part of it spent inside collectives (older histories: 0)
    double compute() const { return std::max(0.0, interval - comm); }
  };
  std::vector<Step> steps;
  struct Err {
    int rank;
    int64_t t, step;
    std::string klass, message;
  };
  std::vector<Err> errors;
  struct Line {
    int rank;
    int64_t t;
    std::string text;
  };
  std::vector<Line> lines;
  struct Coll {
    int rank;
    int64_t t, step;
    std::string op, group, state;
    int64_t seq;
  };
  std::vector<Coll> timeouts;
  struct Out {
    int rank;
    int64_t t;
    std::string group, digest;
  };
  std::vector<Out> outputs;
};

Facts gather(const std::vector<HistoryEvent>& h) {
  Facts f;
  for (const auto& e : h) {
    nlohmann::json d = nlohmann::json::parse(e.data_json, nullptr, false);
    if (d.is_discarded()) d = nlohmann::json::object();
    if (e.source == "harness") {
      if (e.kind == "run_start") f.world = d.value("ranks", 0);
      if (e.kind == "launch") {
        if (f.t_start < 0) f.t_start = e.t_ns;
        if (e.rank >= 0) f.launch_t[e.rank] = e.t_ns;
      }
      if (e.kind == "run_end") f.t_end = e.t_ns;
      if (e.kind == "restart" && d.value("ranks", 0) > 0 && d.value("ranks", 0) < f.world) {
        // A restart into a smaller world (recovery by shrinking): the ranks left out are no
        // longer part of the job.
        f.world = d.value("ranks", 0);
        std::erase_if(f.exits, [&](const Facts::Exit& x) { return x.rank >= f.world; });
      }
      if (e.kind == "run_timeout") f.run_timeout = true;
      if (e.kind == "oom_kill" && e.rank >= 0) f.oom_killed.insert(e.rank);
      if (e.kind == "rank_exit" && e.rank >= 0) {
        f.exits.push_back({e.rank, e.t_ns, d.value("class", ""), d.value("code", 0),
                           d.value("signaled", false), d.value("by_harness", false)});
        f.exit_t[e.rank] = e.t_ns;
      }
      if (e.kind == "output") f.lines.push_back({e.rank, e.t_ns, d.value("line", "")});
      continue;
    }
    if (e.source != "rank") continue;
    if (e.kind == "step") {
      std::optional<double> loss;
      if (d.contains("loss") && d["loss"].is_number()) {
        const double l = d["loss"].get<double>();
        if (std::isfinite(l)) loss = l;
      }
      const double st = d.value("step_time_s", 0.0);
      f.steps.push_back(
          {e.rank, e.t_ns, e.step, loss, st, d.value("interval_s", st), d.value("comm_s", 0.0)});
    } else if (e.kind == "error") {
      f.errors.push_back({e.rank, e.t_ns, e.step, d.value("class", ""), d.value("message", "")});
    } else if (e.kind == "collective" && d.value("state", "") == "timed-out") {
      f.timeouts.push_back({e.rank, e.t_ns, e.step, d.value("op", ""), d.value("group", ""),
                            d.value("state", ""), d.value("seq", int64_t{-1})});
    } else if (e.kind == "output") {
      f.outputs.push_back({e.rank, e.t_ns, d.value("group", "all"), d.value("digest", "")});
    } else if (e.kind == "exit" && !f.exit_t.count(e.rank)) {
      // mpirun launcher: the worker's own exit event is the only per-rank end we see.
      const int code = d.value("exit_code", 0);
      f.exits.push_back({e.rank, e.t_ns, code == 0 ? "ok" : "error", code, false, false});
    }
  }
  if (f.world == 0) {
    for (auto& [r, t] : f.launch_t) f.world = std::max(f.world, r + 1);
  }
  return f;
}

struct Hit {
  int64_t t;
  int64_t step = -1;
  std::vector<int> ranks;
  std::string what;
};

bool rank_ok(const Expect& x, int rank) {
  return x.ranks.empty() || std::count(x.ranks.begin(), x.ranks.end(), rank) > 0;
}

// How many ordinary step intervals a gap must span to be a hang, at least (besides hang_s): a
// job whose steps all take longer on a busy host needs a longer gap before it counts as stuck.
constexpr double kHangIntervals = 5;

// The hang test: a gap of at least hang_s, and of kHangIntervals times the job's median step
// interval so far, with no step progress while some rank is alive. The clock starts at the
// job's first step: before it the ranks are still starting (a job stuck there is a setup
// failure, judged by comm_timeout or exit oracles), and how long starting takes depends on the
// host's load.
std::optional<Hit> find_hang(const Expect& x, const Facts& f, int64_t end_ns) {
  if (f.t_start < 0 || f.steps.empty()) return std::nullopt;
  std::vector<int64_t> progress;
  for (auto& s : f.steps) progress.push_back(s.t);
  std::sort(progress.begin(), progress.end());
  // The job's pace: when each step number was first reported, in order.
  std::map<int64_t, int64_t> first_t;
  for (auto& s : f.steps) {
    auto [it, fresh] = first_t.emplace(s.step, s.t);
    if (!fresh) it->second = std::min(it->second, s.t);
  }
  progress.push_back(end_ns);
  const auto floor_need = static_cast<int64_t>(x.hang_s * kNs);
  for (size_t i = 0; i + 1 < progress.size(); ++i) {
    if (progress[i + 1] - progress[i] < floor_need) continue;
    std::vector<double> intervals;
    int64_t prev = -1;
    for (auto& [st, t] : first_t) {
      if (t > progress[i]) break;
      if (prev >= 0) intervals.push_back(static_cast<double>(t - prev));
      prev = t;
    }
    const int64_t need =
        std::max(floor_need, static_cast<int64_t>(kHangIntervals * stats::upper_median(intervals)));
    if (progress[i + 1] - progress[i] < need) continue;
    const int64_t at = progress[i] + need;
    Hit h{at, -1, {}, ""};
    for (auto& [r, t] : f.launch_t) {
      const auto ex = f.exit_t.find(r);
      const bool alive = t <= progress[i] && (ex == f.exit_t.end() || ex->second > at);
      if (alive && rank_ok(x, r)) h.ranks.push_back(r);
    }
    if (h.ranks.empty()) continue;
    int64_t last = -1;
    for (auto& s : f.steps) {
      if (s.t <= progress[i]) last = std::max(last, s.step);
    }
    h.step = last;
    h.what = fmt::format("no step progress for {:.1f} s after step {} while {} stayed alive",
                         static_cast<double>(need) / kNs, last, format_ranks(h.ranks));
    return h;
  }
  return std::nullopt;
}

// Throughput: two comparisons that a busy host cancels out of, because each sets a time against
// a reference measured in the same steps of the same run.
//  - a slow rank: a rank's compute time (interval minus time in collectives) against its peers'
//    in the same steps from `split` on, relative to the same ratio before `split`;
//  - slow collectives: the job's time in collectives from `split` on against before, divided by
//    how much its compute time grew over the same windows (a host that got busier at the split
//    stretches both).
struct ThroughputEvidence {
  std::optional<Hit> hit;
  std::string absent;
  bool judgeable = true;
};

ThroughputEvidence throughput_evidence(const Expect& x, const Facts& f) {
  ThroughputEvidence ev;
  std::map<int64_t, std::map<int, const Facts::Step*>> by_step;
  for (auto& s : f.steps) by_step[s.step][s.rank] = &s;
  std::set<int> ranks;
  for (auto& s : f.steps) ranks.insert(s.rank);
  if (by_step.size() < 4 || ranks.size() < 2) {
    ev.judgeable = false;
    ev.absent = fmt::format("{} steps on {} ranks recorded: too few to compare", by_step.size(),
                            ranks.size());
    return ev;
  }
  const int64_t first_step = by_step.begin()->first;
  const int64_t split =
      x.after_step >= 0 ? x.after_step : first_step + static_cast<int64_t>(by_step.size()) / 3;
  // Per rank and window: compute times. Per window and step: the job's time in collectives and
  // its typical rank's compute, both as lower medians over the ranks: the rank that waited least
  // in collectives paid their own cost, not a wait for a peer that computed (or was preempted)
  // longer; with two ranks the lower compute is the one that is not slow. The first step carries
  // warm-up (allocation, first touches): left out.
  std::map<int, std::vector<double>> before_c, after_c;
  std::vector<double> before_comm, after_comm, before_n, after_n;
  constexpr double kFloor = 50e-6;  // below 50 us is timer noise, not a reference
  for (auto& [st, per_rank] : by_step) {
    if (st == first_step) continue;
    const bool after = st >= split;
    std::vector<double> cm, cp;
    for (auto& [r, s] : per_rank) {
      (after ? after_c : before_c)[r].push_back(s->compute());
      cm.push_back(s->comm);
      cp.push_back(s->compute());
    }
    (after ? after_comm : before_comm).push_back(stats::lower_median(cm));
    (after ? after_n : before_n).push_back(stats::lower_median(cp));
  }
  if (before_n.empty() || after_n.empty()) {
    ev.judgeable = false;
    ev.absent = fmt::format("not enough steps on both sides of step {}", split);
    return ev;
  }
  int64_t t_at = -1;
  for (auto& s : f.steps) {
    if (s.step >= split && (t_at < 0 || s.t < t_at)) t_at = s.t;
  }
  // A slow rank.
  auto peer_ratio = [&](std::map<int, std::vector<double>>& c, int r) {
    std::vector<double> peers;
    for (auto& [q, v] : c) {
      if (q != r && !v.empty()) peers.push_back(stats::upper_median(v));
    }
    if (peers.empty() || !c.count(r) || c[r].empty()) return 0.0;
    return stats::upper_median(c[r]) / std::max(kFloor, stats::upper_median(peers));
  };
  int slow = -1;
  double best = 0, best_after = 0, best_before = 1;
  for (int r : ranks) {
    if (!rank_ok(x, r)) continue;
    const double a = peer_ratio(after_c, r);
    // A rank that always computed more (a pipeline's last stage, say) is judged against that.
    const double b = std::max(1.0, before_c.count(r) ? peer_ratio(before_c, r) : 1.0);
    if (a / b > best) {
      best = a / b;
      best_after = a;
      best_before = b;
      slow = r;
    }
  }
  // Slow collectives (or a slow rank that every peer waits for).
  const double comm_ratio = std::max(kFloor, stats::upper_median(after_comm)) /
                            std::max(kFloor, stats::upper_median(before_comm));
  const double compute_ratio = std::max(kFloor, stats::upper_median(after_n)) /
                               std::max(kFloor, stats::upper_median(before_n));
  const double job = comm_ratio / std::max(1.0, compute_ratio);
  const std::string rank_text =
      slow >= 0 ? fmt::format(
                      "rank {} computed {:.1f}x as long as its peers from step {} ({:.1f}x "
                      "before)",
                      slow, best_after, split, best_before)
                : std::string("no rank to compare");
  const std::string job_text = fmt::format(
      "time in collectives {:.1f} ms per step from step {} vs {:.1f} ms before ({:.1f}x) while "
      "compute changed {:.1f}x",
      stats::upper_median(after_comm) * 1e3, split, stats::upper_median(before_comm) * 1e3,
      comm_ratio, compute_ratio);
  const bool by_rank = x.slowed != "collectives", by_comm = x.slowed != "rank";
  if (by_rank && slow >= 0 && best >= x.factor) {
    ev.hit = Hit{t_at,
                 split,
                 {slow},
                 fmt::format("{}, its peers waiting in collectives; {} "
                             "(threshold {}x)",
                             rank_text, job_text, x.factor)};
  } else if (by_comm && job >= x.factor) {
    std::vector<int> all;
    for (int r : ranks) {
      if (rank_ok(x, r)) all.push_back(r);
    }
    ev.hit = Hit{t_at, split, all,
                 fmt::format("collectives slowed on every rank: {}; {} (threshold {}x)", job_text,
                             rank_text, x.factor)};
  } else {
    ev.absent = fmt::format("{}; {} (threshold {}x{})", rank_text, job_text, x.factor,
                            x.slowed == "any"
                                ? ""
                                : fmt::format("; expect.slowed {}: only {} counts", x.slowed,
                                              x.slowed == "rank" ? "a rank slower than its peers"
                                                                 : "time in collectives"));
  }
  return ev;
}

}  // namespace

const std::vector<std::string>& oracle_names() {
  static const std::vector<std::string> n = {
      "completed",        "exit_class",      "error_signature",       "hang",
      "comm_timeout",     "loss_nonfinite",  "loss_divergence",       "oom",
      "checkpoint_error", "output_mismatch", "throughput_degradation"};
  return n;
}

nlohmann::json Verdict::to_json() const {
  return {{"outcome", outcome},
          {"oracle", oracle},
          {"symptom", symptom},
          {"explanation", explanation},
          {"manifested_s", manifested_s},
          {"step", step},
          {"ranks", ranks}};
}

bool hang_observed(const Expect& x, const std::vector<HistoryEvent>& history, int64_t now_ns) {
  Facts f = gather(history);
  return find_hang(x, f, now_ns).has_value();
}

namespace {
Verdict judge_one(const Expect& x, const std::vector<HistoryEvent>& history) {
  Facts f = gather(history);
  Verdict v;
  v.oracle = x.oracle;
  v.symptom = x.symptom;
  if (f.t_start < 0) {
    v.outcome = "unknown";
    v.explanation = "no rank was launched (see the harness error)";
    return v;
  }
  const bool ended = f.t_end >= 0;
  const int64_t end_ns = ended ? f.t_end : (history.empty() ? f.t_start : history.back().t_ns);
  std::optional<Hit> hit;
  std::string absent;  // what was looked for, when not found

  auto first = [&](auto&& items, auto&& pred, auto&& describe) {
    for (const auto& it : items) {
      if (rank_ok(x, it.rank) && pred(it)) {
        Hit h{it.t, -1, {it.rank}, describe(it)};
        if constexpr (requires { it.step; }) h.step = it.step;
        // Every rank showing the same thing at all: the localisation.
        for (const auto& o : items) {
          if (o.rank != it.rank && rank_ok(x, o.rank) && pred(o) &&
              !std::count(h.ranks.begin(), h.ranks.end(), o.rank)) {
            h.ranks.push_back(o.rank);
          }
        }
        std::sort(h.ranks.begin(), h.ranks.end());
        return std::optional<Hit>(h);
      }
    }
    return std::optional<Hit>();
  };
  // An error of this class; with expect.pattern, also one whose message matches it.
  auto error_of = [&](const std::string& klass, const char* what) {
    std::optional<std::regex> re;
    if (!x.pattern.empty()) re.emplace(x.pattern, std::regex::ECMAScript);
    hit = first(
        f.errors,
        [&](const Facts::Err& e) {
          return e.klass == klass && (!re || std::regex_search(e.message, *re));
        },
        [&](const Facts::Err& e) { return fmt::format("{}: {}", what, e.message); });
    absent = re ? fmt::format("no rank reported {} matching /{}/", what, x.pattern)
                : fmt::format("no rank reported {}", what);
  };

  const std::string& o = x.oracle;
  if (o == "completed") {
    std::vector<int> bad;
    std::string why;
    std::set<int> ended_ok;
    // A restarted rank is judged by how its last incarnation ended (the harness kills the
    // earlier ones to restart them).
    std::map<int, const Facts::Exit*> last_exit;
    for (auto& e : f.exits) last_exit[e.rank] = &e;
    for (auto& [r, ep] : last_exit) {
      const Facts::Exit& e = *ep;
      if (e.klass == "ok") {
        ended_ok.insert(e.rank);
      } else if (!std::count(bad.begin(), bad.end(), e.rank)) {
        bad.push_back(e.rank);
        if (why.empty()) {
          why = fmt::format(
              "rank {} ended with {} {}", e.rank, e.klass,
              e.signaled ? fmt::format("(signal {})", e.code) : fmt::format("(exit {})", e.code));
        }
      }
    }
    const int world = f.world > 0 ? f.world : static_cast<int>(f.launch_t.size());
    if (bad.empty() && !f.run_timeout && static_cast<int>(ended_ok.size()) >= world && world > 0) {
      v.outcome = "pass";
      int64_t last = -1;
      for (auto& s : f.steps) last = std::max(last, s.step);
      v.step = last;
      v.explanation = fmt::format("all {} ranks finished cleanly (last step {})", world, last);
      return v;
    }
    if (!ended && bad.empty()) {
      v.outcome = "unknown";
      v.explanation = "the history ends before the run did";
      return v;
    }
    v.outcome = "fail";
    std::sort(bad.begin(), bad.end());
    v.ranks = bad;
    v.explanation = f.run_timeout ? "the run hit its timeout" + (why.empty() ? "" : "; " + why)
                    : why.empty() ? "not every rank finished"
                                  : why;
    return v;
  } else if (o == "exit_class") {
    hit = first(
        f.exits,
        [&](const Facts::Exit& e) {
          if (e.klass == "ok") return false;
          if (x.exit_code >= 0 && (e.signaled || e.code != x.exit_code)) return false;
          if (x.exit_class == "any") return !e.by_harness;
          if (x.exit_class == "timeout") return e.by_harness && f.run_timeout;
          if (x.exit_class == "oom_kill") {
            return e.klass == "signal" && e.code == 9 && !e.by_harness &&
                   f.oom_killed.count(e.rank) > 0;
          }
          return e.klass == x.exit_class && !e.by_harness;
        },
        [&](const Facts::Exit& e) {
          return fmt::format("rank {} ended with {} ({} {})", e.rank, e.klass,
                             e.signaled ? "signal" : "exit", e.code);
        });
    absent = fmt::format("no rank ended with {}", x.exit_class);
  } else if (o == "error_signature") {
    std::regex re;
    try {
      re = std::regex(x.pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      v.outcome = "unknown";
      v.explanation =
          fmt::format("expect.pattern '{}' is not a valid regex: {}", x.pattern, e.what());
      return v;
    }
    hit = first(
        f.lines, [&](const Facts::Line& l) { return std::regex_search(l.text, re); },
        [&](const Facts::Line& l) { return fmt::format("output matched: {}", l.text); });
    absent = fmt::format("no rank printed a line matching /{}/", x.pattern);
  } else if (o == "hang") {
    hit = find_hang(x, f, end_ns);
    absent = fmt::format("step progress never stopped for {:.1f} s while ranks lived", x.hang_s);
  } else if (o == "comm_timeout") {
    hit = first(
        f.timeouts, [&](const Facts::Coll& c) { return x.op.empty() || c.op == x.op; },
        [&](const Facts::Coll& c) {
          return fmt::format("{} on group {} (seq {}) timed out", c.op, c.group, c.seq);
        });
    if (!hit) {
      hit = first(
          f.errors,
          [&](const Facts::Err& e) {
            return e.klass == "comm timeout" &&
                   (x.op.empty() || e.message.find(" " + x.op + " on group") != std::string::npos);
          },
          [&](const Facts::Err& e) { return "comm timeout: " + e.message; });
    }
    absent = fmt::format("no {} timed out", x.op.empty() ? "collective" : x.op);
  } else if (o == "loss_nonfinite") {
    hit = first(
        f.steps, [&](const Facts::Step& s) { return !s.loss.has_value(); },
        [&](const Facts::Step& s) { return fmt::format("loss is not finite at step {}", s.step); });
    if (!hit) error_of("loss scale", "a loss-scale failure");
    absent = "every loss was finite and no loss-scale failure was reported";
  } else if (o == "loss_divergence") {
    std::map<int, double> best;
    hit = first(
        f.steps,
        [&](const Facts::Step& s) {
          if (!s.loss) return true;
          auto it = best.find(s.rank);
          if (it == best.end()) {
            best[s.rank] = *s.loss;
            return false;
          }
          if (*s.loss > x.factor * it->second) return true;
          it->second = std::min(it->second, *s.loss);
          return false;
        },
        [&](const Facts::Step& s) {
          return s.loss ? fmt::format("loss {:.4f} at step {} is over {}x its best so far", *s.loss,
                                      s.step, x.factor)
                        : fmt::format("loss is not finite at step {}", s.step);
        });
    absent = fmt::format("the loss never rose above {}x its best", x.factor);
  } else if (o == "oom") {
    error_of("out of memory", "out of memory");
    if (!hit) {
      hit = first(
          f.exits,
          [&](const Facts::Exit& e) {
            return e.signaled && e.code == 9 && !e.by_harness && f.oom_killed.count(e.rank) > 0;
          },
          [&](const Facts::Exit& e) {
            return fmt::format("rank {} was killed by the kernel OOM killer (memory cgroup)",
                               e.rank);
          });
    }
  } else if (o == "checkpoint_error") {
    error_of("checkpoint", "a checkpoint error");
  } else if (o == "output_mismatch") {
    std::map<std::string, std::map<std::string, std::vector<int>>> by_group;
    int64_t t_last = -1;
    for (auto& out : f.outputs) {
      by_group[out.group][out.digest].push_back(out.rank);
      t_last = std::max(t_last, out.t);
    }
    if (f.outputs.empty()) {
      v.outcome = ended ? "fail" : "unknown";
      v.explanation = "no rank reported its output";
    }
    for (auto& [g, digests] : by_group) {
      if (digests.size() < 2) continue;
      Hit h{t_last, -1, {}, ""};
      std::vector<std::string> parts;
      size_t majority = 0;
      for (auto& [d, ranks] : digests) majority = std::max(majority, ranks.size());
      for (auto& [d, ranks] : digests) {
        parts.push_back(fmt::format("{} -> {}", format_ranks(ranks), d));
        if (ranks.size() < majority || digests.size() == 2) {
          for (int r : ranks) h.ranks.push_back(r);
        }
      }
      std::sort(h.ranks.begin(), h.ranks.end());
      h.what =
          fmt::format("ranks disagree on their output in group {}: {}", g, fmt::join(parts, "; "));
      hit = h;
      break;
    }
    absent = "every rank reported the same output";
    if (f.outputs.empty()) return v;
  } else if (o == "throughput_degradation") {
    auto ev = throughput_evidence(x, f);
    if (!ev.judgeable) {
      v.outcome = "unknown";
      v.explanation = ev.absent;
      return v;
    }
    hit = ev.hit;
    absent = ev.absent;
  }

  if (!hit) {
    v.outcome = ended ? "fail" : "unknown";
    v.explanation = ended ? absent : absent + " (the history ends before the run did)";
    return v;
  }
  v.manifested_s = static_cast<double>(hit->t - f.t_start) / kNs;
  v.step = hit->step;
  v.ranks = hit->ranks;
  // within_s counts from the job's first step when it had one: how long ranks take to start
  // depends on the host's load, not on the fault.
  int64_t t_ref = f.t_start;
  for (auto& s : f.steps) {
    if (s.t <= hit->t && (t_ref == f.t_start || s.t < t_ref)) t_ref = s.t;
  }
  const double since = static_cast<double>(hit->t - t_ref) / kNs;
  if (x.within_s > 0 && since > x.within_s) {
    v.outcome = "fail";
    v.explanation =
        fmt::format("{} — but {:.1f} s after {}, later than within_s {:.1f}", hit->what, since,
                    t_ref == f.t_start ? "the first launch" : "the first step", x.within_s);
    return v;
  }
  v.outcome = "pass";
  v.explanation = fmt::format("{} (at {:.1f} s)", hit->what, v.manifested_s);
  return v;
}

}  // namespace

Verdict judge(const Expect& x, const std::vector<HistoryEvent>& history) {
  if (!x.absent) return judge_one(x, history);
  // A fix variant: the oracle must not find its symptom, and the run must complete.
  Verdict v = judge_one(x, history);
  if (v.outcome == "unknown") return v;
  if (v.outcome == "pass") {
    v.outcome = "fail";
    v.explanation = "the symptom is still there: " + v.explanation;
    return v;
  }
  Expect c = x;
  c.oracle = "completed";
  c.ranks.clear();
  Verdict done = judge_one(c, history);
  done.oracle = x.oracle;
  done.symptom = x.symptom;
  if (done.outcome == "pass") {
    done.explanation = fmt::format("not observed ({}); {}", v.explanation, done.explanation);
  }
  return done;
}

}  // namespace fl::harness
