#include "harness/run/history.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>

#include "base/error.hpp"
#include "base/utf8.hpp"
#include "harness/run/event_schema.hpp"

namespace fl::harness {

namespace {
int64_t mono_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

std::vector<HistoryEvent> read_history(const std::string& path, size_t* rejected) {
  std::ifstream in(path);
  if (!in) raise<Error>("{}: cannot read the run history", path);
  std::vector<HistoryEvent> out;
  std::string line;
  size_t n = 0;
  EventContext ctx;
  if (rejected != nullptr) *rejected = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    HistoryEvent e;
    try {
      e = parse_json_line(line, EventLine::kHistory);
    } catch (const nlohmann::json::exception& x) {
      if (in.peek() == EOF) break;  // torn last line of a killed run
      raise<Error>("{}:{}: malformed history line: {}", path, n,
                   valid_utf8(std::string(x.what()).substr(0, 300)));
    }
    // A history written by this harness holds only checked events; one edited or written by
    // something else is held to the same rules.
    if (check_event(e, ctx)) {
      if (rejected != nullptr) ++*rejected;
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
  return mono_ns() - t0_;
}

uint64_t History::append(HistoryEvent e) {
  std::lock_guard lock(mu_);
  EventContext ctx{world_, true};
  if (auto why = check_event(e, ctx)) {
    if (++rejected_ <= 5) rejected_reasons_.push_back(*why);
    return kRejected;
  }
  world_ = ctx.world;
  e.index = events_.size();
  e.t_ns = now_ns();
  // The data was re-serialised on one line by the check: the line splices it in as is.
  const std::string line = to_json_line(e, EventLine::kHistory);
  std::fwrite(line.data(), 1, line.size(), file_);
  for (auto& [id, l] : listeners_) l(e);
  events_.push_back(std::move(e));
  return events_.size() - 1;
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
