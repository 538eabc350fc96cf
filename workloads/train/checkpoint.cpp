// Checkpoint files (checkpoint.hpp has the format): written atomically and read back, shards
// encoded, decoded and verified against the manifest, manifests read and checked against the
// model and the job's torch, and a model shard reassembled from a checkpoint of any DP size (what
// fl-ckpt reshards). The trainer's save and load are in checkpoint_trainer.cpp.
#include "workloads/train/checkpoint.hpp"

#include "kernels/ops.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/file_read.hpp"
#include "base/json_bounded.hpp"
#include "base/settings.hpp"
#include "base/utf8.hpp"
#include "base/version.hpp"
#include "injector/site.hpp"
#include "kernels/versions.hpp"

namespace fl::train {

namespace fs = std::filesystem;

// A manifest or a shard's header: JSON another process may have written, held to a depth and a
// size limit (base/json_bounded.hpp); a real one is a few KiB per rank.
constexpr size_t kMaxManifestBytes = size_t{64} << 20;

FAULTLINE_SETTING(kWrittenFormat, int64_t, "FAULTLINE_CHECKPOINT_FORMAT", kCheckpointFormatVersion,
                  "Format version stamped on written checkpoints (another release's format)");

int written_format_version() {
  return static_cast<int>(kWrittenFormat.get());
}

namespace {

// torch.save's archive (caffe2/serialize/inline_container.cc), by the job's
// workload.versions.torch: torch 1.6 and later write the zip format, file version 3; earlier
// releases write the legacy format (no version) and read a zip archive only up to version 2, so a
// newer writer's checkpoint stops an older reader before anything is read. Nothing is checked
// when the scenario states no torch.
bool torch_writes_zip(const std::string& torch) {
  const auto v = parse_version(torch);
  return v && (v->major > 1 || (v->major == 1 && v->minor >= 6));
}

}  // namespace

int torch_file_version_written() {
  const std::string torch = ops::job_versions().torch;
  return !torch.empty() && torch_writes_zip(torch) ? 3 : 0;
}

void check_torch_file_version(const std::string& dir, const nlohmann::json& m) {
  const std::string torch = ops::job_versions().torch;
  const auto it = m.find("torch_file_version");
  if (torch.empty() || torch_writes_zip(torch) || it == m.end() || !it->is_number_integer()) return;
  constexpr int64_t kMaxSupported = 2;
  const int64_t version = it->get<int64_t>();
  if (version <= kMaxSupported) return;
  raise<CheckpointError>(
      "checkpoint {}: version_ <= kMaxSupportedFileFormatVersion INTERNAL ASSERT FAILED at "
      "caffe2/serialize/inline_container.cc:132, please report a bug to PyTorch. Attempted to "
      "read a PyTorch file with version {}, but the maximum supported version for reading is {}. "
      "Your PyTorch installation may be too old. (torch {})",
      dir, version, kMaxSupported, torch);
}

void check_compatible(const std::string& dir, const nlohmann::json& m,
                      const model::GptConfig& cfg) {
  const int version = m.value("format_version", -1);
  if (version != kCheckpointFormatVersion) {
    raise<CheckpointError>(
        "checkpoint {} has format version {}, this build reads version {} (it was written by "
        "another release of the trainer; load it with that release or convert it)",
        dir, version, kCheckpointFormatVersion);
  }
  const auto& ml = m.at("model");
  const int V = ml.at("vocab").get<int>(), C = ml.at("d_model").get<int>(),
            L = ml.at("layers").get<int>(), H = ml.at("heads").get<int>(),
            T = ml.at("seq_len").get<int>();
  std::string tensor;
  if (C != cfg.d_model) {
    tensor = fmt::format("wte: [{} x {}] in the checkpoint, [{} x {}] in this model", V, C,
                         cfg.vocab, cfg.d_model);
  } else if (V != cfg.vocab) {
    tensor = fmt::format("wte: [{} x {}] in the checkpoint, [{} x {}] in this model", V, C,
                         cfg.vocab, cfg.d_model);
  } else if (T != cfg.seq_len) {
    tensor = fmt::format("wpe: [{} x {}] in the checkpoint, [{} x {}] in this model", T, C,
                         cfg.seq_len, cfg.d_model);
  } else if (L != cfg.layers) {
    tensor = fmt::format("h.{}: the checkpoint has {} layers, this model {}",
                         std::min(L, cfg.layers), L, cfg.layers);
  } else if (H != cfg.heads) {
    tensor = fmt::format("h.0.attn.qkv: {} heads of {} in the checkpoint, {} heads of {} here", H,
                         C / H, cfg.heads, cfg.d_model / cfg.heads);
  }
  if (!tensor.empty()) {
    raise<CheckpointError>(
        "checkpoint {} does not fit this model: size mismatch for {} (checkpoint model: vocab "
        "{}, d_model {}, layers {}, heads {}, seq_len {})",
        dir, tensor, V, C, L, H, T);
  }
  const model::Structure s = structure_from_manifest(m);
  if (!(s == cfg.structure)) {
    raise<CheckpointError>(
        "checkpoint {} does not fit this model: its structure is tie_embeddings {}, "
        "vocab_parallel {}, make_vocab_size_divisible_by {}, padded_vocab {}; this model's is {}, "
        "{}, {}, {} (its shards hold another set of tensors)",
        dir, s.tie_embeddings, s.vocab_parallel, s.divisible_by, s.padded_vocab,
        cfg.structure.tie_embeddings, cfg.structure.vocab_parallel, cfg.structure.divisible_by,
        cfg.structure.padded_vocab);
  }
}

namespace {
constexpr char kShardMagic[8] = {'F', 'L', 'S', 'H', 'A', 'R', 'D', '1'};

void fsync_path(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}
}  // namespace

uint64_t checksum(const std::string& bytes) {
  return XXH64(bytes.data(), bytes.size(), 0);
}

std::string checksum_hex(const std::string& bytes) {
  return fmt::format("{:016x}", checksum(bytes));
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  auto v = FAULTLINE_FAULT_POINT(
      "checkpoint.write",
      (fault::SiteContext{-1, "", "checkpoint.write", -1, const_cast<char*>(bytes.data()),
                          bytes.size(), DType::kU8, -1}));
  if (v == fault::Verdict::kSkip) return;
  // truncate(n): the file ends n bytes early, as after a writer that died or was cut off.
  const size_t len = v == fault::Verdict::kAlter
                         ? std::min(bytes.size(), fault::altered_context().count)
                         : bytes.size();
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    raise<CheckpointError>("cannot write checkpoint file {}: {}", tmp, std::strerror(errno));
  }
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::write(fd, bytes.data() + done, len - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      raise<CheckpointError>("cannot write checkpoint file {} ({} of {} bytes written): {}", tmp,
                             done, len, std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    raise<CheckpointError>("cannot flush checkpoint file {}: {}", tmp, std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    raise<CheckpointError>("cannot rename {} to {}: {}", tmp, path, std::strerror(err));
  }
  fsync_path(fs::path(path).parent_path().string(), O_RDONLY | O_DIRECTORY);
}

std::string read_file(const std::string& path) {
  FAULTLINE_FAULT_POINT("checkpoint.read", (fault::SiteContext{-1, "", "checkpoint.read", -1,
                                                               nullptr, 0, DType::kU8, -1}));
  // Not waited on when a FIFO stands in its place (fl-ckpt hung in open(), issue 32).
  std::string why;
  const FileFd f = open_regular_file(path, &why);
  if (!f) raise<CheckpointError>("cannot read {}: {}", path, why);
  std::string out;
  char chunk[1 << 16];
  for (;;) {
    const ssize_t got = ::read(f.get(), chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) raise<CheckpointError>("cannot read {}: {}", path, std::strerror(errno));
    if (got == 0) return out;
    out.append(chunk, static_cast<size_t>(got));
  }
}

std::string resolve_checkpoint(const std::string& path) {
  if (fs::exists(fs::path(path) / "manifest.json")) return path;
  if (fs::exists(fs::path(path) / "latest")) {
    std::string name = read_file((fs::path(path) / "latest").string());
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    return inside_save_dir(path, name, "its 'latest' file");
  }
  raise<CheckpointError>("no checkpoint at {}: it has neither manifest.json nor a latest file",
                         path);
}

std::string auto_resume_target(const std::string& dir, bool scan, std::string& note) {
  if (fs::exists(fs::path(dir) / "latest")) {
    const std::string target = resolve_checkpoint(dir);
    note = fmt::format("auto-resume: resuming from {}", target);
    return target;
  }
  int64_t newest = -1;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step_", 0) != 0 || !fs::exists(e.path() / "manifest.json")) continue;
    try {
      newest = std::max<int64_t>(newest, std::stoll(n.substr(5)));
    } catch (const std::exception&) {
    }
  }
  if (newest < 0) {
    note = fmt::format("auto-resume: no checkpoint in {} yet: starting from step 0", dir);
    return "";
  }
  const std::string found =
      inside_save_dir(dir, fmt::format("step_{}", newest), fmt::format("step_{}", newest));
  if (scan) {
    note = fmt::format(
        "auto-resume: no 'latest' file in {}; resuming from the newest complete "
        "checkpoint {}",
        dir, found);
    return found;
  }
  note = fmt::format(
      "auto-resume: no 'latest' file in {} although it holds step_{}: nothing resumed, "
      "training starts again from step 0",
      dir, newest);
  return "";
}

nlohmann::json read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / "manifest.json").string();
  if (!fs::exists(path)) {
    raise<CheckpointError>("checkpoint {} has no manifest.json (incomplete or interrupted save)",
                           dir);
  }
  nlohmann::json m;
  try {
    m = parse_json_bounded(read_file(path), JsonLimits{64, kMaxManifestBytes});
  } catch (const JsonRefused& e) {
    raise<CheckpointError>("checkpoint manifest {} is not valid JSON: {}", path,
                           valid_utf8(e.what()));
  }
  check_manifest(dir, m);
  return m;
}

