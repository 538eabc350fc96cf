// fl-detect-numeric: what the loss, gradient norm and loss scale of each step say. A non-finite
// loss; a loss or gradient norm far outside its recent window (z-score) and well above the best
// seen; an fp16 loss scale that collapses (overflow after overflow, or the scaler giving up).
#include <cmath>
#include <deque>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "harness/detectors/tool_main.hpp"

using namespace fl::detect;

namespace {

struct Window {
  std::deque<double> v;
  size_t cap = 16;
  void push(double x) {
    v.push_back(x);
    if (v.size() > cap) v.pop_front();
  }
  // z-score of x against the window (0 while it is short or flat).
  double z(double x) const {
    if (v.size() < 5) return 0;
    const double mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
    double var = 0;
    for (double y : v) var += (y - mean) * (y - mean);
    const double sd = std::sqrt(var / v.size());
    return sd > 1e-12 ? (x - mean) / sd : 0;
  }
};

struct NumericOptions {
  double z_max = 6, ratio = 2, min_scale = 1;
  int warmup = 5, overflow_run = 3;
};

class NumericDetector {
 public:
  NumericDetector(Tool& tool, const NumericOptions& o) : tool_(tool), o_(o) {}

  void on_event(const Event& e) {
    if (e.source != "rank") return;
    if (e.kind == "error" && e.data.value("class", "") == "loss scale") {
      tool_.report({"4.4",
                    0,
                    {e.rank},
                    e.step,
                    0.9,
                    "loss scaler gave up: " + e.data.value("message", ""),
                    "scale"});
      return;
    }
    if (e.kind != "step" || tool_.view().workload == "infer") return;
    const auto& d = e.data;
    Finding f;
    f.symptom = "4.4";
    f.ranks = {e.rank};
    f.step = e.step;
    if (!d.contains("loss") || d["loss"].is_null() ||
        (d["loss"].is_number() && !std::isfinite(d["loss"].get<double>()))) {
      f.confidence = 0.95;
      f.evidence = fmt::format("rank {} step {}: loss is not finite", e.rank, e.step);
      f.key = fmt::format("nonfinite|{}", e.step);
      tool_.report(f);
      return;
    }
    const double l = d["loss"].get<double>();
    check_loss_scale(e, f);
    if (e.step >= o_.warmup) check_outliers(e, l, f);
    loss_[e.rank].push(l);
    if (d.contains("grad_norm") && d["grad_norm"].is_number())
      gnorm_[e.rank].push(d["grad_norm"].get<double>());
    if (!best_.count(e.rank) || l < best_[e.rank]) best_[e.rank] = l;
  }

 private:
  // Overflow after overflow, or a scale that fell to --min-scale from above it.
  void check_loss_scale(const Event& e, Finding f) {
    const double scale = e.data.value("loss_scale", 0.0);
    int& run = skipped_run_[e.rank];
    run = e.data.value("skipped", false) ? run + 1 : 0;
    double& top = top_scale_[e.rank];
    top = std::max(top, scale);
    if (run >= o_.overflow_run || (scale > 0 && scale <= o_.min_scale && top > o_.min_scale)) {
      f.confidence = 0.8;
      f.evidence = fmt::format("rank {} step {}: {} overflowing steps in a row, loss scale {}",
                               e.rank, e.step, run, scale);
      f.key = "scale";
      tool_.report(f);
    }
  }

  // A loss (or gradient norm) far above its window, before step `l` joins the window.
  void check_outliers(const Event& e, double l, Finding f) {
    const auto& d = e.data;
    const double zl = loss_[e.rank].z(l);
    auto b = best_.find(e.rank);
    if (b != best_.end() && zl > o_.z_max && l > o_.ratio * b->second) {
      f.confidence = 0.7;
      f.evidence = fmt::format(
          "rank {} step {}: loss {:.4g} is {:.1f} sd above its window "
          "and {:.1f}x the best {:.4g}",
          e.rank, e.step, l, zl, l / b->second, b->second);
      f.key = "divergence";
      tool_.report(f);
    }
    if (d.contains("grad_norm") && d["grad_norm"].is_number()) {
      const double g = d["grad_norm"].get<double>();
      Window& w = gnorm_[e.rank];
      const double zg = w.z(g);
      if (zg > 2 * o_.z_max && g > 10 * median({w.v.begin(), w.v.end()})) {
        f.confidence = 0.6;
        f.evidence = fmt::format(
            "rank {} step {}: gradient norm {:.4g} is {:.1f} sd above "
            "its window",
            e.rank, e.step, g, zg);
        f.key = "gnorm";
        tool_.report(f);
      }
    }
  }

  Tool& tool_;
  const NumericOptions o_;
  std::map<int, Window> loss_, gnorm_;
  std::map<int, double> best_;
  std::map<int, int> skipped_run_;
  std::map<int, double> top_scale_;  // fp32/bf16 runs report a constant scale of 1
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fl-detect-numeric: non-finite losses, outliers, loss-scale collapse"};
  NumericOptions o;
  app.add_option("--z", o.z_max, "z-score that makes an outlier")->capture_default_str();
  app.add_option("--ratio", o.ratio, "...and the loss must exceed ratio x the best loss")
      ->capture_default_str();
  app.add_option("--warmup", o.warmup, "Steps ignored at the start")->capture_default_str();
  app.add_option("--overflow-run", o.overflow_run, "Consecutive skipped steps that mean collapse")
      ->capture_default_str();
  app.add_option("--min-scale", o.min_scale, "A loss scale at or below this has collapsed")
      ->capture_default_str();
  return run_tool<NumericDetector>(app, argc, argv, "numeric", o);
}
