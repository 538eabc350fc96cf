// Model files (docs/workloads.md#model-files): a state dict keyed by name in safetensors' layout
// (8-byte little-endian header size, a JSON header {name: {dtype, shape, data_offsets}}, the
// data), written by rank 0 beside an engine checkpoint. It is not the engine's checkpoint: no
// optimizer state, no loss scaler, no data position; a fresh run loads it by name.
//  - "state_dict": rank 0 writes model.state_dict() as its module holds it. Under ZeRO-3 every
//    parameter is a size-0 placeholder outside a gather, so the file holds torch.Size([0])
//    tensors and a later load_state_dict fails with PyTorch's size mismatch (DeepSpeed#2413).
//  - "gathered_16bit": DeepSpeed's save_16bit_model with stage3_gather_16bit_weights_on_model_save
//    (_zero3_consolidated_16bit_state_dict): every rank takes part in the gather, one module at
//    a time into the device's memory, and rank 0 writes the full weights in the module's dtype.
//    workload.checkpoint.gathered_release next_use keeps each gathered module on the device until
//    its next use (modifier_rank=None before DeepSpeed PR 1223: the save's peak is the whole
//    model).
// A load with a sharding spec reads the file on the group's rank 0 only and broadcasts each
// tensor in its shards; the other ranks size each shard from their own model and spec, so ranks
// given different specs call collectives of different sizes.
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "base/dtype.hpp"
#include "workloads/comm/communicator.hpp"
#include "workloads/parallel/zero_gathered.hpp"
#include "workloads/train/checkpoint.hpp"
#include "workloads/train/trainer.hpp"

namespace fl::train {

namespace {

namespace fs = std::filesystem;

constexpr const char* kSaveOption = "workload.checkpoint.model_file (--save-model-file)";
constexpr const char* kLoadOption = "workload.checkpoint.load_model_file (--load-model-file)";
constexpr const char* kReleaseOption = "workload.checkpoint.gathered_release (--gathered-release)";
constexpr const char* kSpecOption = "workload.checkpoint.load_shard_spec (--load-shard-spec)";

struct Tensor1 {
  std::vector<int64_t> shape;
  std::vector<float> values;
};
using StateDict = std::vector<std::pair<std::string, Tensor1>>;

// Host bytes reserved for what a load holds, released together when it goes.
class HostCharges {
 public:
  explicit HostCharges(MemoryAccountant& acct) : acct_(acct) {}
  HostCharges(const HostCharges&) = delete;
  HostCharges& operator=(const HostCharges&) = delete;
  ~HostCharges() { acct_.release(bytes_); }
  // Throws OutOfMemoryError naming `what` when the host budget would be exceeded.
  void take(size_t bytes, std::string_view what) {
    acct_.reserve(bytes, what);
    bytes_ += bytes;
  }

