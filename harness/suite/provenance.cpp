#include "harness/suite/provenance.hpp"

#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <thread>

#include <fmt/format.h>

#if defined(FAULTLINE_HAVE_NCCL)
#include <nccl.h>
#endif

#include "base/stats.hpp"
#include "harness/suite/build_info.hpp"
#include "harness/suite/calibrate.hpp"

namespace fl::harness {

std::string iso8601_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S%z", &tm);
  std::string s = buf;  // +0100 -> +01:00, as ISO 8601's extended format writes it
  if (s.size() >= 5) s.insert(s.size() - 2, ":");
  return s;
}

double load_average_1m() {
  double l[1];
  return ::getloadavg(l, 1) == 1 ? l[0] : -1;
}

std::string host_name() {
  char h[256] = {};
  if (::gethostname(h, sizeof(h) - 1) != 0) return "unknown";
  return h;
}

namespace {

// MPI_Get_library_version may be called before MPI_Init (MPI 3.0, section 8.1.1); the first
// line is enough ("Open MPI v4.1.4, package: ...").
std::string mpi_library_version() {
  char v[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  if (MPI_Get_library_version(v, &len) != MPI_SUCCESS) return "unknown";
  std::string s(v, static_cast<size_t>(std::max(0, len)));
  if (auto nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
  if (auto comma = s.find(", package"); comma != std::string::npos) s.resize(comma);
  return s;
}

std::string nccl_version() {
#if defined(FAULTLINE_HAVE_NCCL)
  return fmt::format("{}.{}.{}", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
#else
  return "";
#endif
}

// What nproc prints: the CPUs this process may run on.
int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

}  // namespace

Provenance collect_provenance() {
  const BuildInfo& b = build_info();
  Provenance p;
  p.version = b.version;
  p.commit = b.commit;
  p.build_type = b.build_type;
  p.compiler = b.compiler;
  p.mpi = mpi_library_version();
  p.nccl = nccl_version();
  p.cores = usable_cores();
  p.hostname = host_name();
  p.started = iso8601_now();
  p.load1_start = load_average_1m();
  return p;
}

void Provenance::calibrate(int finished_runs) {
  calibration.push_back({iso8601_now(), finished_runs, calibrate_gflops()});
}

double Provenance::calibration_median() const {
  if (calibration.empty()) return 0;
  std::vector<double> v;
  for (const auto& s : calibration) v.push_back(s.gflops);
  return stats::median(std::move(v));
}

nlohmann::json Provenance::to_json() const {
  nlohmann::json samples = nlohmann::json::array();
  for (const auto& s : calibration) {
    samples.push_back({{"at", s.at}, {"finished_runs", s.finished_runs}, {"gflops", s.gflops}});
  }
  return {{"faultline_version", version},
          {"commit", commit},
          {"build_type", build_type},
          {"compiler", compiler},
          {"mpi", mpi},
          {"nccl", nccl.empty() ? nlohmann::json(nullptr) : nlohmann::json(nccl)},
          {"cores", cores},
          {"hostname", hostname},
          {"started", started},
          {"load1_start", load1_start},
          {"load1_end", load1_end},
          {"calibration",
           {{"method", "single-thread 128x128 float GEMM, 150 ms"},
            {"unit", "GFLOP/s"},
            {"samples", samples},
            {"gflops", calibration_median()}}}};
}

std::string provenance_markdown(const nlohmann::json& p) {
  if (!p.is_object()) return "";
  auto num = [&](const char* k) {
    return p.contains(k) && p[k].is_number() && p[k].get<double>() >= 0
               ? fmt::format("{:.2f}", p[k].get<double>())
               : std::string("?");
  };
  const auto cal = p.value("calibration", nlohmann::json::object());
  return fmt::format(
      "Provenance: faultline {} ({}, {}, {}), {}{}; {} on {} cores; started {}, load {} -> {}; "
      "calibration {:.2f} GFLOP/s (median of {} samples).\n",
      p.value("faultline_version", "?"), p.value("commit", "?"), p.value("build_type", "?"),
      p.value("compiler", "?"), p.value("mpi", "?"),
      p.contains("nccl") && p["nccl"].is_string() ? ", NCCL " + p["nccl"].get<std::string>() : "",
      p.value("hostname", "?"), p.value("cores", 0), p.value("started", "?"), num("load1_start"),
      num("load1_end"), cal.value("gflops", 0.0),
      cal.value("samples", nlohmann::json::array()).size());
}

}  // namespace fl::harness
