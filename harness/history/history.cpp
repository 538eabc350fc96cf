#include "harness/history/history.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>

#include "base/error.hpp"
#include "base/file_read.hpp"
#include "base/json_bounded.hpp"
#include "base/utf8.hpp"
#include "harness/history/event_schema.hpp"

namespace fl::harness {

namespace {
int64_t mono_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

std::vector<HistoryEvent> read_history(const std::string& path, size_t* rejected) {
  std::string why;
  const FileFd f = open_regular_file(path, &why);
  if (!f) {
    if (errno == EINVAL) raise<Error>("{}: {}", path, why);  // a FIFO would have hung here
    raise<Error>("{}: cannot read the run history: {}", path, why);
  }
  std::vector<HistoryEvent> out;
  EventContext ctx;
  if (rejected != nullptr) *rejected = 0;
  const auto refuse = [&] {
    if (rejected != nullptr) ++*rejected;
  };
  LineReader in(kMaxEventLineBytes);
  std::string line, malformed;  // a malformed line is fatal unless it is the last (torn) one
  bool last = false;
  const auto bad_line = [&](const std::exception& x) {
    return fmt::format("{}:{}: malformed history line: {}", path, in.line_number() + last,
                       valid_utf8(std::string(x.what()).substr(0, 300)));
  };
  for (;;) {
    const LineReader::Got got = in.next(f.get(), &line);
    if (got == LineReader::Got::kEnd) {
      // A last line without its newline: a killed run's torn line, or a file edited by hand.
      if (last || in.pending() == 0) break;
      last = true;
      line = in.pending_text();
    }
    if (!malformed.empty()) raise<Error>("{}", malformed);
    if (got == LineReader::Got::kTooLong) {
      refuse();  // a line over kMaxEventLineBytes was never written by a harness
      continue;
    }
    if (line.empty()) continue;
    HistoryEvent e;
    try {
      e = parse_json_line(line, EventLine::kHistory);
    } catch (const JsonRefused& x) {
      if (x.fault() != JsonFault::kMalformed) {
        refuse();  // nested too deep or too long: held to the limits a live history has
        continue;
      }
      malformed = bad_line(x);
      continue;
    } catch (const nlohmann::json::exception& x) {  // a field of the wrong type
      malformed = bad_line(x);
      continue;
    }
    // A history written by this harness holds only checked events; one edited or written by
    // something else is held to the same rules.
    if (check_event(e, ctx)) {
      refuse();
      continue;
    }
    out.push_back(std::move(e));
  }
  return out;
}

History::History(const std::string& path) : t0_(mono_ns()) {
  file_ = std::fopen(path.c_str(), "a");
  if (file_ == nullptr) raise<Error>("{}: cannot open the run history: {}", path, strerror(errno));
}

History::History(int fd, const std::string& path) : t0_(mono_ns()) {
  file_ = ::fdopen(fd, "a");
  if (file_ == nullptr) {
    const int err = errno;
    ::close(fd);
    raise<Error>("{}: cannot open the run history: {}", path, strerror(err));
  }
}

History::~History() {
  if (file_ != nullptr) std::fclose(file_);
}

int64_t History::now_ns() const {
  const int64_t m = mono_ns();
  if (rate_ == 1 && rate_from_ == 0) return m - t0_;
  return rate_base_ + static_cast<int64_t>(static_cast<double>(m - rate_from_) * rate_);
}

void History::set_clock_rate(double rate, int64_t from_ns) {
  std::lock_guard lock(mu_);
  const int64_t base = from_ns >= 0 ? from_ns : now_ns();
  rate_from_ = mono_ns();
  rate_base_ = base;
  rate_ = rate;
}

uint64_t History::append(HistoryEvent e) {
  std::lock_guard lock(mu_);
  return append_locked(std::move(e), -1);
}

uint64_t History::append_at(HistoryEvent e, int64_t t_ns) {
  std::lock_guard lock(mu_);
  return append_locked(std::move(e), t_ns);
}

uint64_t History::append_locked(HistoryEvent e, int64_t t_ns) {
  EventContext ctx{world_, true};
  if (auto why = check_event(e, ctx)) {
    if (++rejected_ <= 5) rejected_reasons_.push_back(*why);
    return kRejected;
  }
  world_ = ctx.world;
  e.index = events_.size();
  e.t_ns = t_ns >= 0 ? t_ns : now_ns();
  // The data was re-serialised on one line by the check: the line splices it in as is.
  const std::string line = to_json_line(e, EventLine::kHistory);
  std::fwrite(line.data(), 1, line.size(), file_);
  for (auto& [id, l] : listeners_) l(e);
  events_.push_back(std::move(e));
  return events_.size() - 1;
}

size_t History::listener_count() const {
  std::lock_guard lock(mu_);
  return listeners_.size();
}

void History::refuse(std::string why) {
  std::lock_guard lock(mu_);
  if (++rejected_ <= 5) rejected_reasons_.push_back(std::move(why));
}

uint64_t History::harness(const std::string& kind, const nlohmann::json& data, int rank) {
  HistoryEvent e;
  e.source = "harness";
  e.rank = rank;
  e.kind = kind;
  e.time_unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  e.data_json = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const uint64_t i = append(std::move(e));
  flush();
  return i;
}

void History::flush() {
  std::lock_guard lock(mu_);
  std::fflush(file_);
}

int History::add_listener(Listener l) {
  std::lock_guard lock(mu_);
  listeners_.emplace_back(next_listener_, std::move(l));
  return next_listener_++;
}

void History::remove_listener(int id) {
  std::lock_guard lock(mu_);
  std::erase_if(listeners_, [&](auto& p) { return p.first == id; });
}

std::vector<HistoryEvent> History::snapshot_and_listen(Listener l, int* id) {
  std::lock_guard lock(mu_);
  listeners_.emplace_back(next_listener_, std::move(l));
  *id = next_listener_++;
  return events_;
}

std::vector<HistoryEvent> History::events() const {
  std::lock_guard lock(mu_);
  return events_;
}

uint64_t History::rejected() const {
  std::lock_guard lock(mu_);
  return rejected_;
}

std::vector<std::string> History::rejected_reasons() const {
  std::lock_guard lock(mu_);
  return rejected_reasons_;
}

uint64_t History::size() const {
  std::lock_guard lock(mu_);
  return events_.size();
}

}  // namespace fl::harness
