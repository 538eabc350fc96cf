// What a loader checks before it trusts a checkpoint: the manifest's keys, types and ranges
// (check_manifest), a shard's own identity against where it is loaded (check_shard_identity) and
// names that must stay inside the save directory (inside_save_dir). Each failure is a
// CheckpointError naming the file and the key (exit status 27).
#include <cstdint>
#include <filesystem>
#include <set>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "workloads/train/checkpoint.hpp"

namespace fl::train {

namespace fs = std::filesystem;

std::string inside_save_dir(const std::string& save_dir, const std::string& name,
                            const std::string& via) {
  const bool one_component = !name.empty() && name != "." && name != ".." &&
                             name.find('/') == std::string::npos &&
                             name.find('\0') == std::string::npos;
  if (!one_component) {
    raise<CheckpointError>(
        "checkpoint {}: {} names '{}', which is not a directory name inside it (allowed: one "
        "path component such as step_4)",
        save_dir, via, name);
  }
  const fs::path target = fs::path(save_dir) / name;
  std::error_code ec1, ec2;
  const fs::path root = fs::weakly_canonical(fs::path(save_dir), ec1);
  const fs::path real = fs::weakly_canonical(target, ec2);
  const auto rel = real.lexically_relative(root);
  if (ec1 || ec2 || rel.empty() || rel.begin()->string() == ".." || rel.string() == ".") {
    raise<CheckpointError>(
        "checkpoint {}: {} leads to {}, outside the save directory {} (a symbolic link out of "
        "it is refused)",
        save_dir, via, real.string(), root.string());
  }
  return target.string();
}

namespace {

constexpr int64_t kBig = int64_t{1} << 40;

// Reads the manifest's values by key; a missing or mistyped value, or one out of its range, is a
// CheckpointError naming the file and the key.
class ManifestReader {
 public:
  explicit ManifestReader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    raise<CheckpointError>("checkpoint manifest {}: {} {}", file_, key, what);
  }
  const nlohmann::json& member(const nlohmann::json& parent, const std::string& name,
                               const std::string& key) const {
    if (!parent.is_object() || !parent.contains(name)) fail(key, "is missing");
    return parent[name];
  }
  const nlohmann::json& object(const nlohmann::json& parent, const std::string& name,
                               const std::string& key) const {
    const auto& v = member(parent, name, key);
    if (!v.is_object()) fail(key, fmt::format("must be an object, not {}", v.type_name()));
    return v;
  }
  int64_t integer(const nlohmann::json& parent, const std::string& name, const std::string& key,
                  int64_t lo, int64_t hi) const {
    const auto& v = member(parent, name, key);
    if (!v.is_number_integer() ||
        (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))) {
      fail(key, fmt::format("must be an integer, not {}", v.dump()));
    }
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) fail(key, fmt::format("is {}, allowed {} to {}", x, lo, hi));
    return x;
  }
  std::string text(const nlohmann::json& parent, const std::string& name,
                   const std::string& key) const {
    const auto& v = member(parent, name, key);
    if (!v.is_string()) fail(key, fmt::format("must be a string, not {}", v.type_name()));
    return v.get<std::string>();
  }

 private:
  std::string file_;
};

struct ManifestLayout {
  int64_t dp = 0, tp = 0, pp = 0, world = 0;
};

void check_model(const ManifestReader& in, const nlohmann::json& m) {
  const auto& model = in.object(m, "model", "model");
  for (const char* k : {"vocab", "d_model", "layers", "heads", "seq_len"}) {
    in.integer(model, k, std::string("model.") + k, 1, 1 << 24);
  }
  if (!in.member(model, "seed", "model.seed").is_number_integer()) {
    in.fail("model.seed", "must be an integer");
  }
}

ManifestLayout check_layout(const ManifestReader& in, const nlohmann::json& m) {
  const auto& l = in.object(m, "layout", "layout");
  ManifestLayout out;
  out.dp = in.integer(l, "dp", "layout.dp", 1, 1 << 20);
  out.tp = in.integer(l, "tp", "layout.tp", 1, 1 << 20);
  out.pp = in.integer(l, "pp", "layout.pp", 1, 1 << 20);
  in.integer(l, "zero", "layout.zero", 0, 3);
  out.world = in.integer(l, "world", "layout.world", 1, 1 << 20);
  if (out.world != out.dp * out.tp * out.pp) {
    in.fail("layout.world", fmt::format("is {}, but dp {} x tp {} x pp {} is {}", out.world, out.dp,
                                        out.tp, out.pp, out.dp * out.tp * out.pp));
  }
  return out;
}

void check_loss_scaler(const ManifestReader& in, const nlohmann::json& m) {
  const auto& ls = in.object(m, "loss_scaler", "loss_scaler");
  if (!in.member(ls, "scale", "loss_scaler.scale").is_number()) {
    in.fail("loss_scaler.scale", "must be a number");
  }
  in.integer(ls, "good", "loss_scaler.good", 0, INT64_MAX);
  in.integer(ls, "skipped", "loss_scaler.skipped", 0, INT64_MAX);
  in.integer(ls, "hysteresis_left", "loss_scaler.hysteresis_left", 0, 1 << 20);
}

