#include "harness/faults/residue.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>

#include "harness/faults/cgroup.hpp"

namespace fl::harness::faults {

namespace fs = std::filesystem;

namespace {

constexpr int kSegmentGraceS = 60;  // a live segment is mapped within moments of its creation

std::string owner_of(const std::string& name) {
  const char* p = name.c_str() + std::strlen("faultline.");
  char* end = nullptr;
  const long pid = std::strtol(p, &end, 10);
  return fmt::format("pid {} is gone{}", pid, *end == '-' ? " (or is another process now)" : "");
}

void sweep_cgroups(const std::string& root, bool dry_run, std::vector<Residue>& out) {
  for (const auto& g : stale_cgroups(root)) {
    Residue r{"cgroup", g, owner_of(fs::path(g).filename().string()), ""};
    if (!dry_run) r.error = remove_stale_cgroup(g);
    out.push_back(std::move(r));
  }
}

// Arena files of harnesses from before memfd arenas: faultline.<pid>.*.arena.
void sweep_arenas(const std::string& shm, bool dry_run, std::vector<Residue>& out) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(shm, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("faultline.", 0) != 0 || e.path().extension() != ".arena") continue;
    if (owner_alive(name)) continue;
    Residue r{"arena", e.path().string(), owner_of(name), ""};
    if (!dry_run && ::unlink(e.path().c_str()) != 0) r.error = std::strerror(errno);
    out.push_back(std::move(r));
  }
}

// Every file under `shm` some process maps now (from /proc/*/maps).
std::set<std::string> mapped_under(const std::string& shm) {
  std::set<std::string> mapped;
  std::error_code ec;
  for (const auto& p : fs::directory_iterator("/proc", ec)) {
    const std::string pid = p.path().filename().string();
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream maps(p.path() / "maps");
    for (std::string line; std::getline(maps, line);) {
      const auto at = line.find(shm + "/");
      if (at != std::string::npos) mapped.insert(line.substr(at));
    }
  }
  return mapped;
}

void sweep_segments(const std::string& shm, bool dry_run, std::vector<Residue>& out) {
  std::vector<fs::path> old;
  std::error_code ec;
  const std::time_t now = std::time(nullptr);
  for (const auto& e : fs::directory_iterator(shm, ec)) {
    if (e.path().filename().string().rfind("faultline-shm-", 0) != 0) continue;
    struct stat st {};
    if (::lstat(e.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (st.st_uid != ::geteuid() || now - st.st_mtime < kSegmentGraceS) continue;
    old.push_back(e.path());
  }
  if (old.empty()) return;
  const auto mapped = mapped_under(shm);
  for (const auto& p : old) {
    if (mapped.count(p.string())) continue;
    Residue r{"segment", p.string(),
              fmt::format("no process maps it and it is older than {} s", kSegmentGraceS), ""};
    if (!dry_run && ::unlink(p.c_str()) != 0) r.error = std::strerror(errno);
    out.push_back(std::move(r));
  }
}

// Every unix socket path bound on this host now (the last column of /proc/net/unix).
std::set<std::string> bound_unix_paths() {
  std::set<std::string> bound;
  std::ifstream in("/proc/net/unix");
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    const auto at = line.find(" /");
    if (at != std::string::npos) bound.insert(line.substr(at + 1));
  }
  return bound;
}

// A private socket directory (an agent's relay, a harness's short control path) is made and its
// socket bound within moments; one whose socket nobody holds after the grace belonged to an agent
// or harness that was killed (each removes its own when it stops). `prefix` names the directories,
// `socket` the socket's path inside one, `kind` the residue.
void sweep_socket_dirs(const std::string& tmp, const std::string& prefix, const std::string& socket,
                       const std::string& kind, bool dry_run, std::vector<Residue>& out) {
  std::vector<fs::path> old;
  std::error_code ec;
  const std::time_t now = std::time(nullptr);
  for (const auto& e : fs::directory_iterator(tmp, ec)) {
    if (e.path().filename().string().rfind(prefix, 0) != 0) continue;
    struct stat st {};
    if (::lstat(e.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    if (st.st_uid != ::geteuid() || now - st.st_mtime < kSegmentGraceS) continue;
    old.push_back(e.path());
  }
  if (old.empty()) return;
  const auto bound = bound_unix_paths();
  for (const auto& p : old) {
    if (bound.count((p / socket).string())) continue;
    Residue r{kind, p.string(),
              fmt::format("no socket is bound at its {} and it is older than {} s", socket,
                          kSegmentGraceS),
              ""};
    if (!dry_run) {
      std::error_code rm;
      fs::remove_all(p, rm);  // a link inside is removed, never followed
      if (rm) r.error = rm.message();
    }
    out.push_back(std::move(r));
  }
}

}  // namespace

ResidueDirs default_residue_dirs() {
  ResidueDirs d;
  d.cgroup_roots = {memory_cgroup_root(), cpu_cgroup_root()};
  return d;
}

std::vector<Residue> sweep_residue(const ResidueDirs& dirs, bool dry_run) {
  std::vector<Residue> out;
  for (const auto& root : dirs.cgroup_roots) sweep_cgroups(root, dry_run, out);
  sweep_arenas(dirs.shm, dry_run, out);
  sweep_segments(dirs.shm, dry_run, out);
  sweep_socket_dirs(dirs.tmp, "faultline-relay-", "relay.sock", "relay", dry_run, out);
  sweep_socket_dirs(dirs.tmp, "faultline-control-", "run/control.sock", "control", dry_run, out);
  return out;
}

nlohmann::json residue_json(const std::vector<Residue>& found, bool dry_run) {
  nlohmann::json items = nlohmann::json::array();
  int left = 0;
  for (const auto& r : found) {
    nlohmann::json j = {{"kind", r.kind}, {"path", r.path}, {"owner", r.owner}};
    if (!dry_run) j["removed"] = r.error.empty();
    if (!r.error.empty()) j["error"] = r.error;
    left += r.error.empty() ? 0 : 1;
    items.push_back(std::move(j));
  }
  return {{"dry_run", dry_run}, {"found", items.size()}, {"left", left}, {"items", items}};
}

int clean_command(bool dry_run, bool json) {
  const auto found = sweep_residue(default_residue_dirs(), dry_run);
  const auto j = residue_json(found, dry_run);
  if (json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    for (const auto& r : found) {
      const std::string done = dry_run           ? "would remove"
                               : r.error.empty() ? "removed"
                                                 : "NOT removed (" + r.error + ")";
      std::printf("%-8s %s: %s (%s)\n", r.kind.c_str(), r.path.c_str(), done.c_str(),
                  r.owner.c_str());
    }
    std::printf("%zu abandoned item(s) found%s\n", found.size(),
                dry_run ? ", none removed (dry run)"
                        : fmt::format(", {} left", j["left"].get<int>()).c_str());
  }
  return !dry_run && j["left"].get<int>() > 0 ? 1 : 0;
}

}  // namespace fl::harness::faults
