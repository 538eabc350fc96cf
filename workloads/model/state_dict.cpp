#include "workloads/model/state_dict.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"

namespace fl::model {

namespace {

// The module tree the keys imply: each module's child modules and its own parameters, and
// the modules in the order a module walk (pre-order, registration order) visits them.
struct ModuleTree {
  std::map<std::string, std::set<std::string>> children, params;
  std::vector<std::string> order;

  explicit ModuleTree(const std::vector<TensorKey>& keys) {
    visit("");
    for (auto& k : keys) {
      std::string module;
      size_t start = 0;
      for (size_t dot = k.name.find('.'); dot != std::string::npos;
           start = dot + 1, dot = k.name.find('.', start)) {
        const std::string child = k.name.substr(start, dot - start);
        children[module].insert(child);
        module = module.empty() ? child : module + "." + child;
        visit(module);
      }
      params[module].insert(k.name.substr(start));
    }
  }
  void visit(const std::string& m) {
    if (std::find(order.begin(), order.end(), m) == order.end()) order.push_back(m);
  }
  size_t index(const std::string& m) const {
    return static_cast<size_t>(std::find(order.begin(), order.end(), m) - order.begin());
  }
  // The module whose _load_from_state_dict reports `key` as unexpected, or "" with false when
  // no module does (the key names a parameter, or a module itself, as PyTorch lets pass).
  bool unexpected_at(const std::string& key, size_t& module_index) const {
    std::string module;
    for (;;) {
      const std::string rest = module.empty() ? key : key.substr(module.size() + 1);
      const size_t dot = rest.find('.');
      const std::string first = rest.substr(0, dot);
      const auto c = children.find(module);
      if (c != children.end() && c->second.count(first)) {
        if (dot == std::string::npos) return false;
        module = module.empty() ? first : module + "." + first;
        continue;
      }
      const auto p = params.find(module);
      if (p != params.end() && p->second.count(first)) return false;
      module_index = index(module);
      return true;
    }
  }
};

std::string quoted_list(const std::vector<std::string>& keys) {
  std::vector<std::string> q;
  for (auto& k : keys) q.push_back(fmt::format("\"{}\"", k));
  return fmt::format("{}", fmt::join(q, ", "));
}

std::string python_list(const std::vector<std::string>& keys) {
  std::vector<std::string> q;
  for (auto& k : keys) q.push_back(fmt::format("'{}'", k));
  return fmt::format("[{}]", fmt::join(q, ", "));
}

}  // namespace

std::vector<TensorKey> gpt_state_dict(const GptConfig& cfg, int tp) {
  const int64_t C = cfg.d_model, V = padded_vocab(cfg, tp), T = cfg.seq_len;
  std::vector<TensorKey> out = {{"wte.weight", {V, C}}, {"wpe.weight", {T, C}}};
  for (int l = 0; l < cfg.layers; ++l) {
    const std::string p = fmt::format("blocks.{}.", l);
    const std::vector<TensorKey> block = {{p + "ln_1.weight", {C}},
                                          {p + "ln_1.bias", {C}},
                                          {p + "attn.qkv.weight", {3 * C, C}},
                                          {p + "attn.qkv.bias", {3 * C}},
                                          {p + "attn.proj.weight", {C, C}},
                                          {p + "attn.proj.bias", {C}},
                                          {p + "ln_2.weight", {C}},
                                          {p + "ln_2.bias", {C}},
                                          {p + "mlp.fc.weight", {4 * C, C}},
                                          {p + "mlp.fc.bias", {4 * C}},
                                          {p + "mlp.proj.weight", {C, 4 * C}},
                                          {p + "mlp.proj.bias", {C}}};
    out.insert(out.end(), block.begin(), block.end());
  }
  out.push_back({"ln_f.weight", {C}});
  out.push_back({"ln_f.bias", {C}});
  out.push_back({"lm_head.weight", {V, C}});
  return out;
}

std::vector<std::pair<std::string, std::string>> tied_aliases(const GptConfig& cfg) {
  if (!cfg.structure.tie_embeddings) return {};
  return {{"lm_head.weight", "wte.weight"}};
}

std::vector<TensorKey> without_aliases(const std::vector<TensorKey>& keys, const GptConfig& cfg) {
  std::vector<TensorKey> out;
  const auto aliases = tied_aliases(cfg);
  for (auto& k : keys) {
    const bool alias =
        std::any_of(aliases.begin(), aliases.end(), [&](auto& a) { return a.first == k.name; });
    if (!alias) out.push_back(k);
  }
  return out;
}

std::string state_dict_key(const std::string& n) {
  if (n == "wte" || n == "wpe") return n + ".weight";
  if (n.rfind("lnf.", 0) == 0) return "ln_f." + n.substr(4);
  if (n.size() < 2 || n[0] != 'h' || !std::isdigit(static_cast<unsigned char>(n[1]))) return n;
  const size_t dot = n.find('.');
  std::string rest = n.substr(dot + 1);
  if (rest.rfind("ln1.", 0) == 0) rest = "ln_1." + rest.substr(4);
  if (rest.rfind("ln2.", 0) == 0) rest = "ln_2." + rest.substr(4);
  return "blocks." + n.substr(1, dot - 1) + "." + rest;
}

std::string torch_size(const std::vector<int64_t>& shape) {
  return fmt::format("torch.Size([{}])", fmt::join(shape, ", "));
}

std::string IncompatibleKeys::repr() const {
  if (all_matched()) return "<All keys matched successfully>";
  return fmt::format("_IncompatibleKeys(missing_keys={}, unexpected_keys={})", python_list(missing),
                     python_list(unexpected));
}

IncompatibleKeys load_state_dict(const std::vector<TensorKey>& model,
                                 const std::vector<TensorKey>& checkpoint, bool strict,
                                 const std::string& class_name) {
  std::map<std::string, const TensorKey*> given;
  for (auto& k : checkpoint) given[k.name] = &k;
  IncompatibleKeys out;
  std::vector<std::string> errors;
  for (auto& k : model) {
    const auto it = given.find(k.name);
    if (it == given.end()) {
      out.missing.push_back(k.name);
    } else if (it->second->shape != k.shape) {
      errors.push_back(fmt::format(
          "size mismatch for {}: copying a param with shape {} from checkpoint, the shape in "
          "current model is {}.",
          k.name, torch_size(it->second->shape), torch_size(k.shape)));
    }
  }
  const ModuleTree tree(model);
  std::vector<std::pair<size_t, std::string>> unexpected;
  for (auto& k : checkpoint) {
    size_t at = 0;
    if (tree.unexpected_at(k.name, at)) unexpected.emplace_back(at, k.name);
  }
  std::stable_sort(unexpected.begin(), unexpected.end(),
                   [](auto& a, auto& b) { return a.first < b.first; });
  for (auto& [at, name] : unexpected) out.unexpected.push_back(name);
  if (strict && !out.unexpected.empty()) {
    errors.insert(errors.begin(), fmt::format("Unexpected key(s) in state_dict: {}. ",
                                              quoted_list(out.unexpected)));
  }
  if (strict && !out.missing.empty()) {
    errors.insert(errors.begin(),
                  fmt::format("Missing key(s) in state_dict: {}. ", quoted_list(out.missing)));
  }
  if (!errors.empty()) {
    raise<CheckpointError>("Error(s) in loading state_dict for {}:\n\t{}", class_name,
                           fmt::join(errors, "\n\t"));
  }
  return out;
}

std::vector<TensorKey> consume_prefix(const std::vector<TensorKey>& keys,
                                      const std::string& prefix) {
  std::vector<TensorKey> out, renamed;
  for (auto& k : keys) {
    if (k.name.rfind(prefix, 0) == 0) {
      renamed.push_back({k.name.substr(prefix.size()), k.shape});
    } else {
      out.push_back(k);
    }
  }
  // PyTorch pops the sorted matching keys and re-inserts each under its new name.
  std::vector<std::pair<std::string, TensorKey>> by_old;
  for (auto& r : renamed) by_old.push_back({prefix + r.name, r});
  std::sort(by_old.begin(), by_old.end(), [](auto& a, auto& b) { return a.first < b.first; });
  for (auto& entry : by_old) {
    const TensorKey& k = entry.second;
    // A dict keeps an existing key's position when it is assigned again.
    auto same = std::find_if(out.begin(), out.end(), [&](auto& o) { return o.name == k.name; });
    if (same != out.end()) {
      *same = k;
    } else {
      out.push_back(k);
    }
  }
  return out;
}

void check_key_prefix(const std::string& prefix, const std::string& option) {
  if (prefix.empty()) return;
  bool ok = prefix.back() == '.' && prefix.front() != '.' && prefix.find("..") == std::string::npos;
  for (char c : prefix) {
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.');
  }
  if (!ok) {
    raise<ConfigError>(
        "{} is '{}': allowed is empty or a key prefix as a wrapper adds it, dotted names of "
        "letters, digits and '_' ending in '.' (e.g. 'module.' of DistributedDataParallel, "
        "'_orig_mod.' of torch.compile)",
        option, prefix);
  }
}

}  // namespace fl::model