// One entry per rank of the layout, each rank and each (dp, tp, pp) coordinate once.
void check_shards(const ManifestReader& in, const nlohmann::json& m, const ManifestLayout& l) {
  const auto& shards = in.member(m, "shards", "shards");
  if (!shards.is_array()) in.fail("shards", "must be a list");
  if (static_cast<int64_t>(shards.size()) != l.world) {
    in.fail("shards",
            fmt::format("has {} entries, the layout's world is {}", shards.size(), l.world));
  }
  std::vector<bool> rank_seen(static_cast<size_t>(l.world), false);
  std::set<std::tuple<int64_t, int64_t, int64_t>> coords;
  for (size_t i = 0; i < shards.size(); ++i) {
    const auto& e = shards[i];
    const std::string at = fmt::format("shards[{}]", i);
    if (!e.is_object()) in.fail(at, "must be an object");
    const int64_t r = in.integer(e, "rank", at + ".rank", 0, l.world - 1);
    if (rank_seen[static_cast<size_t>(r)]) {
      in.fail(at + ".rank", fmt::format("{} is listed twice", r));
    }
    rank_seen[static_cast<size_t>(r)] = true;
    in.text(e, "file", at + ".file");
    in.integer(e, "bytes", at + ".bytes", 0, INT64_MAX);
    in.text(e, "xxh64", at + ".xxh64");
    const int64_t d = in.integer(e, "dp_rank", at + ".dp_rank", 0, l.dp - 1);
    const int64_t t = in.integer(e, "tp_rank", at + ".tp_rank", 0, l.tp - 1);
    const int64_t p = in.integer(e, "pp_rank", at + ".pp_rank", 0, l.pp - 1);
    if (!coords.insert({d, t, p}).second) {
      in.fail(at,
              fmt::format("repeats the coordinates dp {} tp {} pp {} of another shard", d, t, p));
    }
    const auto& data = in.object(e, "data", at + ".data");
    in.integer(data, "epoch", at + ".data.epoch", 0, kBig);
    in.integer(data, "position", at + ".data.position", 0, INT64_MAX);
  }
}

// Optional (written since checkpoints became named state dicts): each key once, a string of at
// most 1024 bytes, with a shape of 1 to 8 sizes.
void check_state_dict(const ManifestReader& in, const nlohmann::json& m) {
  if (!m.contains("state_dict")) return;
  const auto& keys = m["state_dict"];
  if (!keys.is_array()) in.fail("state_dict", "must be a list");
  std::set<std::string> seen;
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string at = fmt::format("state_dict[{}]", i);
    if (!keys[i].is_object()) in.fail(at, "must be an object");
    const std::string name = in.text(keys[i], "name", at + ".name");
    if (name.empty() || name.size() > 1024) {
      in.fail(at + ".name", fmt::format("has {} bytes, allowed 1 to 1024", name.size()));
    }
    if (!seen.insert(name).second) in.fail(at + ".name", fmt::format("'{}' is listed twice", name));
    const auto& shape = in.member(keys[i], "shape", at + ".shape");
    if (!shape.is_array() || shape.empty() || shape.size() > 8) {
      in.fail(at + ".shape", "must be a list of 1 to 8 sizes");
    }
    for (size_t d = 0; d < shape.size(); ++d) {
      const auto& v = shape[d];
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kBig) {
        in.fail(fmt::format("{}.shape[{}]", at, d),
                fmt::format("is {}, allowed an integer 0 to {}", v.dump(), kBig));
      }
    }
  }
}

}  // namespace

void check_manifest(const std::string& dir, const nlohmann::json& m) {
  const ManifestReader in((fs::path(dir) / "manifest.json").string());
  if (!m.is_object()) in.fail("the manifest", "must be a JSON object");
  const int64_t version = in.integer(m, "format_version", "format_version", 0, kBig);
  if (version != kCheckpointFormatVersion) {
    raise<CheckpointError>(
        "checkpoint {} has format version {}, this build reads version {} (it was written by "
        "another release of the trainer; load it with that release or convert it)",
        dir, version, kCheckpointFormatVersion);
  }
  in.integer(m, "step", "step", 0, kBig);
  check_model(in, m);
  const ManifestLayout layout = check_layout(in, m);
  in.text(m, "precision", "precision");
  check_loss_scaler(in, m);
  check_shards(in, m, layout);
  check_state_dict(in, m);
}

void check_shard_identity(const std::string& dir, const nlohmann::json& entry,
                          const nlohmann::json& header, const ShardIdentity& want) {
  const std::string file = entry.at("file").get<std::string>();
  auto get = [&](const char* k) -> int64_t {
    if (!header.contains(k) || !header[k].is_number_integer()) {
      raise<CheckpointError>("checkpoint {}: shard {} has no '{}' in its header", dir, file, k);
    }
    return header[k].get<int64_t>();
  };
  const int64_t r = get("rank"), d = get("dp_rank"), t = get("tp_rank"), p = get("pp_rank");
  // ZeRO stage and slice are in shards written since they were added; older ones lack them.
  const int64_t z = header.contains("zero") ? get("zero") : want.zero;
  const int64_t off = header.contains("offset") && want.offset >= 0 ? get("offset") : want.offset;
  const int64_t part = header.contains("part") && want.part >= 0 ? get("part") : want.part;
  if (r != want.rank || d != want.dp_rank || t != want.tp_rank || p != want.pp_rank ||
      z != want.zero || off != want.offset || part != want.part) {
    raise<CheckpointError>(
        "checkpoint {}: shard {} holds the state of rank {} (dp {} tp {} pp {}, ZeRO {}{}) but is "
        "loaded as rank {} (dp {} tp {} pp {}, ZeRO {}{}): shards were swapped or relabelled",
        dir, file, r, d, t, p, z, off >= 0 ? fmt::format(", elements {}+{}", off, part) : "",
        want.rank, want.dp_rank, want.tp_rank, want.pp_rank, want.zero,
        want.offset >= 0 ? fmt::format(", elements {}+{}", want.offset, want.part) : "");
  }
}

}  // namespace fl::train
