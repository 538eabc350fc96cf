#include "workloads/infer/load.hpp"

#include <algorithm>
#include <filesystem>
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

CheckpointDescription read_checkpoint_description(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    raise<CheckpointError>(
        "IsADirectoryError: [Errno 21] Is a directory: '{}' (init_inference's "
        "checkpoint= is a JSON description of the checkpoint's files)",
        path);
  }
  if (!fs::exists(path, ec)) {
    raise<CheckpointError>("FileNotFoundError: [Errno 2] No such file or directory: '{}'", path);
  }
  nlohmann::json data;
  try {
    data = nlohmann::json::parse(train::read_file(path));
  } catch (const nlohmann::json::parse_error& e) {
    raise<CheckpointError>("json.decoder.JSONDecodeError: {} ({} is not a JSON description)",
                           e.what(), path);
  }
  // get_sd_loader_json: sd_type = data['type']; ckpt_list = data['checkpoints']; version = ...
  for (const char* key : {"type", "checkpoints", "version"}) {
    if (!data.is_object() || !data.contains(key)) {
      raise<CheckpointError>(
          "KeyError: '{}' (the checkpoint description {} has no '{}': init_inference reads "
          "'type', 'checkpoints' and 'version'{})",
          key, path, key,
          data.is_object() && data.contains("shards")
              ? "; this is a training checkpoint's own manifest, whose files are under 'shards'"
              : "");
    }
  }
  CheckpointDescription d;
  d.type = data["type"].is_string() ? data["type"].get<std::string>() : data["type"].dump();
  if (data.contains("parallelization") && data["parallelization"].is_string()) {
    d.parallelization = data["parallelization"].get<std::string>();
  }
  if (!data["checkpoints"].is_array() || data["checkpoints"].empty()) {
    raise<CheckpointError>("the checkpoint description {} lists no files under 'checkpoints'",
                           path);
  }
  for (const auto& f : data["checkpoints"]) {
    if (!f.is_string()) {
      raise<CheckpointError>(
          "the checkpoint description {} lists {} under 'checkpoints' (allowed: "
          "file names)",
          path, f.dump());
    }
    d.files.push_back(f.get<std::string>());
  }
  fs::path base = fs::path(path).parent_path();
  if (data.contains("base_dir") && data["base_dir"].is_string()) {
    base /= data["base_dir"].get<std::string>();
  }
  d.dir = base.lexically_normal().string();
  for (const auto& f : d.files) {
    if (!fs::exists(base / f, ec)) {
      raise<CheckpointError>(
          "FileNotFoundError: [Errno 2] No such file or directory: '{}' (listed "
          "in {})",
          (base / f).string(), path);
    }
  }
  // The files must be one checkpoint's shards, every one of them.
  const auto manifest = train::read_manifest(d.dir);
  for (const auto& e : manifest.at("shards")) {
    const std::string file = e.at("file").get<std::string>();
    if (std::find(d.files.begin(), d.files.end(), file) == d.files.end()) {
      raise<CheckpointError>(
          "the checkpoint description {} does not list {}, a shard of {} "
          "(tp rank {}, pp rank {})",
          path, file, d.dir, e.at("tp_rank").get<int>(), e.at("pp_rank").get<int>());
    }
  }
  return d;
}

}  // namespace fl::infer
