// Parser and executor of fault plans (see plan.hpp for the grammar; the actions are one table in
// actions.cpp).
#include "injector/plan.hpp"

#include <atomic>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "base/counter_rng.hpp"
#include "base/settings.hpp"
#include "injector/actions.hpp"

namespace fl::fault {

FAULTLINE_SETTING(kFaults, std::string, "FAULTLINE_FAULTS", "",
                  "Fault plan armed at start, e.g. comm.all_reduce[rank=2,seq=3]=drop");
FAULTLINE_SETTING(kFaultSeed, int64_t, "FAULTLINE_FAULT_SEED", 0,
                  "Seed of every random choice a fault plan makes");
FAULTLINE_SETTING(kFiredLog, std::string, "FAULTLINE_FIRED_LOG", "",
                  "File that receives one JSON line per fault firing");

namespace {

std::string allowed_actions() {
  std::string s;
  for (const auto& row : action_table()) s += (s.empty() ? "" : ", ") + std::string(row.name);
  return s;
}

class Parser {
 public:
  Parser(const std::string& text, const std::string& origin) : s_(text), origin_(origin) {}

  Plan plan() {
    Plan p;
    skip_ws();
    while (pos_ < s_.size()) {
      p.entries.push_back(entry());
      skip_ws();
      if (pos_ < s_.size()) expect(';', "';' between entries");
      skip_ws();
    }
    return p;
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    std::string got = pos_ < s_.size() ? "'" + s_.substr(pos_, 12) + "'" : "the end";
    raise<PlanError>("{}: at column {}: expected {}, got {} (in \"{}\")", origin_, pos_ + 1, what,
                     got, s_);
  }
  void skip_ws() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool peek(char c) {
    skip_ws();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  void expect(char c, const std::string& what) {
    if (!peek(c)) fail(what);
    ++pos_;
  }
  // An identifier: letters, digits, '_', and whatever `extra` allows ('.' in site names).
  std::string name(const std::string& what, std::string_view extra = "") {
    skip_ws();
    size_t b = pos_;
    while (pos_ < s_.size() &&
           (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_' ||
            extra.find(s_[pos_]) != std::string_view::npos)) {
      ++pos_;
    }
    if (b == pos_) fail(what);
    return s_.substr(b, pos_ - b);
  }
  template <class T>  // all of `num` (read at b) as a T in range, or fail
  T number(const std::string& num, size_t b, const std::string& what) {
    T v{};
    const auto r = std::from_chars(num.data(), num.data() + num.size(), v);
    if (r.ec != std::errc() || r.ptr != num.data() + num.size()) pos_ = b, fail(what);
    return v;
  }
  int64_t integer(const std::string& what) {
    skip_ws();
    size_t b = pos_;
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    if (b == pos_ || (pos_ == b + 1 && s_[b] == '-')) {
      pos_ = b;
      fail(what);
    }
    return number<int64_t>(s_.substr(b, pos_ - b), b, what + " (a 64-bit integer)");
  }
  Range range(const std::string& key) {
    Range r;
    r.lo = integer("a number or range A-B for '" + key + "'");
    r.hi = r.lo;
    if (peek('-')) {
      ++pos_;
      r.hi = integer("the end of the range for '" + key + "'");
      if (r.hi < r.lo) fail("a range A-B with A <= B for '" + key + "'");
    }
    return r;
  }
  Entry entry() {
    Entry e;
    e.site = name("a fault site name (see `faultline sites`)", ".");
    if (peek('[')) {
      ++pos_;
      for (;;) {
        size_t at = pos_;
        std::string key =
            name("a filter (rank, node, step, seq, micro_batch, eval, group, skip, every)");
        expect('=', "'=' after filter '" + key + "'");
        if (key == "rank")
          e.rank = range(key);
        else if (key == "node")
          e.node = range(key);
        else if (key == "step")
          e.step = range(key);
        else if (key == "eval")
          e.eval = range(key);
        else if (key == "seq")
          e.seq = range(key);
        else if (key == "micro_batch")
          e.micro_batch = range(key);
        else if (key == "group")
          e.group = name("a group name", ".-");
        else if (key == "skip")
          e.skip = integer("a count for 'skip'");
        else if (key == "every")
          e.every = integer("a count for 'every'");
        else {
          pos_ = at;
          fail("a filter (rank, node, step, seq, micro_batch, eval, group, skip, every)");
        }
        if (e.skip < 0 || e.every < 1) {
          pos_ = at;
          fail("skip >= 0 and every >= 1");
        }
        if (peek(',')) {
          ++pos_;
          continue;
        }
        expect(']', "',' or ']' after a filter");
        break;
      }
    }
    expect('=', "'=' after the site name");
    e.terms.push_back(term());
    while (peek('-')) {
      ++pos_;
      expect('>', "'->' between terms");
      e.terms.push_back(term());
    }
    return e;
  }
  Term term() {
    Term t;
    skip_ws();
    // Optional P% and N* prefixes, each a number followed by its marker.
    for (int i = 0; i < 2; ++i) {
      skip_ws();
      size_t b = pos_;
      while (pos_ < s_.size() &&
             (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '.'))
        ++pos_;
      if (b == pos_) break;
      std::string num = s_.substr(b, pos_ - b);
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == '%' && !t.percent) {
        t.percent = number<double>(num, b, "a percentage between 0 and 100");
        if (*t.percent < 0 || *t.percent > 100) {
          pos_ = b;
          fail("a percentage between 0 and 100");
        }
        ++pos_;
      } else if (pos_ < s_.size() && s_[pos_] == '*' && !t.count) {
        t.count = number<int64_t>(num, b, "a whole number of firings before '*'");
        ++pos_;
      } else {
        pos_ = b;
        fail("'%' or '*' after a number, then an action");
      }
    }
    size_t at = pos_;
    std::string a = name("an action (" + allowed_actions() + ")");
    const ActionSpec* spec = find_action(a);
    if (!spec) {
      pos_ = at;
      fail("an action (" + allowed_actions() + ")");
    }
    t.action = spec->action;
    if (peek('(')) argument(t, *spec);
    if (t.arg.empty() &&
        (spec->arg == ActionArg::kRequiredNumber || spec->arg == ActionArg::kRequiredDtype)) {
      fail("'(' and an argument after '" + a + "'");
    }
    return t;
  }
  // `(arg)` after an action, checked against the action's row.
  void argument(Term& t, const ActionSpec& spec) {
    ++pos_;
    size_t b = pos_;
    while (pos_ < s_.size() && s_[pos_] != ')') ++pos_;
    const std::string a(spec.name);
    if (pos_ >= s_.size()) fail("')' closing the argument of '" + a + "'");
    t.arg = s_.substr(b, pos_ - b);
    ++pos_;
    char* end = nullptr;
    t.number = std::strtod(t.arg.c_str(), &end);
    const bool numeric = end != t.arg.c_str() && *end == '\0';
    if ((spec.arg == ActionArg::kNumber || spec.arg == ActionArg::kRequiredNumber) && !numeric) {
      pos_ = b;
      fail("a number as the argument of '" + a + "'");
    }
    if (spec.arg == ActionArg::kRequiredDtype && !parse_dtype(t.arg)) {
      pos_ = b;
      fail("a dtype (fp32, fp16, bf16, fp64, int32, int64, uint8) as the argument of '" + a + "'");
    }
  }