std::string encode_shard(const nlohmann::json& header, const std::vector<ShardSection>& sections) {
  nlohmann::json h = header;
  h["sections"] = nlohmann::json::array();
  for (auto& s : sections) h["sections"].push_back({{"name", s.name}, {"count", s.count}});
  const std::string hs = h.dump();
  std::string out(kShardMagic, sizeof(kShardMagic));
  uint64_t len = hs.size();
  out.append(reinterpret_cast<const char*>(&len), sizeof(len));
  out += hs;
  for (auto& s : sections) {
    out.append(reinterpret_cast<const char*>(s.data), s.count * sizeof(float));
  }
  return out;
}

nlohmann::json decode_shard(const std::string& bytes, const std::string& path,
                            std::vector<std::pair<std::string, std::vector<float>>>& sections) {
  if (bytes.size() < 16 || std::memcmp(bytes.data(), kShardMagic, 8) != 0) {
    raise<CheckpointError>("{} is not a faultline checkpoint shard (bad magic)", path);
  }
  uint64_t len = 0;
  std::memcpy(&len, bytes.data() + 8, 8);
  if (16 + len > bytes.size()) raise<CheckpointError>("{}: truncated header", path);
  nlohmann::json h;
  try {
    h = parse_json_bounded(std::string_view(bytes).substr(16, len),
                           JsonLimits{64, kMaxManifestBytes});
  } catch (const JsonRefused& e) {
    raise<CheckpointError>("{}: corrupt header: {}", path, e.what());
  }
  size_t off = 16 + len;
  for (auto& s : h.at("sections")) {
    const size_t count = s.at("count");
    if (off + count * sizeof(float) > bytes.size()) {
      raise<CheckpointError>("{}: section '{}' is truncated ({} bytes left, {} needed)", path,
                             s.at("name").get<std::string>(), bytes.size() - off,
                             count * sizeof(float));
    }
    std::vector<float> v(count);
    std::memcpy(v.data(), bytes.data() + off, count * sizeof(float));
    off += count * sizeof(float);
    sections.emplace_back(s.at("name"), std::move(v));
  }
  return h;
}

