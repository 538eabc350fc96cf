// The trainer's state to and from a sharded checkpoint (checkpoint.hpp has the format): every
// rank writes its shard and rank 0 the manifest that vouches for them; a load checks the
// manifest, the torch archive version, the model and the layout, then restores this rank's shard
// as saved or the tensors that match by name (a module load is checkpoint_module.cpp's).
#include <cstdio>
#include <filesystem>

#include "base/utf8.hpp"
#include "kernels/ops.hpp"
#include "workloads/comm/bootstrap.hpp"
#include "workloads/train/checkpoint.hpp"
#include "workloads/train/trainer.hpp"

namespace fl::train {

namespace fs = std::filesystem;

namespace {

// Gathers one string from every rank of `world` onto every rank.
std::vector<std::string> all_gather_strings(comm::Communicator& world, const std::string& mine) {
  const int n = world.size();
  int64_t len = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lens(static_cast<size_t>(n));
  world.all_gather(comm::host_buffer(&len, 1, DType::kI64),
                   comm::host_buffer(lens.data(), lens.size(), DType::kI64));
  const size_t max = static_cast<size_t>(*std::max_element(lens.begin(), lens.end()));
  std::string padded = mine;
  padded.resize(std::max<size_t>(max, 1));
  std::string all(padded.size() * static_cast<size_t>(n), '\0');
  world.all_gather(comm::host_buffer(padded.data(), padded.size(), DType::kU8),
                   comm::host_buffer(all.data(), all.size(), DType::kU8));
  std::vector<std::string> out;
  for (int r = 0; r < n; ++r) {
    out.push_back(all.substr(static_cast<size_t>(r) * padded.size(),
                             static_cast<size_t>(lens[static_cast<size_t>(r)])));
  }
  return out;
}

std::string layout_text(const nlohmann::json& l) {
  return fmt::format("dp {} x tp {} x pp {} (ZeRO {}, world {})", l.at("dp").get<int>(),
                     l.at("tp").get<int>(), l.at("pp").get<int>(), l.at("zero").get<int>(),
                     l.at("world").get<int>());
}

}  // namespace

std::string Trainer::save_checkpoint(const std::string& save_dir) {
  const std::string dir = (fs::path(save_dir) / fmt::format("step_{}", step_)).string();
  const int rank = topo_.rank;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) raise<CheckpointError>("cannot create checkpoint directory {}: {}", dir, ec.message());
  const size_t master_count = zero_->params_master_count();
  Tensor &master = zero_->params_master(), &m = zero_->exp_avg(), &v = zero_->exp_avg_sq();
  // The shard says whose it is (layout coordinates, ZeRO stage, which slice of the model
  // shard it holds), so a shard put in another's place is caught even when the manifest agrees.
  nlohmann::json header = {{"rank", rank},
                           {"dp_rank", topo_.dp_rank},
                           {"tp_rank", topo_.tp_rank},
                           {"pp_rank", topo_.pp_rank},
                           {"zero", topo_.layout.zero},
                           {"offset", zero_->part() * static_cast<size_t>(topo_.dp_rank)},
                           {"part", zero_->part()},
                           {"step", step_}};
  // Host views of the state (copies when it lives on a GPU).
  ops::HostStage params(master.f32(), master_count, false), exp_avg(m.f32(), m.numel(), false),
      exp_avg_sq(v.f32(), v.numel(), false);
  const std::string bytes = encode_shard(header, {{"params", params.host(), master_count},
                                                  {"exp_avg", exp_avg.host(), m.numel()},
                                                  {"exp_avg_sq", exp_avg_sq.host(), v.numel()}});
  const int named = cfg_.shard_name == "local_rank" ? comm::identity_from_env().local_rank : rank;
  const std::string file = fmt::format("shard_rank{}.bin", named);
  write_file_atomic((fs::path(dir) / file).string(), bytes);
  nlohmann::json mine = {{"rank", rank},
                         {"file", file},
                         {"bytes", bytes.size()},
                         {"xxh64", checksum_hex(bytes)},
                         {"dp_rank", topo_.dp_rank},
                         {"tp_rank", topo_.tp_rank},
                         {"pp_rank", topo_.pp_rank},
                         {"params", master_count},
                         {"optimizer", m.numel()},
                         {"data", {{"epoch", epoch_}, {"position", pos_}}}};
  // Every shard is on disk before the manifest that vouches for it.
  auto all = all_gather_strings(*topo_.world, mine.dump());
  if (rank == 0) {
    auto s = scaler_.state();
    nlohmann::json manifest = {
        {"format_version", written_format_version()},
        {"step", step_},
        {"model", model_json(cfg_.model)},
        {"layout",
         {{"world", topo_.layout.world},
          {"dp", topo_.layout.dp},
          {"tp", topo_.layout.tp},
          {"pp", topo_.layout.pp},
          {"zero", topo_.layout.zero}}},
        {"precision", dtype_name(cfg_.precision)},
        {"loss_scaler",
         {{"scale", s.scale},
          {"good", s.good},
          {"skipped", s.skipped},
          {"hysteresis_left", s.hysteresis_left}}},
        // Every random choice is counter-based (keyed by seed and index), so
        // the seeds are the whole RNG state.
        {"rng",
         {{"kind", "counter-based"},
          {"model_seed", cfg_.model.seed},
          {"data_seed", cfg_.data_seed}}},
        {"data",
         {{"data_seed", cfg_.data_seed},
          {"num_samples", cfg_.num_samples},
          {"shuffle", cfg_.shuffle},
          {"drop_last", cfg_.drop_last}}},
        {"state_dict", state_dict_json(cfg_.model, topo_.layout.tp, cfg_.save_key_prefix,
                                       cfg_.save_aliases, cfg_.unpad_vocab)},
        {"state_dict_unpadded", cfg_.unpad_vocab},
        {"shards", nlohmann::json::array()}};
    if (const int fv = torch_file_version_written(); fv > 0) manifest["torch_file_version"] = fv;
    for (auto& a : all) manifest["shards"].push_back(nlohmann::json::parse(a));
    write_file_atomic((fs::path(dir) / "manifest.json").string(), manifest.dump(2));
    write_file_atomic((fs::path(save_dir) / "latest").string(), fmt::format("step_{}\n", step_));
  }
  topo_.world->barrier();  // nobody resumes from a checkpoint whose manifest is not yet written
  return dir;
}

