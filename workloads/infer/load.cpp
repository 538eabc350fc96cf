#include "workloads/infer/load.hpp"

#include <map>

#include "base/error.hpp"
#include "workloads/train/checkpoint.hpp"

namespace fl::infer {

void check_load_mode(const std::string& mode) {
  if (mode != "full" && mode != "sharded") {
    raise<ConfigError>("--load {} is not a loading mode (allowed: full, sharded)", mode);
  }
}

std::vector<float> load_inference_weights(const std::string& dir, const nlohmann::json& manifest,
                                          int tp_rank, int pp_rank, size_t total,
                                          const std::string& mode, MemoryAccountant& host) {
  check_load_mode(mode);
  const bool full = mode == "full";
  // The files this rank reads: every shard of the checkpoint, or only those of its coordinates.
  std::map<std::string, std::string> held;  // file -> verified bytes, charged while held
  size_t charged = 0;
  struct Release {
    MemoryAccountant& acct;
    size_t& bytes;
    ~Release() { acct.release(bytes); }
  } release{host, charged};
  for (const auto& e : manifest.at("shards")) {
    if (!full && (e.at("tp_rank") != tp_rank || e.at("pp_rank") != pp_rank)) continue;
    const std::string file = e.at("file").get<std::string>();
    const size_t bytes = e.at("bytes").get<size_t>();
    // Charged before it is read, as an allocator is asked before the bytes arrive.
    host.reserve(bytes, "load." + file);
    charged += bytes;
    held[file] = train::read_verified_shard(dir, e);
  }
  // Then the rank keeps its own shard of what it holds.
  auto shard = train::reassemble_model_shard(
      dir, manifest, tp_rank, pp_rank, total, [&](const nlohmann::json& e) {
        const auto it = held.find(e.at("file").get<std::string>());
        return it != held.end() ? it->second : train::read_verified_shard(dir, e);
      });
  return std::move(shard.params);
}

}  // namespace fl::infer