std::string read_verified_shard(const std::string& dir, const nlohmann::json& entry) {
  const std::string name = entry.at("file").get<std::string>();
  const int rank = entry.at("rank").get<int>();
  const std::string file = inside_save_dir(dir, name, fmt::format("the shard of rank {}", rank));
  if (!fs::exists(file)) {
    raise<CheckpointError>("checkpoint {}: shard {} for rank {} is missing", dir, name, rank);
  }
  std::string bytes = read_file(file);
  const std::string got = checksum_hex(bytes), want = entry.at("xxh64");
  if (bytes.size() != entry.at("bytes").get<size_t>() || got != want) {
    raise<CheckpointError>(
        "checkpoint {}: shard {} of rank {} is corrupt: {} bytes with xxh64 {}, "
        "the manifest says {} bytes with xxh64 {}",
        dir, name, rank, bytes.size(), got, entry.at("bytes").get<size_t>(), want);
  }
  return bytes;
}

bool params_partitioned(const nlohmann::json& manifest) {
  const int zero = manifest.at("layout").at("zero");
  return zero == 3 || (zero >= 1 && manifest.value("precision", std::string("fp32")) != "fp32");
}

ModelShardState reassemble_model_shard(const std::string& dir, const nlohmann::json& manifest,
                                       int tp_rank, int pp_rank, size_t total,
                                       const ShardReader& read) {
  const auto& l = manifest.at("layout");
  const int dp = l.at("dp"), zero = l.at("zero");
  std::vector<std::vector<std::pair<std::string, std::vector<float>>>> replicas(
      static_cast<size_t>(dp));
  int found = 0;
  std::vector<bool> have(static_cast<size_t>(dp), false);
  for (auto& e : manifest.at("shards")) {
    if (e.at("tp_rank") != tp_rank || e.at("pp_rank") != pp_rank) continue;
    const int d = e.at("dp_rank").get<int>();
    if (d < 0 || d >= dp || have[static_cast<size_t>(d)]) {
      raise<CheckpointError>(
          "checkpoint {}: shard {} of rank {} claims dp_rank {} of tp {} pp {}, but the layout "
          "has dp ranks 0-{}{}",
          dir, e.at("file").get<std::string>(), e.at("rank").get<int>(), d, tp_rank, pp_rank,
          dp - 1, d >= 0 && d < dp ? " and another shard claims it too" : "");
    }
    have[static_cast<size_t>(d)] = true;
    const std::string bytes = read ? read(e) : read_verified_shard(dir, e);
    const auto header =
        decode_shard(bytes, e.at("file").get<std::string>(), replicas[static_cast<size_t>(d)]);
    check_shard_identity(dir, e, header, {e.at("rank").get<int>(), d, tp_rank, pp_rank, zero});
    ++found;
  }
  if (found != dp) {
    raise<CheckpointError>("checkpoint {}: found {} of {} data-parallel shards of tp {} pp {}", dir,
                           found, dp, tp_rank, pp_rank);
  }
  auto section = [&](size_t replica, const char* name) -> const std::vector<float>& {
    for (auto& [n, v] : replicas[replica]) {
      if (n == name) return v;
    }
    raise<CheckpointError>("checkpoint {}: a shard has no '{}' section", dir, name);
  };
  auto assemble = [&](const char* name, bool partitioned) {
    std::vector<float> out;
    for (size_t r = 0; r < (partitioned ? replicas.size() : 1); ++r) {
      auto& v = section(r, name);
      out.insert(out.end(), v.begin(), v.end());
    }
    if (out.size() < total) {
      raise<CheckpointError>(
          "checkpoint {}: '{}' of tp {} pp {} has {} elements, the model shard "
          "needs {}",
          dir, name, tp_rank, pp_rank, out.size(), total);
    }
    out.resize(total);
    return out;
  };
  return {assemble("params", params_partitioned(manifest)), assemble("exp_avg", zero > 0),
          assemble("exp_avg_sq", zero > 0)};
}

}  // namespace fl::train
