// The suite's progress on stderr. On a terminal: one status line rewritten in place — done/total,
// failures, ETA and the names of the runs in flight — with each failure printed above it as it
// happens. In a log (not a terminal): one line per finished run with the same counters.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace fl::harness {

class SuiteProgress {
 public:
  SuiteProgress(std::FILE* out, bool enabled, bool terminal, size_t total, int jobs);

  // A run finished: `line` says which and how it ended; `wall_s` its wall time.
  void finished(const std::string& line, double wall_s, bool failed, bool is_retry);
  // A case left without running (skipped); counts as done.
  void skipped();
  // The runs now in flight (names), for the terminal's status line.
  void running(std::vector<std::string> names);
  void redraw();  // the terminal line (the ETA moves on its own)
  void close();   // ends the terminal line

  // mean wall time of finished runs x cases left / jobs; -1 before the first finished run.
  double eta_s() const;
  static std::string format_eta(double s);

 private:
  std::string counters() const;
  std::FILE* out_;
  bool enabled_, tty_;
  size_t total_, done_ = 0;
  int jobs_, failed_ = 0, retried_ = 0;
  double wall_sum_ = 0;
  int walls_ = 0;
  std::vector<std::string> running_;
  bool line_open_ = false;
};

}  // namespace fl::harness
