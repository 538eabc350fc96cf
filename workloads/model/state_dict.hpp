// The GPT's state dict as PyTorch names it: one key per parameter tensor, in the order a
// torch.nn.Module registers them, with the tensor's full shape (docs/workloads.md#state-dicts).
// Loads by name follow torch.nn.Module.load_state_dict: the same key sets, the same strict and
// non-strict outcomes and the same error text, so a scenario's failure reads as PyTorch's.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "workloads/model/config.hpp"

namespace fl::model {

struct TensorKey {
  std::string name;            // e.g. "blocks.0.attn.qkv.weight"
  std::vector<int64_t> shape;  // the full tensor's, as torch.Size
  bool operator==(const TensorKey&) const = default;
};

// The whole model's keys and shapes in registration order: wte, wpe, blocks.<l>.{ln_1, attn.qkv,
// attn.proj, ln_2, mlp.fc, mlp.proj}, ln_f, lm_head. Biases and layer norms are 1-D. wte and
// lm_head have the padded vocabulary's rows at TP size `tp` (padded_vocab). Under tied embeddings
// lm_head.weight is still listed: torch's state_dict() names a shared parameter under every
// module that holds it (tied_aliases says which key is whose).
std::vector<TensorKey> gpt_state_dict(const GptConfig& cfg, int tp = 1);
// The keys that name another key's tensor, alias -> original: {"lm_head.weight", "wte.weight"}
// under tied embeddings, none otherwise.
std::vector<std::pair<std::string, std::string>> tied_aliases(const GptConfig& cfg);
// The keys a save writes without the aliases (what safetensors' save_model and Hugging Face's
// save_pretrained keep of shared tensors): gpt_state_dict less tied_aliases.
std::vector<TensorKey> without_aliases(const std::vector<TensorKey>& keys, const GptConfig& cfg);
// The state-dict key of a ParamLayout parameter: "h3.ln1.weight" -> "blocks.3.ln_1.weight",
// "wte" -> "wte.weight", "lnf.bias" -> "ln_f.bias".
std::string state_dict_key(const std::string& param_name);
// "torch.Size([96, 32])".
std::string torch_size(const std::vector<int64_t>& shape);

// What a non-strict load returns (torch.nn.modules.module._IncompatibleKeys).
struct IncompatibleKeys {
  std::vector<std::string> missing, unexpected;
  // Its Python repr: "<All keys matched successfully>" or
  // "_IncompatibleKeys(missing_keys=['a'], unexpected_keys=[])".
  std::string repr() const;
  bool all_matched() const { return missing.empty() && unexpected.empty(); }
};

// Module.load_state_dict(checkpoint, strict) of a model whose state dict is `model`, checking
// keys and shapes: missing keys in model order, unexpected keys in the order the module walk
// meets them, size mismatches (an error even when not strict). Throws CheckpointError with
// PyTorch's text ("Error(s) in loading state_dict for GPT:\n\tMissing key(s) ...") otherwise.
IncompatibleKeys load_state_dict(const std::vector<TensorKey>& model,
                                 const std::vector<TensorKey>& checkpoint, bool strict,
                                 const std::string& class_name = "GPT");

// torch.nn.modules.utils.consume_prefix_in_state_dict_if_present: every key starting with
// `prefix` loses it, and (as there) the renamed keys move to the end in sorted order.
std::vector<TensorKey> consume_prefix(const std::vector<TensorKey>& keys,
                                      const std::string& prefix);

// A key prefix as a wrapper adds it ("module.", "_orig_mod."): empty, or dotted names of letters,
// digits and '_' ending in '.'. A ConfigError naming `option` and what is allowed otherwise.
void check_key_prefix(const std::string& prefix, const std::string& option);

}  // namespace fl::model
