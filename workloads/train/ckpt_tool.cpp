// fl-ckpt: offline checkpoint tools.
//   fl-ckpt inspect DIR                 manifest summary; verifies every shard's size and xxh64
//   fl-ckpt digest DIR                  xxh64 of each model shard's full parameters (any DP size)
//   fl-ckpt keys DIR                    the state dict's keys and shapes, as the saver named them
//   fl-ckpt reshard --in DIR --out DIR --dp N
//                                       converts a checkpoint to another data-parallel size (same
//                                       TP, PP and ZeRO stage): parameters and optimizer state are
//                                       reassembled and re-partitioned; the data position restarts
//                                       at the next epoch, since the sampler's shards change.
//   fl-ckpt consolidate --in DIR --out DIR [--assume-process-group]
//                                       a ZeRO checkpoint to one without ZeRO on one data-parallel
//                                       rank (zero_to_fp32.py's job): whole fp32 parameters and
//                                       moments per model shard. Runs in one process, without a
//                                       process group: who writes is asked of the project's
//                                       helper, whose no-group path is a world of one;
//                                       --assume-process-group asks as code that assumes a group
//                                       does (dist.get_rank()), which fails as PyTorch's does.
//                                       --deepspeed VERSION reads the checkpoint as that release's
//                                       zero_to_fp32.py does: it needs the *_optim_states.pt
//                                       files ZeRO writes (none at stage 0), and before 0.10.0
//                                       (pull request #3936) it knows stages 2 and 3 only.
//   fl-ckpt describe DIR --out FILE [--type T] [--form ds_model|tutorial]
//                                       writes the JSON description of a checkpoint's files that
//                                       DeepSpeed's init_inference(checkpoint=) reads: type,
//                                       checkpoints (the shard files), version, base_dir (the
//                                       step folder relative to FILE's), tp_size. --form
//                                       tutorial writes the form DeepSpeed's inference tutorial
//                                       documented instead (type DeepSpeed, version,
//                                       checkpoint_path), which the loader does not read
//                                       (deepspeedai/DeepSpeed#3813).
#include <xxhash.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <map>

#include "base/utf8.hpp"
#include "base/version.hpp"
#include "workloads/comm/default_group.hpp"
#include "workloads/comm/worker_errors.hpp"
#include "workloads/model/params.hpp"
#include "workloads/train/checkpoint.hpp"

namespace fs = std::filesystem;
using namespace fl;
using namespace fl::train;