void Trainer::restore_shard(const std::string& dir, const nlohmann::json& entry) {
  const int rank = topo_.rank;
  const std::string file = (fs::path(dir) / entry.at("file").get<std::string>()).string();
  const std::string bytes = read_verified_shard(dir, entry);
  std::vector<std::pair<std::string, std::vector<float>>> sections;
  const auto header = decode_shard(bytes, file, sections);
  check_shard_identity(dir, entry, header,
                       {rank, topo_.dp_rank, topo_.tp_rank, topo_.pp_rank, topo_.layout.zero,
                        static_cast<int64_t>(zero_->part() * static_cast<size_t>(topo_.dp_rank)),
                        static_cast<int64_t>(zero_->part())});
  const size_t master_count = zero_->params_master_count();
  Tensor &master = zero_->params_master(), &exp_avg = zero_->exp_avg(),
         &exp_avg_sq = zero_->exp_avg_sq();
  auto restore = [&](const char* name, float* into, size_t count) {
    for (auto& [n, data] : sections) {
      if (n != name) continue;
      if (data.size() != count) {
        raise<CheckpointError>(
            "checkpoint {}: shard of rank {} has {} elements of '{}', this "
            "rank holds {}",
            dir, rank, data.size(), name, count);
      }
      ops::from_host(into, data.data(), count * sizeof(float));
      return;
    }
    raise<CheckpointError>("checkpoint {}: shard of rank {} has no '{}' section", dir, rank, name);
  };
  restore("params", master.f32(), master_count);
  restore("exp_avg", exp_avg.f32(), exp_avg.numel());
  restore("exp_avg_sq", exp_avg_sq.f32(), exp_avg_sq.numel());
}

