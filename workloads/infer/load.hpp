// How a server gets its weights out of a sharded training checkpoint, in the two ways frameworks
// do it: every rank loads the whole checkpoint into host memory and then keeps its own shard
// (`full`, what loading one consolidated file with torch.load and slicing it amounts to), or each
// rank reads only the pre-sharded files of its own tensor/pipeline coordinates (`sharded`). The
// bytes a rank holds while it loads are charged to the host accountant, so a host budget
// (FAULTLINE_HOST_MEMORY_BUDGET_BYTES, --host-memory-budget) that the sharded load fits in stops
// the full load with "out of memory on host".
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/memory.hpp"

namespace fl::infer {

// "full" or "sharded"; ConfigError naming --load and what is allowed otherwise.
void check_load_mode(const std::string& mode);

// Model shard (tp_rank, pp_rank) of checkpoint `dir` (manifest already read and checked), with
// `total` parameters. The shard files read are held (and charged to `host` as "load.<file>")
// until the shard is assembled, then released.
std::vector<float> load_inference_weights(const std::string& dir, const nlohmann::json& manifest,
                                          int tp_rank, int pp_rank, size_t total,
                                          const std::string& mode, MemoryAccountant& host);

// DeepSpeed's init_inference(checkpoint=JSON): a description of the checkpoint's files, read as
// SDLoaderFactory.get_sd_loader_json reads it: `type`, `checkpoints` (file names, relative to
// `base_dir` if given, itself relative to the description's folder) and `version`, in that order,
// each missing key Python's KeyError. Returns the folder the files are in, after checking that it
// is one faultline checkpoint and that the list names every shard file of its manifest.
// CheckpointError for a description that is not JSON (json.decoder.JSONDecodeError), a folder
// (IsADirectoryError), an absent file (FileNotFoundError), a missing key or a list that misses a
// shard.
struct CheckpointDescription {
  std::string dir;                 // the checkpoint's step folder
  std::vector<std::string> files;  // as listed
  std::string type;
  // 'parallelization' ("pp" when absent, as DeepSpeed's loaders default it).
  std::string parallelization = "pp";
};
CheckpointDescription read_checkpoint_description(const std::string& path);

}  // namespace fl::infer
