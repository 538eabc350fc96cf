// Named state dicts against torch.nn.Module.load_state_dict: key sets and shapes, strict and
// non-strict outcomes, and the error text. Every expected string was printed by torch 1.13
// (/usr/bin/python3) for a torch GPT with the same module tree (wte, wpe, blocks[i].{ln_1,
// attn.qkv, attn.proj, ln_2, mlp.fc, mlp.proj}, ln_f, lm_head without bias).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "base/error.hpp"
#include "tests/support/scratch.hpp"
#include "workloads/model/params.hpp"
#include "workloads/model/state_dict.hpp"
#include "workloads/train/checkpoint.hpp"

namespace fl::model {
namespace {

// vocab 8, d_model 4, `layers`, 2 heads, seq_len 4.
GptConfig tiny(int layers, int vocab = 8) {
  return GptConfig{vocab, 4, layers, 2, 4, 1};
}

std::vector<TensorKey> with_prefix(std::vector<TensorKey> keys, const std::string& prefix) {
  for (auto& k : keys) k.name = prefix + k.name;
  return keys;
}

std::string error_of(const std::vector<TensorKey>& model, const std::vector<TensorKey>& ckpt,
                     bool strict) {
  try {
    load_state_dict(model, ckpt, strict);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string names(const std::vector<TensorKey>& keys) {
  std::string out;
  for (auto& k : keys) out += k.name + " ";
  return out;
}

const char* kOneLayer =
    "wte.weight wpe.weight blocks.0.ln_1.weight blocks.0.ln_1.bias blocks.0.attn.qkv.weight "
    "blocks.0.attn.qkv.bias blocks.0.attn.proj.weight blocks.0.attn.proj.bias "
    "blocks.0.ln_2.weight blocks.0.ln_2.bias blocks.0.mlp.fc.weight blocks.0.mlp.fc.bias "
    "blocks.0.mlp.proj.weight blocks.0.mlp.proj.bias ln_f.weight ln_f.bias lm_head.weight ";

TEST(StateDict, HasTorchsKeysAndShapesInRegistrationOrder) {
  const auto keys = gpt_state_dict(tiny(1));
  EXPECT_EQ(names(keys), kOneLayer);
  EXPECT_EQ(keys[0].shape, (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(keys[2].shape, (std::vector<int64_t>{4}));       // ln_1.weight
  EXPECT_EQ(keys[4].shape, (std::vector<int64_t>{12, 4}));   // attn.qkv.weight
  EXPECT_EQ(keys[5].shape, (std::vector<int64_t>{12}));      // attn.qkv.bias
  EXPECT_EQ(keys[12].shape, (std::vector<int64_t>{4, 16}));  // mlp.proj.weight
  EXPECT_EQ(keys[16].shape, (std::vector<int64_t>{8, 4}));   // lm_head.weight
  EXPECT_EQ(gpt_state_dict(tiny(3)).size(), 2u + 3 * 12 + 3);
  EXPECT_EQ(torch_size({12, 4}), "torch.Size([12, 4])");
}

TEST(StateDict, NamesEveryLayoutParameterOnceInTheSameOrder) {
  const GptConfig c = tiny(2);
  const ParamLayout layout(c, 1, 0, 1, 0);
  std::vector<TensorKey> from_layout;
  for (auto& s : layout.specs()) {
    from_layout.push_back({state_dict_key(s.name), s.rows == 1 || s.cols == 1
                                                       ? std::vector<int64_t>{s.rows * s.cols}
                                                       : std::vector<int64_t>{s.rows, s.cols}});
  }
  EXPECT_EQ(from_layout, gpt_state_dict(c));
}

TEST(StateDict, StrictLoadOfDdpPrefixedKeysFailsWithTorchsMissingAndUnexpectedText) {
  const auto model = gpt_state_dict(tiny(1));
  EXPECT_EQ(
      error_of(model, with_prefix(model, "module."), true),
      "Error(s) in loading state_dict for GPT:\n\tMissing key(s) in state_dict: \"wte.weight\", "
      "\"wpe.weight\", \"blocks.0.ln_1.weight\", \"blocks.0.ln_1.bias\", "
      "\"blocks.0.attn.qkv.weight\", \"blocks.0.attn.qkv.bias\", \"blocks.0.attn.proj.weight\", "
      "\"blocks.0.attn.proj.bias\", \"blocks.0.ln_2.weight\", \"blocks.0.ln_2.bias\", "
      "\"blocks.0.mlp.fc.weight\", \"blocks.0.mlp.fc.bias\", \"blocks.0.mlp.proj.weight\", "
      "\"blocks.0.mlp.proj.bias\", \"ln_f.weight\", \"ln_f.bias\", \"lm_head.weight\". "
      "\n\tUnexpected key(s) in state_dict: \"module.wte.weight\", \"module.wpe.weight\", "
      "\"module.blocks.0.ln_1.weight\", \"module.blocks.0.ln_1.bias\", "
      "\"module.blocks.0.attn.qkv.weight\", \"module.blocks.0.attn.qkv.bias\", "
      "\"module.blocks.0.attn.proj.weight\", \"module.blocks.0.attn.proj.bias\", "
      "\"module.blocks.0.ln_2.weight\", \"module.blocks.0.ln_2.bias\", "
      "\"module.blocks.0.mlp.fc.weight\", \"module.blocks.0.mlp.fc.bias\", "
      "\"module.blocks.0.mlp.proj.weight\", \"module.blocks.0.mlp.proj.bias\", "
      "\"module.ln_f.weight\", \"module.ln_f.bias\", \"module.lm_head.weight\". ");
}

TEST(StateDict, NonStrictLoadOfDdpPrefixedKeysMatchesNothingAndSaysSo) {
  const auto model = gpt_state_dict(tiny(1));
  const auto r = load_state_dict(model, with_prefix(model, "module."), false);
  EXPECT_EQ(r.missing.size(), model.size());
  EXPECT_EQ(r.unexpected.front(), "module.wte.weight");
  EXPECT_EQ(r.repr(),
            "_IncompatibleKeys(missing_keys=['wte.weight', 'wpe.weight', 'blocks.0.ln_1.weight', "
            "'blocks.0.ln_1.bias', 'blocks.0.attn.qkv.weight', 'blocks.0.attn.qkv.bias', "
            "'blocks.0.attn.proj.weight', 'blocks.0.attn.proj.bias', 'blocks.0.ln_2.weight', "
            "'blocks.0.ln_2.bias', 'blocks.0.mlp.fc.weight', 'blocks.0.mlp.fc.bias', "
            "'blocks.0.mlp.proj.weight', 'blocks.0.mlp.proj.bias', 'ln_f.weight', 'ln_f.bias', "
            "'lm_head.weight'], unexpected_keys=['module.wte.weight', 'module.wpe.weight', "
            "'module.blocks.0.ln_1.weight', 'module.blocks.0.ln_1.bias', "
            "'module.blocks.0.attn.qkv.weight', 'module.blocks.0.attn.qkv.bias', "
            "'module.blocks.0.attn.proj.weight', 'module.blocks.0.attn.proj.bias', "
            "'module.blocks.0.ln_2.weight', 'module.blocks.0.ln_2.bias', "
            "'module.blocks.0.mlp.fc.weight', 'module.blocks.0.mlp.fc.bias', "
            "'module.blocks.0.mlp.proj.weight', 'module.blocks.0.mlp.proj.bias', "
            "'module.ln_f.weight', 'module.ln_f.bias', 'module.lm_head.weight'])");
}

TEST(StateDict, ConsumedPrefixMatchesEveryKeyAndMovesRenamedKeysToTheEndSorted) {
  const auto model = gpt_state_dict(tiny(1));
  const auto consumed = consume_prefix(with_prefix(model, "module."), "module.");
  EXPECT_EQ(load_state_dict(model, consumed, true).repr(), "<All keys matched successfully>");
  EXPECT_EQ(consumed[0].name, "blocks.0.attn.proj.bias");
  EXPECT_EQ(consumed[1].name, "blocks.0.attn.proj.weight");
  // Only the blocks prefixed: the others keep their place, the renamed follow in sorted order.
  std::vector<TensorKey> part = model;
  for (auto& k : part) {
    if (k.name.rfind("blocks", 0) == 0) k.name = "module." + k.name;
  }
  EXPECT_EQ(names(consume_prefix(part, "module.")),
            "wte.weight wpe.weight ln_f.weight ln_f.bias lm_head.weight blocks.0.attn.proj.bias "
            "blocks.0.attn.proj.weight blocks.0.attn.qkv.bias blocks.0.attn.qkv.weight "
            "blocks.0.ln_1.bias blocks.0.ln_1.weight blocks.0.ln_2.bias blocks.0.ln_2.weight "
            "blocks.0.mlp.fc.bias blocks.0.mlp.fc.weight blocks.0.mlp.proj.bias "
            "blocks.0.mlp.proj.weight ");
}

TEST(StateDict, ExtraLayersAreUnexpectedWhenStrictAndReportedWhenNot) {
  const auto one = gpt_state_dict(tiny(1)), two = gpt_state_dict(tiny(2));
  EXPECT_EQ(error_of(one, two, true),
            "Error(s) in loading state_dict for GPT:\n\tUnexpected key(s) in state_dict: "
            "\"blocks.1.ln_1.weight\", \"blocks.1.ln_1.bias\", \"blocks.1.attn.qkv.weight\", "
            "\"blocks.1.attn.qkv.bias\", \"blocks.1.attn.proj.weight\", "
            "\"blocks.1.attn.proj.bias\", \"blocks.1.ln_2.weight\", \"blocks.1.ln_2.bias\", "
            "\"blocks.1.mlp.fc.weight\", \"blocks.1.mlp.fc.bias\", \"blocks.1.mlp.proj.weight\", "
            "\"blocks.1.mlp.proj.bias\". ");
  const auto more = load_state_dict(one, two, false);
  EXPECT_TRUE(more.missing.empty());
  EXPECT_EQ(more.unexpected.size(), 12u);
  const auto fewer = load_state_dict(two, one, false);
  EXPECT_EQ(fewer.repr(),
            "_IncompatibleKeys(missing_keys=['blocks.1.ln_1.weight', 'blocks.1.ln_1.bias', "
            "'blocks.1.attn.qkv.weight', 'blocks.1.attn.qkv.bias', 'blocks.1.attn.proj.weight', "
            "'blocks.1.attn.proj.bias', 'blocks.1.ln_2.weight', 'blocks.1.ln_2.bias', "
            "'blocks.1.mlp.fc.weight', 'blocks.1.mlp.fc.bias', 'blocks.1.mlp.proj.weight', "
            "'blocks.1.mlp.proj.bias'], unexpected_keys=[])");
}

TEST(StateDict, SizeMismatchIsAnErrorStrictOrNot) {
  const std::string want =
      "Error(s) in loading state_dict for GPT:\n\tsize mismatch for wte.weight: copying a param "
      "with shape torch.Size([12, 4]) from checkpoint, the shape in current model is "
      "torch.Size([8, 4]).\n\tsize mismatch for lm_head.weight: copying a param with shape "
      "torch.Size([12, 4]) from checkpoint, the shape in current model is torch.Size([8, 4]).";
  const auto model = gpt_state_dict(tiny(1)), ckpt = gpt_state_dict(tiny(1, 12));
  EXPECT_EQ(error_of(model, ckpt, true), want);
  EXPECT_EQ(error_of(model, ckpt, false), want);
}

TEST(StateDict, ErrorsComeMissingThenUnexpectedByModuleWalkThenSizes) {
  auto ckpt = gpt_state_dict(tiny(2));
  ckpt.push_back({"extra.weight", {1}});
  ckpt.push_back({"blocks.0.attn.rotary.inv_freq", {2}});
  ckpt.push_back({"blocks.0", {1}});  // names a module: PyTorch lets it pass
  std::erase_if(ckpt, [](auto& k) { return k.name == "ln_f.bias"; });
  EXPECT_EQ(
      error_of(gpt_state_dict(tiny(1, 12)), ckpt, true),
      "Error(s) in loading state_dict for GPT:\n\tMissing key(s) in state_dict: \"ln_f.bias\". "
      "\n\tUnexpected key(s) in state_dict: \"extra.weight\", \"blocks.1.ln_1.weight\", "
      "\"blocks.1.ln_1.bias\", \"blocks.1.attn.qkv.weight\", \"blocks.1.attn.qkv.bias\", "
      "\"blocks.1.attn.proj.weight\", \"blocks.1.attn.proj.bias\", \"blocks.1.ln_2.weight\", "
      "\"blocks.1.ln_2.bias\", \"blocks.1.mlp.fc.weight\", \"blocks.1.mlp.fc.bias\", "
      "\"blocks.1.mlp.proj.weight\", \"blocks.1.mlp.proj.bias\", "
      "\"blocks.0.attn.rotary.inv_freq\". \n\tsize mismatch for wte.weight: copying a param "
      "with shape torch.Size([8, 4]) from checkpoint, the shape in current model is "
      "torch.Size([12, 4]).\n\tsize mismatch for lm_head.weight: copying a param with shape "
      "torch.Size([8, 4]) from checkpoint, the shape in current model is torch.Size([12, 4]).");
}

TEST(StateDict, AKeyPrefixMustBeDottedNamesEndingInADot) {
  EXPECT_NO_THROW(check_key_prefix("", "opt"));
  EXPECT_NO_THROW(check_key_prefix("module.", "opt"));
  EXPECT_NO_THROW(check_key_prefix("_orig_mod.module.", "opt"));
  for (const char* bad : {"module", ".module.", "mod..ule.", "mo dule.", "module/"}) {
    try {
      check_key_prefix(bad, "workload.checkpoint.key_prefix (--save-key-prefix)");
      ADD_FAILURE() << bad;
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()),
                fmt::format("workload.checkpoint.key_prefix (--save-key-prefix) is '{}': allowed "
                            "is empty or a key prefix as a wrapper adds it, dotted names of "
                            "letters, digits and '_' ending in '.' (e.g. 'module.' of "
                            "DistributedDataParallel, '_orig_mod.' of torch.compile)",
                            bad));
    }
  }
}

nlohmann::json manifest_of(const GptConfig& c, const std::string& prefix) {
  return {{"model",
           {{"vocab", c.vocab},
            {"d_model", c.d_model},
            {"layers", c.layers},
            {"heads", c.heads},
            {"seq_len", c.seq_len},
            {"seed", c.seed}}},
          {"state_dict", train::state_dict_json(c, 1, prefix)}};
}

TEST(StateDict, StrippingAPrefixNoKeyHasIsAConfigErrorNamingTheOption) {
  const auto m = manifest_of(tiny(1), "module.");
  try {
    train::load_named("ck", m, tiny(1), 1, "_orig_mod.", true, "workload.checkpoint.strip_prefix");
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "workload.checkpoint.strip_prefix is '_orig_mod.' but no key of checkpoint ck "
                 "starts with it (its first key is 'module.wte.weight'); allowed: empty, or a "
                 "prefix its keys have");
  }
  const auto ok = train::load_named("ck", m, tiny(1), 1, "module.", true, "opt");
  EXPECT_TRUE(ok.keys.all_matched());
  EXPECT_EQ(ok.source.at("blocks.0.mlp.fc.bias"), "blocks.0.mlp.fc.bias");
}

TEST(StateDict, ANonStrictLoadTakesEachMatchingTensorFromTheCheckpointsOwnName) {
  const auto m = manifest_of(tiny(1), "");
  const auto r = train::load_named("ck", m, tiny(2), 1, "", false, "opt");
  EXPECT_EQ(r.keys.missing.size(), 12u);
  EXPECT_EQ(r.source.size(), gpt_state_dict(tiny(1)).size());
  EXPECT_EQ(r.source.count("blocks.1.ln_1.weight"), 0u);
  // A checkpoint written before manifests listed keys: its model's own keys.
  auto old = m;
  old.erase("state_dict");
  EXPECT_EQ(train::checkpoint_state_dict("ck", old), gpt_state_dict(tiny(1)));
}

// A dp 1 checkpoint of model `c` on disk whose parameter i is 1000 + i and whose moments are
// -i and i (so every copied element says where it came from).
nlohmann::json write_checkpoint(const std::filesystem::path& dir, const GptConfig& c) {
  std::filesystem::create_directories(dir);
  const ParamLayout layout(c, 1, 0, 1, 0);
  std::vector<float> p(layout.total()), m(layout.total()), v(layout.total());
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] = 1000.0f + static_cast<float>(i);
    m[i] = -static_cast<float>(i);
    v[i] = static_cast<float>(i);
  }
  const nlohmann::json header = {{"rank", 0}, {"dp_rank", 0}, {"tp_rank", 0},     {"pp_rank", 0},
                                 {"zero", 0}, {"offset", 0},  {"part", p.size()}, {"step", 4}};
  const std::string bytes = train::encode_shard(header, {{"params", p.data(), p.size()},
                                                         {"exp_avg", m.data(), m.size()},
                                                         {"exp_avg_sq", v.data(), v.size()}});
  train::write_file_atomic((dir / "shard_rank0.bin").string(), bytes);
  auto manifest = manifest_of(c, "");
  manifest["layout"] = {{"world", 1}, {"dp", 1}, {"tp", 1}, {"pp", 1}, {"zero", 0}};
  manifest["shards"] = {{{"rank", 0},
                         {"file", "shard_rank0.bin"},
                         {"bytes", bytes.size()},
                         {"xxh64", fmt::format("{:016x}", train::checksum(bytes))},
                         {"dp_rank", 0},
                         {"tp_rank", 0},
                         {"pp_rank", 0}}};
  return manifest;
}

TEST(StateDict, ANonStrictLoadCopiesEachMatchingTensorByNameAndLeavesTheRest) {
  const auto dir =
      fl::test::removed_at_exit(std::filesystem::temp_directory_path() /
                                ("faultline-state-dict-test-" + std::to_string(::getpid())));
  std::filesystem::remove_all(dir);
  const GptConfig small = tiny(1), big = tiny(2);
  const auto m = write_checkpoint(dir, small);
  const auto named = train::load_named(dir.string(), m, big, 1, "", false, "opt");
  ASSERT_EQ(named.keys.missing.size(), 12u);
  const ParamLayout to(big, 1, 0, 1, 0), from(small, 1, 0, 1, 0);
  std::vector<float> p(to.total(), -7.0f), a(to.total(), -7.0f), v(to.total(), -7.0f);
  // This rank's slice: the second half (as a ZeRO partition would be).
  const size_t lo = to.total() / 2, n = to.total() - lo;
  train::restore_by_name(dir.string(), m, named, to, 0, {p.data() + lo, lo, n},
                         {a.data() + lo, lo, n}, {v.data() + lo, lo, n});
  for (auto& s : to.specs()) {
    for (size_t i = 0; i < s.numel(); ++i) {
      const size_t at = s.offset + i;
      if (at < lo || s.name.rfind("h1.", 0) == 0) {  // outside the slice, or missing
        ASSERT_EQ(p[at], -7.0f) << s.name;
        continue;
      }
      const float src = static_cast<float>(from.spec(s.name).offset + i);
      ASSERT_EQ(p[at], 1000.0f + src) << s.name << " " << i;
      ASSERT_EQ(a[at], -src) << s.name;
      ASSERT_EQ(v[at], src) << s.name;
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fl::model