// A load that is not strict and did not match every key: the tensors that match by name, from
// the checkpoint's model shards of this TP rank (any layer count), into this rank's slices.
void Trainer::restore_named(const std::string& dir, const nlohmann::json& m,
                            const NamedLoad& named) {
  const size_t offset = zero_->part() * static_cast<size_t>(topo_.dp_rank);
  Tensor &master = zero_->params_master(), &exp_avg = zero_->exp_avg(),
         &exp_avg_sq = zero_->exp_avg_sq();
  const size_t master_count = zero_->params_master_count();
  const bool moments_partitioned = topo_.layout.zero > 0;
  // Host views written back when they go: what no key names keeps its value.
  ops::HostStage p(master.f32(), master_count), a(exp_avg.f32(), exp_avg.numel()),
      v(exp_avg_sq.f32(), exp_avg_sq.numel());
  restore_by_name(dir, m, named, layout_, topo_.tp_rank,
                  {p.host(), zero_->partitioned_master() ? offset : 0, master_count},
                  {a.host(), moments_partitioned ? offset : 0, exp_avg.numel()},
                  {v.host(), moments_partitioned ? offset : 0, exp_avg_sq.numel()});
}

void Trainer::load_checkpoint(const std::string& path) try {
  const std::string dir = resolve_checkpoint(path);
  const nlohmann::json m = read_manifest(dir);
  check_torch_file_version(dir, m);
  // model.load_state_dict(state_dict, strict): PyTorch's checks and words, by name.
  const NamedLoad named =
      load_named(dir, m, cfg_.model, topo_.layout.tp, cfg_.strip_key_prefix, cfg_.load_strict,
                 "workload.checkpoint.strip_prefix (--strip-key-prefix)");
  if (topo_.rank == 0) std::printf("# load_state_dict: %s\n", named.keys.repr().c_str());
  // Same keys but another structure (tied or not): the tensors load by name, as in PyTorch.
  const bool same_structure = structure_from_manifest(m) == cfg_.model.structure;
  if (named.keys.all_matched() && same_structure) check_compatible(dir, m, cfg_.model);
  const auto& l = m.at("layout");
  nlohmann::json here = {{"world", topo_.layout.world},
                         {"dp", topo_.layout.dp},
                         {"tp", topo_.layout.tp},
                         {"pp", topo_.layout.pp},
                         {"zero", topo_.layout.zero}};
  if (l != here) {
    const bool dp_only = l.at("tp") == here.at("tp") && l.at("pp") == here.at("pp") &&
                         l.at("zero") == here.at("zero");
    raise<CheckpointError>(
        "checkpoint {} was saved with layout {} but this run is {}; a sharded checkpoint only "
        "loads into the layout that wrote it{}",
        dir, layout_text(l), layout_text(here),
        dp_only ? fmt::format(" (convert it first: fl-ckpt reshard --in {} --out DIR --dp {})", dir,
                              topo_.layout.dp)
                : "");
  }
  const int rank = topo_.rank;
  const nlohmann::json* entry = nullptr;
  for (auto& s : m.at("shards")) {
    if (s.at("rank").get<int>() == rank) entry = &s;
  }
  if (!entry)
    raise<CheckpointError>("checkpoint {}: the manifest lists no shard for rank {}", dir, rank);
  if (cfg_.load_into != "engine") {
    load_module(dir, m, named);
  } else if (!named.keys.all_matched() || !same_structure) {
    restore_named(dir, m, named);
  } else {
    restore_shard(dir, *entry);
  }
  const auto& s = m.at("loss_scaler");
  scaler_.restore({s.at("scale").get<float>(), s.at("good").get<int64_t>(),
                   s.at("skipped").get<int64_t>(), s.at("hysteresis_left").get<int>()});
  step_ = m.at("step").get<int64_t>();
  epoch_ = entry->at("data").at("epoch").get<int>();
  pos_ = entry->at("data").at("position").get<size_t>();
  zero_->restored();
} catch (const nlohmann::json::exception& e) {  // a key missing or of another type
  raise<CheckpointError>("checkpoint manifest of {} does not hold what a checkpoint needs: {}",
                         path, valid_utf8(e.what()));
}

}  // namespace fl::train
