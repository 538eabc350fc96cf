#include "injector/describe.hpp"

#include <cstdio>
#include <cstring>

#include "base/settings.hpp"
#include "injector/site.hpp"

namespace fl::fault {

nlohmann::json describe_binary() {
  auto settings = nlohmann::json::array();
  for (auto& s : SettingsRegistry::instance().all()) {
    std::string cur;
    try {
      cur = s.current();
    } catch (const std::exception& e) {
      cur = std::string("error: ") + e.what();
    }
    settings.push_back({{"env", s.env},
                        {"type", s.type},
                        {"default", s.default_value},
                        {"current", cur},
                        {"description", s.description}});
  }
  auto sites = nlohmann::json::array();
  for (auto* s : all_sites())
    sites.push_back({{"name", s->name}, {"file", s->file}, {"line", s->line}});
#if defined(FAULTLINE_NO_FAULT_SITES)
  const bool compiled = false;
#else
  const bool compiled = true;
#endif
  return {{"settings", settings}, {"sites", sites}, {"sites_compiled", compiled}};
}

bool describe_if_asked(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--describe") != 0) return false;
  std::printf("%s\n", describe_binary().dump().c_str());
  return true;
}

}  // namespace fl::fault
