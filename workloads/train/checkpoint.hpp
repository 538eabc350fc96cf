// Sharded checkpoints: one binary shard per rank plus a JSON manifest (format version, layout,
// model, step, per-shard size and xxh64, optimizer / loss-scaler / data-loader state), each file
// written atomically (temporary file, fsync, rename). Loading validates before it restores and
// reports each problem as its own error naming file and rank.
#pragma once

#include <functional>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "workloads/model/config.hpp"
#include "workloads/model/params.hpp"
#include "workloads/model/state_dict.hpp"

namespace fl::train {

inline constexpr int kCheckpointFormatVersion = 1;

using fl::CheckpointError;

// Resolves `path` to a checkpoint directory: itself if it holds manifest.json, else the directory
// named by its `latest` file.
std::string resolve_checkpoint(const std::string& path);
// Reads DIR/manifest.json and checks it (check_manifest): CheckpointError otherwise.
nlohmann::json read_manifest(const std::string& dir);
// Every key a loader or fl-ckpt reads is there with its type and in range (coordinates inside
// the layout, each rank and each coordinate once), and the format version is the one this build
// reads; a CheckpointError names the manifest file and the key otherwise.
void check_manifest(const std::string& dir, const nlohmann::json& manifest);
// DIR/NAME when NAME is one path component and what it resolves to (symbolic links followed)
// stays inside DIR; a CheckpointError saying `via` (what named it) otherwise.
std::string inside_save_dir(const std::string& dir, const std::string& name,
                            const std::string& via);

// What a shard must say about itself where it is loaded: its rank, layout coordinates, ZeRO
// stage and (offset >= 0) which slice of the model shard it holds (element offset and size).
struct ShardIdentity {
  int rank, dp_rank, tp_rank, pp_rank, zero;
  int64_t offset = -1, part = -1;
};
// A CheckpointError naming the file when a shard's own header disagrees with `want`.
void check_shard_identity(const std::string& dir, const nlohmann::json& entry,
                          const nlohmann::json& header, const ShardIdentity& want);

// What `--auto-resume DIR` resumes from: DIR's `latest` checkpoint; without a `latest` file,
// the newest step_<N> directory holding a manifest when `scan` is set (else nothing); "" when
// there is nothing to resume. `note` gets one line saying what was decided and why.
std::string auto_resume_target(const std::string& dir, bool scan, std::string& note);
// The format version this process writes: kCheckpointFormatVersion unless
// FAULTLINE_CHECKPOINT_FORMAT stamps another (what another release of the trainer would write).
int written_format_version();
// torch.save's archive version the manifest records ("torch_file_version"), by the job's
// workload.versions.torch: 3 (the zip format) from torch 1.6 on; 0 (the legacy format, nothing
// recorded) before it or when the scenario states no torch.
int torch_file_version_written();
// An older torch reads a zip archive only up to version 2: a newer checkpoint stops it with
// PyTorch's INTERNAL ASSERT, as a CheckpointError. Nothing is checked without a stated torch.
void check_torch_file_version(const std::string& dir, const nlohmann::json& manifest);
// Throws CheckpointError unless the checkpoint's format version is the one this build reads and
// its model has this model's shape; a shape difference names the first tensor it affects.
void check_compatible(const std::string& dir, const nlohmann::json& manifest,
                      const model::GptConfig& cfg);

// Writes `bytes` to `path` atomically: temporary file in the same directory, fsync, rename,
// fsync of the directory. Throws CheckpointError naming the file and the errno text.
void write_file_atomic(const std::string& path, const std::string& bytes);
std::string read_file(const std::string& path);
uint64_t checksum(const std::string& bytes);
// The checksum as a manifest entry's "xxh64" holds it: 16 hex digits.
std::string checksum_hex(const std::string& bytes);

// Reads the shard a manifest entry names and checks its size and xxh64 against the entry;
// a missing or corrupt shard is a CheckpointError naming the directory, file and rank.
std::string read_verified_shard(const std::string& dir, const nlohmann::json& entry);

// Shard encoding: magic, a JSON header, then named float sections in order.
struct ShardSection {
  std::string name;
  const float* data;
  size_t count;
};
std::string encode_shard(const nlohmann::json& header, const std::vector<ShardSection>& sections);
// Decodes; `sections` gets name -> floats. Throws CheckpointError naming `path` if malformed.
nlohmann::json decode_shard(const std::string& bytes, const std::string& path,
                            std::vector<std::pair<std::string, std::vector<float>>>& sections);

// The full (unpadded) state of model shard (tp_rank, pp_rank) of a checkpoint, whatever its DP
// size and ZeRO stage: parameters, and Adam's two moments. `total` is that shard's parameter
// count (ParamLayout::total()). Verifies every shard it reads against the manifest.
// Whether the shards of a checkpoint hold the "params" section partitioned across data-parallel
// ranks (the fp32 master weights of ZeRO-3, and of ZeRO-1/2 under fp16/bf16) or whole.
bool params_partitioned(const nlohmann::json& manifest);

struct ModelShardState {
  std::vector<float> params, exp_avg, exp_avg_sq;
};
// `read` returns a manifest entry's verified shard bytes (default: read_verified_shard from
// disk); a loader that already holds the files in memory hands them over through it.
using ShardReader = std::function<std::string(const nlohmann::json& entry)>;
ModelShardState reassemble_model_shard(const std::string& dir, const nlohmann::json& manifest,
                                       int tp_rank, int pp_rank, size_t total,
                                       const ShardReader& read = {});

// ---------------------------------------------------------------------------------------------
// Named state dicts (checkpoint_state_dict.cpp, docs/workloads.md#state-dicts).

// The manifest's "model": sizes, seed and structure (tied embeddings, vocabulary padding), and the
// model a manifest describes (a manifest written before "structure" existed: the defaults).
nlohmann::json model_json(const model::GptConfig& cfg);
model::GptConfig model_from_manifest(const nlohmann::json& manifest);
model::Structure structure_from_manifest(const nlohmann::json& manifest);
// The manifest's "state_dict": every key as written (with the saver's prefix) and its shape, at
// TP size `tp` (the padded vocabulary's rows). `aliases` false leaves out the keys that name a
// tied tensor again (lm_head.weight), as safetensors and save_pretrained do; `unpadded` lists wte
// and lm_head with the vocabulary's own rows (a save that gathers them and strips the padding, as
// Colossal-AI's does; the manifest then says "state_dict_unpadded").
nlohmann::json state_dict_json(const model::GptConfig& cfg, int tp, const std::string& prefix,
                               bool aliases = true, bool unpadded = false);
// The keys a checkpoint holds: its manifest's "state_dict", or (a checkpoint written before
// manifests had one) its model's own keys.
std::vector<model::TensorKey> checkpoint_state_dict(const std::string& dir,
                                                    const nlohmann::json& manifest);

// What a load by name decided: PyTorch's result, and for each model key the checkpoint's key
// (its own, unprefixed name in the checkpoint's model) whose values it takes.
struct NamedLoad {
  model::IncompatibleKeys keys;
  std::map<std::string, std::string> source;  // model key -> checkpoint model's key
};
// load_state_dict(checkpoint keys with `strip_prefix` consumed, strict) against the model `cfg` at
// TP size `tp`:
// PyTorch's error as a CheckpointError, or what loads from where. A `strip_prefix` no key
// starts with is a ConfigError naming `strip_option`.
NamedLoad load_named(const std::string& dir, const nlohmann::json& manifest,
                     const model::GptConfig& cfg, int tp, const std::string& strip_prefix,
                     bool strict, const std::string& strip_option);

// Copies the loaded tensors' values from the checkpoint into this rank's slice [lo, lo+count) of
// its model shard's flat layout `into` (parameters, or a moment with `section`), by name. wte and
// lm_head copy by row of the whole tensor, so they load across another vocabulary split or
// padding (rows the checkpoint lacks keep their values, rows beyond this model are dropped).
struct NamedSlice {
  float* data;
  size_t lo, count;
};
void restore_by_name(const std::string& dir, const nlohmann::json& manifest, const NamedLoad& load,
                     const model::ParamLayout& layout, int tp_rank, const NamedSlice& params,
                     const NamedSlice& exp_avg, const NamedSlice& exp_avg_sq);

}  // namespace fl::train
