#include "harness/suite/progress.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace fl::harness {

SuiteProgress::SuiteProgress(std::FILE* out, bool enabled, bool terminal, size_t total, int jobs)
    : out_(out), enabled_(enabled), tty_(terminal), total_(total), jobs_(std::max(1, jobs)) {}

double SuiteProgress::eta_s() const {
  if (walls_ == 0) return -1;
  const double mean = wall_sum_ / walls_;
  return mean * static_cast<double>(total_ - std::min(done_, total_)) / jobs_;
}

std::string SuiteProgress::format_eta(double s) {
  if (s < 0) return "ETA -";
  const long t = std::lround(s);
  if (t >= 3600) return fmt::format("ETA {}h{:02}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("ETA {}m{:02}s", t / 60, t % 60);
  return fmt::format("ETA {}s", t);
}

std::string SuiteProgress::counters() const {
  return fmt::format("[{}/{}] {} failed{}, {}", done_, total_, failed_,
                     retried_ > 0 ? fmt::format(", {} retried", retried_) : "",
                     format_eta(eta_s()));
}

void SuiteProgress::finished(const std::string& line, double wall_s, bool failed, bool is_retry) {
  wall_sum_ += wall_s;
  ++walls_;
  if (is_retry) {
    ++retried_;
  } else {
    ++done_;
    failed_ += failed ? 1 : 0;
  }
  if (!enabled_) return;
  if (!tty_) {
    const std::string c = counters();  // "[3/86] 1 failed, ETA 1m20s"
    const size_t sp = c.find(' ');
    std::fprintf(out_, "%s %s%s; %s\n", c.substr(0, sp).c_str(), line.c_str(),
                 is_retry ? " (will retry)" : "", c.substr(sp + 1).c_str());
    std::fflush(out_);
    return;
  }
  if (failed || is_retry) {  // failures stay on screen above the status line
    std::fprintf(out_, "\r\x1b[K%s%s\n", line.c_str(), is_retry ? " (will retry)" : "");
  }
  redraw();
}

void SuiteProgress::skipped() {
  ++done_;
}

void SuiteProgress::running(std::vector<std::string> names) {
  running_ = std::move(names);
  redraw();
}

void SuiteProgress::redraw() {
  if (!enabled_ || !tty_) return;
  winsize ws{};
  const size_t width =
      ::ioctl(::fileno(out_), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20 ? ws.ws_col : 100;
  std::string s = counters();
  if (!running_.empty()) {
    s += " | running: ";
    for (size_t i = 0; i < running_.size(); ++i) s += (i ? ", " : "") + running_[i];
  }
  if (s.size() >= width) s = s.substr(0, width - 4) + "...";
  std::fprintf(out_, "\r\x1b[K%s", s.c_str());
  std::fflush(out_);
  line_open_ = true;
}

void SuiteProgress::close() {
  if (enabled_ && tty_ && line_open_) std::fprintf(out_, "\n");
  line_open_ = false;
}

}  // namespace fl::harness