namespace {

// Reads every shard once to verify it (size and checksum against the manifest).
void verify_all(const std::string& dir, const nlohmann::json& m) {
  for (auto& e : m.at("shards")) read_verified_shard(dir, e);
}

int inspect(const std::string& path) {
  const std::string dir = resolve_checkpoint(path);
  auto m = read_manifest(dir);
  auto& l = m.at("layout");
  std::printf("checkpoint %s\n  format version %d, step %lld, precision %s\n", dir.c_str(),
              m.at("format_version").get<int>(), m.at("step").get<long long>(),
              m.at("precision").get<std::string>().c_str());
  std::printf("  layout: world %d = dp %d x tp %d x pp %d, ZeRO %d\n", l.at("world").get<int>(),
              l.at("dp").get<int>(), l.at("tp").get<int>(), l.at("pp").get<int>(),
              l.at("zero").get<int>());
  verify_all(dir, m);
  for (auto& e : m.at("shards")) {
    std::printf("  %-18s rank %2d (dp %d tp %d pp %d) %9zu bytes xxh64 %s  ok\n",
                e.at("file").get<std::string>().c_str(), e.at("rank").get<int>(),
                e.at("dp_rank").get<int>(), e.at("tp_rank").get<int>(), e.at("pp_rank").get<int>(),
                e.at("bytes").get<size_t>(), e.at("xxh64").get<std::string>().c_str());
  }
  return 0;
}

int digest(const std::string& path) {
  const std::string dir = resolve_checkpoint(path);
  auto m = read_manifest(dir);
  auto& l = m.at("layout");
  const auto cfg = model_from_manifest(m);
  for (int pp = 0; pp < l.at("pp").get<int>(); ++pp) {
    for (int tp = 0; tp < l.at("tp").get<int>(); ++tp) {
      model::ParamLayout pl(cfg, l.at("tp"), tp, l.at("pp"), pp);
      auto f = reassemble_model_shard(dir, m, tp, pp, pl.total());
      std::printf(
          "tp %d pp %d: params %016llx exp_avg %016llx exp_avg_sq %016llx\n", tp, pp,
          static_cast<unsigned long long>(XXH64(f.params.data(), f.params.size() * 4, 0)),
          static_cast<unsigned long long>(XXH64(f.exp_avg.data(), f.exp_avg.size() * 4, 0)),
          static_cast<unsigned long long>(XXH64(f.exp_avg_sq.data(), f.exp_avg_sq.size() * 4, 0)));
    }
  }
  return 0;
}

// One line per tensor, as `for k, v in sd.items(): print(k, v.shape)` prints them.
int keys(const std::string& path) {
  const std::string dir = resolve_checkpoint(path);
  const auto m = read_manifest(dir);
  for (auto& k : checkpoint_state_dict(dir, m)) {
    std::printf("%s %s\n", k.name.c_str(), model::torch_size(k.shape).c_str());
  }
  return 0;
}

// To `new_dp` data-parallel ranks at ZeRO stage `out_zero` (-1: the checkpoint's).
int reshard(const std::string& in, const std::string& out, int new_dp, int out_zero = -1) {
  const std::string dir = resolve_checkpoint(in);
  auto m = read_manifest(dir);
  if (m.at("format_version").get<int>() != kCheckpointFormatVersion) {
    raise<CheckpointError>("{} has format version {}, this tool reads {}", dir,
                           m.at("format_version").get<int>(), kCheckpointFormatVersion);
  }
  if (new_dp < 1) raise<ConfigError>("--dp {} must be at least 1", new_dp);
  const auto& l = m.at("layout");
  const int tp = l.at("tp"), pp = l.at("pp"),
            zero = out_zero >= 0 ? out_zero : l.at("zero").get<int>();
  if (zero > 0 && new_dp == 1) {
    raise<ConfigError>("cannot reshard a ZeRO-{} checkpoint to dp 1: ZeRO needs dp > 1", zero);
  }
  const auto cfg = model_from_manifest(m);
  const std::string step_dir = (fs::path(out) / fs::path(dir).filename()).string();
  fs::create_directories(step_dir);
  nlohmann::json manifest = m;
  manifest["layout"]["dp"] = new_dp;
  manifest["layout"]["world"] = new_dp * tp * pp;
  manifest["layout"]["zero"] = zero;
  manifest["shards"] = nlohmann::json::array();
  int max_epoch = 0;
  for (auto& e : m.at("shards"))
    max_epoch = std::max(max_epoch, e.at("data").at("epoch").get<int>());
  for (int p = 0; p < pp; ++p) {
    for (int t = 0; t < tp; ++t) {
      model::ParamLayout pl(cfg, tp, t, pp, p);
      const size_t total = pl.total();
      auto f = reassemble_model_shard(dir, m, t, p, total);
      const size_t part = (total + static_cast<size_t>(new_dp) - 1) / static_cast<size_t>(new_dp);
      const size_t padded = part * static_cast<size_t>(new_dp);
      f.params.resize(padded, 0.0f);
      f.exp_avg.resize(padded, 0.0f);
      f.exp_avg_sq.resize(padded, 0.0f);
      for (int d = 0; d < new_dp; ++d) {
        const int rank = t + tp * (d + new_dp * p);
        const size_t lo = part * static_cast<size_t>(d);
        auto slice = [&](const std::vector<float>& v) {
          return ShardSection{"", v.data() + lo, part};
        };
        ShardSection ps = params_partitioned(manifest) ? slice(f.params)
                                                       : ShardSection{"", f.params.data(), padded};
        ShardSection ms = zero == 0 ? ShardSection{"", f.exp_avg.data(), padded} : slice(f.exp_avg);
        ShardSection vs =
            zero == 0 ? ShardSection{"", f.exp_avg_sq.data(), padded} : slice(f.exp_avg_sq);
        ps.name = "params";
        ms.name = "exp_avg";
        vs.name = "exp_avg_sq";
        nlohmann::json header = {{"rank", rank}, {"dp_rank", d},
                                 {"tp_rank", t}, {"pp_rank", p},
                                 {"zero", zero}, {"offset", part * static_cast<size_t>(d)},
                                 {"part", part}, {"step", m.at("step")}};
        const std::string bytes = encode_shard(header, {ps, ms, vs});
        const std::string file = fmt::format("shard_rank{}.bin", rank);
        write_file_atomic((fs::path(step_dir) / file).string(), bytes);
        manifest["shards"].push_back({{"rank", rank},
                                      {"file", file},
                                      {"bytes", bytes.size()},
                                      {"xxh64", checksum_hex(bytes)},
                                      {"dp_rank", d},
                                      {"tp_rank", t},
                                      {"pp_rank", p},
                                      {"params", ps.count},
                                      {"optimizer", ms.count},
                                      {"data", {{"epoch", max_epoch + 1}, {"position", 0}}}});
      }
    }
  }
  std::sort(manifest["shards"].begin(), manifest["shards"].end(),
            [](auto& a, auto& b) { return a["rank"] < b["rank"]; });
  write_file_atomic((fs::path(step_dir) / "manifest.json").string(), manifest.dump(2));
  write_file_atomic((fs::path(out) / "latest").string(),
                    fs::path(step_dir).filename().string() + "\n");
  std::printf("resharded %s (dp %d) -> %s (dp %d); data restarts at epoch %d\n", dir.c_str(),
              l.at("dp").get<int>(), step_dir.c_str(), new_dp, max_epoch + 1);
  return 0;
}

// What DeepSpeed release VERSION's zero_to_fp32.py accepts of a checkpoint of ZeRO stage `zero`
// over `dp` ranks in `dir`, as its parse_optim_states reads it: the stage comes from the ZeRO
// optimizer files, which stage 0 does not write (its optimizer state sits in the model states
// file), and the fp32 partitions' key is known for stages 2 and 3 only before 0.10.0.
void check_zero_to_fp32(const std::string& version, const std::string& dir, int zero, int dp) {
  const auto v = parse_version(version);
  if (!v) {
    raise<ConfigError>("--deepspeed '{}' is not a version (allowed: {})", version, kVersionAllowed);
  }
  std::printf("Processing zero checkpoint '%s'\n", dir.c_str());
  if (zero == 0) {
    raise<CheckpointError>(
        "FileNotFoundError: can't find *_optim_states.pt files in directory '{}' (zero_to_fp32.py "
        "of DeepSpeed {} reads ZeRO's optimizer partitions; a ZeRO stage 0 checkpoint has none)",
        dir, version);
  }
  const bool stage1_known = v->major > 0 || v->minor >= 10;
  if (zero == 1 && !stage1_known) {
    raise<CheckpointError>(
        "ValueError: unknown zero stage {} (zero_to_fp32.py of DeepSpeed {} knows stages 2 and "
        "3; stage 1 from 0.10.0, pull request #3936)",
        zero, version);
  }
  std::printf("Detected checkpoint of type zero stage %d, world_size: %d\n", zero, dp);
}

// zero_to_fp32.py's job in one process: the writer is rank 0 of the default group, or of a
// world of one when there is none (the helper's no-group path).
int consolidate(const std::string& in, const std::string& out, bool assume_group,
                const std::string& deepspeed) {
  const int rank = assume_group ? comm::default_group_rank() : comm::rank_or_zero();
  const int world = assume_group ? comm::default_group_size() : comm::world_size_or_one();
  std::printf("consolidating as rank %d of %d\n", rank, world);
  if (rank != 0) return 0;
  if (!deepspeed.empty()) {
    const std::string dir = resolve_checkpoint(in);
    const auto m = read_manifest(dir);
    check_zero_to_fp32(deepspeed, dir, m.at("layout").at("zero").get<int>(),
                       m.at("layout").at("dp").get<int>());
  }
  return reshard(in, out, 1, 0);
}

// The description init_inference reads (what a model repository ships as its ds_inference
// checkpoints json), of the resolved step folder.
int describe(const std::string& path, const std::string& out, const std::string& type,
             const std::string& form, bool parallelization) {
  const std::string dir = resolve_checkpoint(path);
  const auto m = read_manifest(dir);
  nlohmann::json files = nlohmann::json::array();
  for (const auto& e : m.at("shards")) files.push_back(e.at("file"));
  const fs::path folder = fs::absolute(fs::path(out)).parent_path();
  const std::string rel = fs::relative(fs::absolute(dir), folder).string();
  nlohmann::json d =
      form == "tutorial"
          ? nlohmann::json{{"type", "DeepSpeed"}, {"version", 0.0}, {"checkpoint_path", rel}}
          : nlohmann::json{
                {"type", type}, {"checkpoints", files}, {"version", 1.0}, {"base_dir", rel}};
  if (form != "tutorial" && parallelization) {
    d["parallelization"] = "tp";
    d["tp_size"] = m.at("layout").at("tp");
  }
  write_file_atomic(out, d.dump(2) + "\n");
  std::printf("described %s (%zu files) in %s\n", dir.c_str(), files.size(), out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"faultline checkpoint tools"};
  app.require_subcommand(1);
  std::string path, in, out;
  int dp = 0;
  auto* ins = app.add_subcommand("inspect", "Summarise a checkpoint and verify its shards");
  ins->add_option("dir", path)->required();
  auto* dig = app.add_subcommand("digest", "Checksums of each model shard's full state");
  dig->add_option("dir", path)->required();
  auto* ks = app.add_subcommand("keys", "The state dict's keys and shapes");
  ks->add_option("dir", path)->required();
  auto* rs = app.add_subcommand("reshard", "Convert to another data-parallel size");
  rs->add_option("--in", in)->required();
  rs->add_option("--out", out)->required();
  rs->add_option("--dp", dp)->required();
  auto* con = app.add_subcommand("consolidate", "A ZeRO checkpoint to one dp rank without ZeRO");
  bool assume_group = false;
  con->add_option("--in", in)->required();
  con->add_option("--out", out)->required();
  con->add_flag("--assume-process-group", assume_group,
                "Ask dist.get_rank() as code that assumes an initialised group (the bug form)");
  std::string deepspeed;
  con->add_option("--deepspeed", deepspeed,
                  "Read the checkpoint as this DeepSpeed release's zero_to_fp32.py does (stage 0 "
                  "refused; stage 1 from 0.10.0)");
  auto* desc = app.add_subcommand("describe", "The JSON description init_inference reads");
  std::string type = "ds_model";
  desc->add_option("dir", path)->required();
  desc->add_option("--out", out)->required();
  desc->add_option("--type", type, "The description's type (DeepSpeed: ds_model, Megatron, bloom)");
  std::string form = "ds_model";
  desc->add_option("--form", form,
                   "ds_model (what the loader reads) or tutorial (the inference tutorial's "
                   "documented form: type, version, checkpoint_path)")
      ->check(CLI::IsMember({"ds_model", "tutorial"}));
  bool no_parallelization = false;
  desc->add_flag("--no-parallelization", no_parallelization,
                 "Leave out 'parallelization: tp' and 'tp_size', as the checkpoints.json that "
                 "DeepSpeedExamples' pipeline writes for a model repository does");
  CLI11_PARSE(app, argc, argv);
  return comm::run_worker_main([&]() -> int {
    try {
      if (ins->parsed()) return inspect(path);
      if (dig->parsed()) return digest(path);
      if (ks->parsed()) return keys(path);
      if (con->parsed()) return consolidate(in, out, assume_group, deepspeed);
      if (desc->parsed()) return describe(path, out, type, form, !no_parallelization);
      return reshard(in, out, dp);
    } catch (const nlohmann::json::exception& e) {  // a manifest key missing or of another type
      raise<CheckpointError>("checkpoint manifest of {} does not hold what a checkpoint needs: {}",
                             rs->parsed() || con->parsed() ? in : path, valid_utf8(e.what()));
    }
  });
}