 private:
  MemoryAccountant& acct_;
  size_t bytes_ = 0;
};

size_t numel(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (auto d : shape) n *= static_cast<size_t>(d);
  return n;
}

const char* st_dtype(DType d) {
  return d == DType::kBF16 ? "BF16" : d == DType::kF16 ? "F16" : "F32";
}

void put(std::string& out, float v, const std::string& dtype) {
  if (dtype == "F32") {
    out.append(reinterpret_cast<const char*>(&v), 4);
    return;
  }
  const uint16_t h = dtype == "BF16" ? float_to_bf16(v) : float_to_half(v);
  out.append(reinterpret_cast<const char*>(&h), 2);
}

float get(const char* p, const std::string& dtype) {
  if (dtype == "F32") {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return dtype == "BF16" ? bf16_to_float(h) : half_to_float(h);
}

std::string encode(const StateDict& sd, const std::string& dtype, const nlohmann::json& meta) {
  nlohmann::ordered_json header;
  header["__metadata__"] = meta;
  std::string data;
  for (auto& [name, t] : sd) {
    const size_t lo = data.size();
    for (float v : t.values) put(data, v, dtype);
    header[name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {lo, data.size()}}};
  }
  const std::string h = header.dump();
  const uint64_t n = h.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + h + data;
}

StateDict decode(const std::string& path) {
  const std::string bytes = read_file(path);
  uint64_t n = 0;
  if (bytes.size() >= 8) std::memcpy(&n, bytes.data(), 8);
  if (bytes.size() < 8 || n > bytes.size() - 8) {
    raise<CheckpointError>("model file {}: not a safetensors file (header size {} of {} bytes)",
                           path, n, bytes.size());
  }
  StateDict out;
  try {
    const auto header = nlohmann::ordered_json::parse(bytes.substr(8, n));
    const size_t base = 8 + n;
    for (auto& [name, e] : header.items()) {
      if (name == "__metadata__") continue;
      const std::string dtype = e.at("dtype");
      const size_t width = dtype == "F32" ? 4 : 2, lo = e.at("data_offsets")[0],
                   hi = e.at("data_offsets")[1];
      Tensor1 t{e.at("shape").get<std::vector<int64_t>>(), {}};
      if (hi < lo || base + hi > bytes.size() || (hi - lo) != numel(t.shape) * width) {
        raise<CheckpointError>("model file {}: tensor {} has data_offsets [{}, {}] for {}", path,
                               name, lo, hi, model::torch_size(t.shape));
      }
      for (size_t i = base + lo; i < base + hi; i += width)
        t.values.push_back(get(&bytes[i], dtype));
      out.emplace_back(name, std::move(t));
    }
  } catch (const nlohmann::json::exception& e) {
    raise<CheckpointError>("model file {}: malformed header: {}", path, e.what());
  }
  return out;
}

std::vector<model::TensorKey> keys_of(const StateDict& sd) {
  std::vector<model::TensorKey> out;
  for (auto& [name, t] : sd) out.push_back({name, t.shape});
  return out;
}

// Where each state-dict key's values sit in the full parameter vector (tp 1, pp 1); an alias
// reads its original's.
std::map<std::string, const model::ParamSpec*> specs_by_key(const model::ParamLayout& layout,
                                                            const model::GptConfig& cfg) {
  std::map<std::string, const model::ParamSpec*> out;
  for (auto& s : layout.specs()) out[model::state_dict_key(s.name)] = &s;
  for (auto& [alias, original] : model::tied_aliases(cfg)) {
    if (!out.count(alias) && out.count(original)) out[alias] = out.at(original);
  }
  return out;
}

struct Spec {
  std::string group;
  int dim = 0, parts = 1;
};

Spec parse_one(const std::string& text, const std::string& whole) {
  Spec s;
  const auto a = text.find(':'), b = text.find(':', a == std::string::npos ? a : a + 1);
  try {
    if (a == std::string::npos || b == std::string::npos) throw std::invalid_argument("form");
    s.group = text.substr(0, a);
    size_t used = 0;
    s.dim = std::stoi(text.substr(a + 1, b - a - 1), &used);
    if (used != b - a - 1) throw std::invalid_argument("dim");
    s.parts = std::stoi(text.substr(b + 1), &used);
    if (used != text.size() - b - 1) throw std::invalid_argument("parts");
  } catch (const std::exception&) {
    s.group.clear();
  }
  if ((s.group != "world" && s.group != "dp") || s.dim < 0 || s.dim > 1 || s.parts < 1) {
    raise<ConfigError>(
        "{} is '{}' (allowed: empty, or GROUP:DIM:PARTS with GROUP world|dp, DIM 0|1 and PARTS "
        ">= 1, optionally followed by ,rN=GROUP:DIM:PARTS for world rank N)",
        kSpecOption, whole);
  }
  return s;
}

// This rank's spec: the default, or its own entry "rN=...".
Spec spec_for(const std::string& text, int rank) {
  std::vector<std::string> items;
  for (size_t at = 0; at <= text.size();) {
    const size_t comma = std::min(text.find(',', at), text.size());
    items.push_back(text.substr(at, comma - at));
    at = comma + 1;
  }
  Spec mine = parse_one(items.front(), text);
  for (size_t i = 1; i < items.size(); ++i) {
    const auto eq = items[i].find('=');
    int r = -1;
    if (items[i].size() > 1 && items[i][0] == 'r' && eq != std::string::npos) {
      try {
        r = std::stoi(items[i].substr(1, eq - 1));
      } catch (const std::exception&) {
      }
    }
    if (r < 0) parse_one("", text);  // names the option and what is allowed
    const Spec s = parse_one(items[i].substr(eq + 1), text);
    if (r == rank) mine = s;
  }
  return mine;
}

// Index in the full tensor of element k of shard p of `parts` along `dim` (shape [rows, cols] or
// 1-D, which has only dim 0).
size_t full_index(const std::vector<int64_t>& shape, int dim, int parts, int p, size_t k) {
  // Along dim 0 (or of a 1-D tensor) a shard is a contiguous run; along dim 1 it is a column
  // block of every row.
  if (shape.size() == 1 || dim == 0) return static_cast<size_t>(p) * numel(shape) / parts + k;
  const int64_t cols = shape[1], w = cols / parts, r = static_cast<int64_t>(k) / w,
                c = static_cast<int64_t>(k) % w;
  return static_cast<size_t>(r * cols + p * w + c);
}

}  // namespace

void Trainer::check_model_file_options() const {
  const bool one = topo_.layout.tp == 1 && topo_.layout.pp == 1;
  if (cfg_.model_file != "none" && !one) {
    raise<ConfigError>(
        "{} is {} but writes one file from rank 0 of a data-parallel job (allowed: "
        "none with tp {} and pp {})",
        kSaveOption, cfg_.model_file, topo_.layout.tp, topo_.layout.pp);
  }
  if (cfg_.gathered_release != "on_exit" &&
      (cfg_.model_file != "gathered_16bit" || topo_.layout.zero != 3)) {
    raise<ConfigError>(
        "{} is {} but this run saves {} at ZeRO stage {} (allowed: next_use only with "
        "gathered_16bit at stage 3, the save that gathers module by module)",
        kReleaseOption, cfg_.gathered_release, cfg_.model_file, topo_.layout.zero);
  }
  if (cfg_.load_model_file.empty()) {
    if (!cfg_.load_shard_spec.empty()) {
      raise<ConfigError>("{} is '{}' but {} is empty (allowed: a spec only with a model file)",
                         kSpecOption, cfg_.load_shard_spec, kLoadOption);
    }
    return;
  }
  if (!one || !cfg_.resume.empty()) {
    raise<ConfigError>(
        "{} loads the weights of a fresh data-parallel run (allowed: tp 1, pp 1 "
        "and no resume; this run: tp {}, pp {}{})",
        kLoadOption, topo_.layout.tp, topo_.layout.pp,
        cfg_.resume.empty() ? "" : ", resume " + cfg_.resume);
  }
  if (cfg_.load_shard_spec.empty()) return;
  const Spec s = spec_for(cfg_.load_shard_spec, topo_.rank);
  // Each rank checks the spec against its own model: a shard of a tensor must be whole rows or
  // columns.
  for (auto& k : model::gpt_state_dict(cfg_.model, 1)) {
    const size_t d = k.shape.size() == 1 ? 0 : static_cast<size_t>(s.dim);
    if (k.shape[d] % s.parts != 0) {
      raise<ConfigError>(
          "{} is '{}': {} parts do not divide dim {} of {} ({}) (allowed: PARTS "
          "dividing every tensor's DIM)",
          kSpecOption, cfg_.load_shard_spec, s.parts, d, k.name, model::torch_size(k.shape));
    }
  }
}

void Trainer::save_model_file(const std::string& step_dir) {
  const int stage = topo_.layout.zero;
  const bool gathered = cfg_.model_file == "gathered_16bit";
  const auto keys =
      parallel::module_state_dict(model::gpt_state_dict(cfg_.model, 1), stage, gathered);
  // The gather is a collective at ZeRO-3: every rank takes part, rank 0 keeps the result, one
  // module (group) at a time on the device. A plain model.state_dict() gathers nothing: the
  // module's placeholders are what it has.
  std::vector<float> full;
  if (gathered && stage == 3) {
    full = zero_->consolidate_by_group(cfg_.gathered_release == "on_exit");
  } else if (gathered || stage < 3) {
    full = zero_->full_parameters();
  }
  if (topo_.rank != 0) return;
  const auto where = specs_by_key(layout_, cfg_.model);
  StateDict sd;
  for (auto& k : keys) {
    Tensor1 t{k.shape, {}};
    const model::ParamSpec& s = *where.at(k.name);
    if (numel(k.shape) == s.numel()) {
      t.values.assign(full.begin() + static_cast<std::ptrdiff_t>(s.offset),
                      full.begin() + static_cast<std::ptrdiff_t>(s.offset + s.numel()));
    }
    // A wrapper's state_dict() (torch.compile's `_orig_mod.`, DDP's `module.`) prefixes every key.
    sd.emplace_back(cfg_.save_key_prefix + k.name, std::move(t));
  }
  const std::string dtype = gathered ? st_dtype(cfg_.precision) : st_dtype(DType::kF32);
  const nlohmann::json meta = {{"format", "pt"},
                               {"faultline", "model file (not an engine checkpoint)"},
                               {"saved_as", cfg_.model_file},
                               {"step", std::to_string(step_)}};
  write_file_atomic((fs::path(step_dir) / "model.safetensors").string(), encode(sd, dtype, meta));
}

void Trainer::load_model_file() {
  const std::string& path = cfg_.load_model_file;
  const auto model_keys = model::gpt_state_dict(cfg_.model, 1);
  const bool spec = !cfg_.load_shard_spec.empty();
  const Spec s = spec ? spec_for(cfg_.load_shard_spec, topo_.rank) : Spec{};
  comm::Communicator* group = s.group == "dp" ? topo_.dp.get() : topo_.world;
  const bool reads = !spec || group->rank() == 0;
  // What the load holds in host memory, charged to the host accountant as it is asked for and
  // released when the load ends (FAULTLINE_HOST_MEMORY_BUDGET_BYTES): a module built without
  // zero.Init (below stage 3, or stage 3 with workload.zero.init false) holds all of its fp32
  // weights on every rank before the engine partitions them, as a from_pretrained that does not
  // see the DeepSpeed config builds the whole model on the host (Roblox/FAI-RL#66); a rank that
  // reads the file holds all of its bytes, the state dict torch.load or safetensors returns.
  HostCharges held(MemoryAccountant::host());
  if (!(topo_.layout.zero == 3 && cfg_.zero_init)) {
    held.take(layout_.total() * sizeof(float), "load.whole_module");
  }
  StateDict sd;
  if (reads) {
    // A file that cannot be sized is left to decode, which names it (CheckpointError).
    std::error_code ec;
    const auto file_bytes = fs::file_size(path, ec);
    if (!ec) held.take(static_cast<size_t>(file_bytes), "load.model_file");
    sd = decode(path);
    // consume_prefix_in_state_dict_if_present: the keys that carry the prefix lose it.
    const std::string& strip = cfg_.strip_key_prefix;
    for (auto& entry : sd) {
      if (!strip.empty() && entry.first.rfind(strip, 0) == 0) entry.first.erase(0, strip.size());
    }
    // Built whole (no zero.Init) or inside a gather: the full shapes. Placeholders in the file
    // fail here with PyTorch's size mismatch. load_into module: model.load_state_dict on the
    // module as it is after deepspeed.initialize, whose ZeRO-3 parameters are size-0
    // placeholders, so every key of a full file fails there instead.
    const bool module = cfg_.load_into == "module";
    model::load_state_dict(
        module ? parallel::module_state_dict(model_keys, topo_.layout.zero, false) : model_keys,
        keys_of(sd), cfg_.load_strict);
  }
  std::map<std::string, const Tensor1*> by_name;
  for (auto& [name, t] : sd) by_name[name] = &t;
  std::vector<float> full(layout_.total(), 0.0f);
  const auto where = specs_by_key(layout_, cfg_.model);
  for (auto& k : model::without_aliases(model_keys, cfg_.model)) {
    const model::ParamSpec& at = *where.at(k.name);
    float* out = full.data() + at.offset;
    const Tensor1* t = reads && by_name.count(k.name) ? by_name.at(k.name) : nullptr;
    if (!spec) {
      if (t) std::copy(t->values.begin(), t->values.end(), out);
      continue;
    }
    // The group's rank 0 sizes each shard from the file's tensor, the others from their model.
    const auto& shape = t ? t->shape : k.shape;
    const size_t n = numel(shape) / static_cast<size_t>(s.parts);
    HostCharges buffer(MemoryAccountant::host());
    buffer.take(n * sizeof(float), "load.broadcast_shard");
    std::vector<float> shard(n);
    for (int p = 0; p < s.parts; ++p) {
      for (size_t i = 0; t && i < n; ++i)
        shard[i] = t->values[full_index(shape, s.dim, s.parts, p, i)];
      group->broadcast(comm::host_buffer(shard.data(), n, DType::kF32), 0);
      for (size_t i = 0; i < n; ++i) out[full_index(k.shape, s.dim, s.parts, p, i)] = shard[i];
    }
  }
  // Every rank holds the same full weights: the engine keeps its partition of them.
  zero_->set_full_parameters(full, -1);
  if (topo_.rank == 0) std::printf("# loaded model file %s\n", path.c_str());
}

}  // namespace fl::train
