#include "base/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "base/settings.hpp"

namespace fl::log {

FAULTLINE_SETTING(kLogLevel, std::string, "FAULTLINE_LOG_LEVEL", "info",
                  "Log level: trace, debug, info, warn, error, off");

void init(int rank) {
  auto logger = spdlog::get("faultline");
  if (!logger) logger = spdlog::stderr_color_mt("faultline");
  std::string tag = rank >= 0 ? fmt::format("rank {}", rank) : std::string("harness");
  logger->set_pattern(fmt::format("[%H:%M:%S.%e] [{}] [%l] %v", tag));
  logger->set_level(spdlog::level::from_str(kLogLevel.get()));
  spdlog::set_default_logger(logger);
}

}  // namespace fl::log
