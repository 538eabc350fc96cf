#include "harness/launch/worker_catalog.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/subprocess.hpp"
#include "harness/model/build_paths.hpp"
#include "harness/model/workload_kinds.hpp"
#include "injector/describe.hpp"

namespace fl::harness {

namespace {

void merge(WorkerCatalog& c, const nlohmann::json& d, std::map<std::string, size_t>& settings,
           std::map<std::string, size_t>& sites) {
  for (const auto& s : d.at("settings")) {
    const std::string env = s.at("env");
    if (settings.count(env)) continue;
    settings[env] = c.settings.size();
    c.settings.push_back(
        {env, s.at("type"), s.at("default"), s.at("current"), s.at("description")});
  }
  for (const auto& s : d.at("sites")) {
    const std::string name = s.at("name");
    if (sites.count(name)) continue;
    sites[name] = c.sites.size();
    c.sites.push_back({name, s.at("file"), s.at("line")});
  }
  c.sites_compiled = c.sites_compiled && d.value("sites_compiled", true);
}

WorkerCatalog build() {
  WorkerCatalog c;
  std::map<std::string, size_t> settings, sites;
  merge(c, fault::describe_binary(), settings, sites);
  for (const auto* kind : workload_kinds()) {
    if (!kind->own_worker()) continue;
    const std::string& bin = kind->build_path;
    try {
      const std::string out = run_tool({bin, "--describe"});
      merge(c, nlohmann::json::parse(out), settings, sites);
    } catch (const std::exception& e) {
      c.errors.push_back(
          fmt::format("cannot ask the worker {} for its settings and sites: {}", bin, e.what()));
    }
  }
  std::sort(c.settings.begin(), c.settings.end(), [](auto& a, auto& b) { return a.env < b.env; });
  std::sort(c.sites.begin(), c.sites.end(), [](auto& a, auto& b) { return a.name < b.name; });
  return c;
}

}  // namespace

const WorkerCatalog& worker_catalog() {
  static const WorkerCatalog c = build();
  return c;
}

}  // namespace fl::harness