  const std::string& s_;
  std::string origin_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Execution.

struct EntryState {
  Entry entry;
  uint64_t hits = 0;  // matching evaluations so far
  size_t term = 0;    // current term
  int64_t fired_in_term = 0;
};

struct Armed {
  std::mutex mu;
  std::vector<EntryState> entries;
  uint64_t seed = 0;
  std::string log_path;
  std::vector<FiredRecord> fired;
  std::function<void(const FiredRecord&)> observer;
  std::unordered_map<std::string_view, uint64_t> evals;  // evaluations per site name
};

Armed& armed() {
  static Armed a;
  return a;
}

uint64_t key(uint64_t seed, const std::string& site, int rank, uint64_t hit, uint64_t salt) {
  return rng::mix(rng::mix(rng::mix(seed ^ rng::hash_name(site)) ^ static_cast<uint64_t>(rank)) ^
                  rng::mix(hit * 0x100 + salt));
}

bool matches(const Entry& e, const Site& site, const SiteContext& ctx, uint64_t eval) {
  if (e.eval && !e.eval->contains(static_cast<int64_t>(eval))) return false;
  if (e.site != site.name) return false;
  if (e.rank && !e.rank->contains(current_rank())) return false;
  if (e.node && !e.node->contains(current_node())) return false;
  if (e.step && !e.step->contains(current_step())) return false;
  if (e.seq && !e.seq->contains(ctx.seq)) return false;
  if (e.micro_batch && !e.micro_batch->contains(ctx.micro_batch)) return false;
  if (e.group && *e.group != ctx.group) return false;
  return true;
}

Verdict handler(Site& site, SiteContext& ctx) {
  Armed& a = armed();
  std::unique_lock lock(a.mu);
  const uint64_t eval = a.evals[site.name]++;
  for (auto& st : a.entries) {
    if (!matches(st.entry, site, ctx, eval)) continue;
    const uint64_t hit = st.hits++;
    if (hit < static_cast<uint64_t>(st.entry.skip)) continue;
    if ((hit - static_cast<uint64_t>(st.entry.skip)) % static_cast<uint64_t>(st.entry.every) != 0)
      continue;
    if (st.term >= st.entry.terms.size()) continue;
    const Term t = st.entry.terms[st.term];
    const uint64_t k = key(a.seed, st.entry.site, current_rank(), hit, 0);
    if (t.percent && rng::to_unit(k) * 100.0 >= *t.percent) continue;
    if (t.action == Action::kOff) continue;
    if (t.count && ++st.fired_in_term >= *t.count) {
      ++st.term;
      st.fired_in_term = 0;
    }
    site.fired.fetch_add(1, std::memory_order_relaxed);
    FiredRecord rec{st.entry.site,
                    current_rank(),
                    current_step(),
                    ctx.seq,
                    hit,
                    eval,
                    std::string(action_name(t.action)) + (t.arg.empty() ? "" : "(" + t.arg + ")")};
    a.fired.push_back(rec);
    if (!a.log_path.empty()) {
      std::ofstream out(a.log_path, std::ios::app);
      const nlohmann::json line = {
          {"site", rec.site},     {"rank", rec.rank},  {"step", rec.step},
          {"seq", rec.seq},       {"hit", rec.hit},    {"eval", rec.eval},
          {"action", rec.action}, {"file", site.file}, {"line", site.line}};
      out << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    }
    auto observer = a.observer;
    lock.unlock();  // the action may sleep, hang or end the process
    if (observer) observer(rec);
    return action_spec(t.action).apply(t, ctx, key(a.seed, st.entry.site, current_rank(), hit, 1));
  }
  return Verdict::kProceed;
}

}  // namespace

std::string_view action_name(Action a) {
  return action_spec(a).name;
}

Plan parse_plan(const std::string& text, const std::string& origin) {
  return Parser(text, origin).plan();
}

std::string to_string(const Plan& plan) {
  std::string out;
  for (auto& e : plan.entries) {
    if (!out.empty()) out += ";";
    out += e.site;
    std::vector<std::string> f;
    auto r = [](const Range& x) {
      return x.lo == x.hi ? std::to_string(x.lo) : fmt::format("{}-{}", x.lo, x.hi);
    };
    if (e.rank) f.push_back("rank=" + r(*e.rank));
    if (e.node) f.push_back("node=" + r(*e.node));
    if (e.step) f.push_back("step=" + r(*e.step));
    if (e.eval) f.push_back("eval=" + r(*e.eval));
    if (e.seq) f.push_back("seq=" + r(*e.seq));
    if (e.micro_batch) f.push_back("micro_batch=" + r(*e.micro_batch));
    if (e.group) f.push_back("group=" + *e.group);
    if (e.skip) f.push_back("skip=" + std::to_string(e.skip));
    if (e.every != 1) f.push_back("every=" + std::to_string(e.every));
    if (!f.empty()) {
      out += "[";
      for (size_t i = 0; i < f.size(); ++i) out += (i ? "," : "") + f[i];
      out += "]";
    }
    out += "=";
    for (size_t i = 0; i < e.terms.size(); ++i) {
      const Term& t = e.terms[i];
      if (i) out += "->";
      if (t.percent) out += fmt::format("{}%", *t.percent);
      if (t.count) out += fmt::format("{}*", *t.count);
      out += action_name(t.action);
      if (!t.arg.empty()) out += "(" + t.arg + ")";
    }
  }
  return out;
}

void arm(Plan plan, uint64_t seed, const std::string& fired_log_path) {
  Armed& a = armed();
  {
    std::lock_guard lock(a.mu);
    a.evals.clear();
    a.entries.clear();
    for (auto& e : plan.entries) a.entries.push_back({std::move(e), 0, 0, 0});
    a.seed = seed;
    a.log_path = fired_log_path;
    a.fired.clear();
    release_paused_sites();
  }
  install_handler(a.entries.empty() ? nullptr : &handler);
}

void disarm() {
  remove_handler();
  Armed& a = armed();
  std::lock_guard lock(a.mu);
  a.entries.clear();
  release_paused_sites();
}

bool arm_from_env() {
  const std::string text = kFaults.get();
  if (text.empty()) return false;
  arm(parse_plan(text, "FAULTLINE_FAULTS"), static_cast<uint64_t>(kFaultSeed.get()),
      kFiredLog.get());
  return true;
}

void set_fired_observer(std::function<void(const FiredRecord&)> observer) {
  Armed& a = armed();
  std::lock_guard lock(a.mu);
  a.observer = std::move(observer);
}

std::string armed_plan() {
  Armed& a = armed();
  std::lock_guard lock(a.mu);
  Plan p;
  for (auto& st : a.entries) p.entries.push_back(st.entry);
  return p.entries.empty() ? std::string() : to_string(p);
}

void arm_text(const std::string& text, const std::string& origin, uint64_t seed) {
  arm(parse_plan(text, origin), seed, kFiredLog.get());
}

std::vector<FiredRecord> fired_log() {
  Armed& a = armed();
  std::lock_guard lock(a.mu);
  return a.fired;
}

}  // namespace fl::fault
