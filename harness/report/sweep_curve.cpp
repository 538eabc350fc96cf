// The threshold sweep of a detector benchmark drawn as a detection-vs-false-alarm curve (ROC-like)
// in inline SVG: one point per value of the swept knob, x the share of clean runs with a false
// alarm, y the recall on the positives, each with its Wilson 95% interval as error bars.
#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "harness/report/html.hpp"
#include "harness/report/report.hpp"
#include "harness/score/uncertainty.hpp"

namespace fl::harness {

namespace {

struct SweepPoint {
  std::string value;
  double x = 0, y = 0;
  Interval xi, yi;
  int fa = 0, neg = 0, tp = 0, pos = 0;
};

// "hang,floor-s=2" -> {"hang --floor-s", "2"}; false for a name that is no sweep variant.
bool split_variant(const std::string& name, std::string& curve, std::string& value) {
  const auto comma = name.find(','), eq = name.find('=', comma);
  if (comma == std::string::npos || eq == std::string::npos) return false;
  curve = name.substr(0, comma) + " --" + name.substr(comma + 1, eq - comma - 1);
  value = name.substr(eq + 1);
  return true;
}

double numeric(const std::string& v) {
  try {
    return std::stod(v);
  } catch (const std::exception&) {
    return 0;
  }
}

std::map<std::string, std::vector<SweepPoint>> sweep_points(const nlohmann::json& lb) {
  std::map<std::string, std::vector<SweepPoint>> curves;
  for (const auto& d : lb.value("detectors", nlohmann::json::array())) {
    std::string curve, value;
    if (!split_variant(d.value("detector", ""), curve, value)) continue;
    SweepPoint p;
    p.value = value;
    p.fa = d.value("false_alarm_clean_runs", 0);
    p.neg = d.value("negatives", 0);
    p.tp = d.value("true_positives", 0);
    p.pos = d.value("positives", 0);
    p.x = p.neg > 0 ? static_cast<double>(p.fa) / p.neg : 0;
    p.y = p.pos > 0 ? static_cast<double>(p.tp) / p.pos : 0;
    p.xi = wilson(p.fa, p.neg);
    p.yi = wilson(p.tp, p.pos);
    curves[curve].push_back(p);
  }
  for (auto& [k, v] : curves) {
    std::sort(v.begin(), v.end(),
              [](auto& a, auto& b) { return numeric(a.value) < numeric(b.value); });
  }
  return curves;
}

std::string axes(double w, double h, double m, double xmax, double ymax) {
  std::string s = fmt::format(
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#444\"/>"
      "<line x1=\"{0}\" y1=\"{3}\" x2=\"{0}\" y2=\"{1}\" stroke=\"#444\"/>",
      m, h - m, w - m, m);
  for (int k = 0; k <= 4; ++k) {
    const double f = k / 4.0, x = m + f * (w - 2 * m), y = h - m - f * (h - 2 * m);
    s += fmt::format(
        "<text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"middle\">{:.0f}%</text>",
        html::num(x), html::num(h - m + 14), 100 * f * xmax);
    s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"end\">{:.0f}%</text>",
                     html::num(m - 4), html::num(y + 3), 100 * f * ymax);
  }
  s += fmt::format(
      "<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\">clean runs with a false "
      "alarm</text><text x=\"12\" y=\"{}\" font-size=\"11\" transform=\"rotate(-90 12 {})\" "
      "text-anchor=\"middle\">recall</text>",
      html::num(w / 2), html::num(h - 4), html::num(h / 2), html::num(h / 2));
  return s;
}

std::string curve_svg(const std::string& name, const std::vector<SweepPoint>& pts) {
  constexpr double w = 420, h = 320, m = 44;
  // Each axis up to the largest interval bound, rounded up to a tenth: a sweep whose false
  // alarms stay under 10% is not squeezed into a corner.
  double xmax = 0.1, ymax = 0.1;
  for (const auto& p : pts) {
    xmax = std::max(xmax, std::ceil(10 * p.xi.hi - 1e-9) / 10);
    ymax = std::max(ymax, std::ceil(10 * p.yi.hi - 1e-9) / 10);
  }
  auto X = [&](double f) { return m + f / xmax * (w - 2 * m); };
  auto Y = [&](double f) { return h - m - f / ymax * (h - 2 * m); };
  std::string s = fmt::format(
      "<figure class=\"sweep\"><figcaption>{}: detection vs false alarm (points: knob values; "
      "bars: "
      "Wilson 95%)</figcaption><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" "
      "height=\"{}\" "
      "data-curve=\"{}\">",
      html_escape(name), w, h, html_escape(name));
  s += axes(w, h, m, xmax, ymax);
  std::string path;
  for (const auto& p : pts)
    path += fmt::format("{}{},{} ", path.empty() ? "M" : "L", html::num(X(p.x)), html::num(Y(p.y)));
  s += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"#36c\" stroke-width=\"1.5\"/>", path);
  for (const auto& p : pts) {
    s += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#99b\"/>"
        "<line x1=\"{3}\" y1=\"{4}\" x2=\"{5}\" y2=\"{4}\" stroke=\"#99b\"/>",
        html::num(X(p.x)), html::num(Y(p.yi.lo)), html::num(Y(p.yi.hi)), html::num(X(p.xi.lo)),
        html::num(Y(p.y)), html::num(X(p.xi.hi)));
    s += fmt::format(
        "<circle cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"#36c\" data-value=\"{}\" data-recall=\"{}/{}\" "
        "data-false-alarm=\"{}/{}\"><title>{} = {}: recall {}/{}, false alarms on {}/{} clean "
        "runs</title></circle><text x=\"{}\" y=\"{}\" font-size=\"10\">{}</text>",
        html::num(X(p.x)), html::num(Y(p.y)), html_escape(p.value), p.tp, p.pos, p.fa, p.neg,
        html_escape(name), html_escape(p.value), p.tp, p.pos, p.fa, p.neg, html::num(X(p.x) + 6),
        html::num(Y(p.y) - 6), html_escape(p.value));
  }
  return s + "</svg></figure>\n";
}

}  // namespace

std::string sweep_curves_html(const nlohmann::json& leaderboard) {
  std::string out;
  for (const auto& [name, pts] : sweep_points(leaderboard)) {
    if (pts.size() >= 2) out += curve_svg(name, pts);
  }
  return out.empty() ? out : "<h2>Threshold sweep</h2>\n" + out;
}

}  // namespace fl::harness
