// The model's structure against the frameworks: Megatron's vocabulary padding
// (_vocab_size_with_padding), its head/TP and head-size checks, tied embeddings as PyTorch keeps
// them (one tensor, two state-dict keys, the gradient the sum of both uses, the alias's values
// winning a load), and the vocab-parallel split of wte and the LM head. Expected PyTorch strings
// were printed by torch 1.13 (/usr/bin/python3) for a module whose lm_head.weight is wte.weight.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <vector>

#include "base/error.hpp"
#include "tests/support/scratch.hpp"
#include "workloads/model/gpt.hpp"
#include "workloads/model/state_dict.hpp"
#include "workloads/train/checkpoint.hpp"

namespace fl::model {
namespace {

GptConfig tied(GptConfig c) {
  c.structure.tie_embeddings = true;
  return c;
}

// vocab 8, d_model 4, one layer, 2 heads, seq_len 4.
GptConfig tiny(int vocab = 8) {
  return GptConfig{vocab, 4, 1, 2, 4, 1, {}};
}

std::string config_error(const GptConfig& m, const Layout& l) {
  try {
    validate(m, l);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "ok";
}

TEST(VocabPadding, FollowsMegatronsVocabSizeWithPadding) {
  // GPT-2's 50257 tokens: 50304 at TP 1 (make_vocab_size_divisible_by 128), 50432 at TP 2.
  EXPECT_EQ(vocab_size_with_padding(50257, 128, 1), 50304);
  EXPECT_EQ(vocab_size_with_padding(50257, 128, 2), 50432);
  EXPECT_EQ(vocab_size_with_padding(50257, 128, 8), 51200);
  EXPECT_EQ(vocab_size_with_padding(50304, 128, 1), 50304);  // already a multiple
  EXPECT_EQ(vocab_size_with_padding(64, 1, 1), 64);
  EXPECT_EQ(vocab_size_with_padding(60, 8, 2), 64);
}

TEST(VocabPadding, PadsOnlyForTheShardsThatSplitTheVocabulary) {
  GptConfig c = tiny(60);
  c.structure.divisible_by = 8;
  EXPECT_EQ(padded_vocab(c, 2), 64);  // replicated: a multiple of 8
  c.structure.vocab_parallel = true;
  EXPECT_EQ(padded_vocab(c, 2), 64);  // 8 x 2
  EXPECT_EQ(padded_vocab(c, 4), 64);  // 8 x 4 = 32
  c.structure.divisible_by = 1;
  EXPECT_EQ(padded_vocab(c, 8), 64);
  EXPECT_EQ(padded_vocab(c, 2), 60);
  c.structure.padded_vocab = 72;  // a checkpoint's padded_vocab_size wins
  EXPECT_EQ(padded_vocab(c, 2), 72);
  EXPECT_EQ(padded_vocab(GptConfig::tiny(), 4), 64);  // the default pads nothing
}

TEST(VocabPadding, ThePaddedRowsAreInTheStateDictShapes) {
  GptConfig c = tiny(60);
  c.structure.vocab_parallel = true;
  c.structure.divisible_by = 8;
  const auto at_tp2 = gpt_state_dict(c, 2);
  EXPECT_EQ(at_tp2.front().shape, (std::vector<int64_t>{64, 4}));
  EXPECT_EQ(at_tp2.back().shape, (std::vector<int64_t>{64, 4}));
  // A checkpoint padded for TP 2 loaded into an unpadded model: PyTorch's size mismatch.
  c.structure.divisible_by = 1;
  c.structure.vocab_parallel = false;
  try {
    load_state_dict(gpt_state_dict(c, 1), at_tp2, true);
    ADD_FAILURE();
  } catch (const CheckpointError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("Error(s) in loading state_dict for GPT:\n\tsize mismatch for wte.weight: "
                       "copying a param with shape torch.Size([64, 4]) from checkpoint, the shape "
                       "in current model is torch.Size([60, 4])."),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("\n\tsize mismatch for lm_head.weight: copying a param with shape "
                       "torch.Size([64, 4]) from checkpoint, the shape in current model is "
                       "torch.Size([60, 4])."),
              std::string::npos)
        << msg;
  }
}

TEST(VocabPadding, BadPaddingIsAConfigErrorNamingTheOption) {
  GptConfig c = tiny(60);
  c.structure.padded_vocab = 56;
  EXPECT_EQ(config_error(c, {1, 1, 1, 1, 0}),
            "workload.structure.padded_vocab is 56, smaller than the vocabulary (60 tokens): "
            "allowed is 0 (padded from make_vocab_size_divisible_by) or at least 60");
  c.structure.padded_vocab = 61;
  c.structure.vocab_parallel = true;
  EXPECT_EQ(config_error(c, {2, 1, 2, 1, 0}),
            "workload.structure.padded_vocab is 61, which the 2 vocabulary shards (vocab_parallel "
            "at tensor-parallel size 2) do not divide: allowed is 0 or a multiple of 2 of at "
            "least 60 (e.g. 60)");
  c.structure.vocab_parallel = false;  // one shard: any size of at least the vocabulary
  EXPECT_EQ(config_error(c, {2, 1, 2, 1, 0}), "ok");
  c.structure.padded_vocab = 0;
  c.structure.divisible_by = 0;
  EXPECT_EQ(config_error(c, {1, 1, 1, 1, 0}),
            "workload.structure.make_vocab_size_divisible_by is 0: allowed is a positive integer "
            "(Megatron's default is 128; 1 pads only to the number of vocabulary shards)");
}

TEST(HeadChecks, AreInMegatronsWordsAndListWhatIsAllowed) {
  GptConfig c = GptConfig::tiny();  // 4 heads, d_model 32
  c.heads = 6;
  c.d_model = 36;
  EXPECT_EQ(config_error(c, {4, 1, 4, 1, 0}),
            "num_attention_heads (6) must be a multiple of tensor_model_parallel_size (4). "
            "(invalid layout: topology.tp allowed for 6 heads: 1, 2, 3, 6)");
  c.heads = 5;
  EXPECT_EQ(config_error(c, {1, 1, 1, 1, 0}),
            "invalid model: 36 is not divisible by 5 (hidden size d_model 36 over 5 attention "
            "heads gives no whole head size; workload.shape.heads allowed here: 1, 2, 3, 4, 6, 9, "
            "12, 18, 36)");
}

TEST(TiedEmbeddings, TheStateDictListsTheTensorUnderBothNames) {
  const auto untied = gpt_state_dict(tiny());
  const auto keys = gpt_state_dict(tied(tiny()));
  EXPECT_EQ(keys, untied);  // torch: wte.weight and lm_head.weight, the same storage
  EXPECT_EQ(tied_aliases(tied(tiny())),
            (std::vector<std::pair<std::string, std::string>>{{"lm_head.weight", "wte.weight"}}));
  EXPECT_TRUE(tied_aliases(tiny()).empty());
  const auto once = without_aliases(keys, tied(tiny()));
  EXPECT_EQ(once.size(), keys.size() - 1);
  EXPECT_EQ(once.back().name, "ln_f.bias");
}

TEST(TiedEmbeddings, ACheckpointWithoutTheAliasFailsAStrictLoadAsInPyTorch) {
  const auto model = gpt_state_dict(tied(tiny()));
  const auto saved_once = without_aliases(model, tied(tiny()));
  try {
    load_state_dict(model, saved_once, true);
    ADD_FAILURE();
  } catch (const CheckpointError& e) {
    EXPECT_STREQ(e.what(),
                 "Error(s) in loading state_dict for GPT:\n\tMissing key(s) in state_dict: "
                 "\"lm_head.weight\". ");
  }
  EXPECT_EQ(load_state_dict(model, saved_once, false).repr(),
            "_IncompatibleKeys(missing_keys=['lm_head.weight'], unexpected_keys=[])");
}

TEST(TiedEmbeddings, OneStageHoldsOneTensorThatTheHeadReads) {
  const ParamLayout one(tied(tiny()), 1, 0, 1, 0);
  EXPECT_TRUE(one.head_reads_embedding());
  EXPECT_EQ(one.head_weight(), "wte");
  for (auto& s : one.specs()) EXPECT_NE(s.name, "lm_head.weight");
  const ParamLayout untied(tiny(), 1, 0, 1, 0);
  EXPECT_EQ(untied.total() - one.total(), 8u * 4u);  // lm_head's 8 x 4 elements are gone
}

TEST(TiedEmbeddings, TheLastStagesCopyStartsFromWtesValuesAndIsMarkedShared) {
  GptConfig c = tied(tiny());
  c.layers = 2;
  const ParamLayout first(c, 1, 0, 2, 0), last(c, 1, 0, 2, 1);
  EXPECT_EQ(last.head_weight(), "lm_head.weight");
  EXPECT_FALSE(last.head_reads_embedding());
  const ParamSpec& copy = last.spec("lm_head.weight");
  EXPECT_TRUE(copy.shared);
  EXPECT_FALSE(first.spec("wte").shared);
  std::vector<float> a(first.total()), b(last.total());
  first.initialize(a.data(), c.seed);
  last.initialize(b.data(), c.seed);
  for (size_t i = 0; i < copy.numel(); ++i) {
    ASSERT_EQ(b[copy.offset + i], a[first.spec("wte").offset + i]) << i;
  }
}

// The tied model's gradient of wte is the embedding's plus the head's: the untied model with
// lm_head set to wte's values gives the two parts separately.
TEST(TiedEmbeddings, TheGradientIsTheSumOfBothUses) {
  const GptConfig u = GptConfig{11, 8, 1, 2, 5, 99, {}}, t = tied(u);
  const ParamLayout lu(u, 1, 0, 1, 0), lt(t, 1, 0, 1, 0);
  std::vector<float> pu(lu.total()), gu(lu.total()), pt(lt.total()), gt(lt.total());
  lt.initialize(pt.data(), t.seed);
  // The same values for every tensor both have; lm_head := wte.
  for (auto& s : lt.specs()) {
    std::copy_n(pt.begin() + static_cast<long>(s.offset), s.numel(),
                pu.begin() + static_cast<long>(lu.spec(s.name).offset));
  }
  std::copy_n(pt.begin() + static_cast<long>(lt.spec("wte").offset), 11 * 8,
              pu.begin() + static_cast<long>(lu.spec("lm_head.weight").offset));
  std::vector<int32_t> tokens{1, 3, 5, 7, 9, 2, 4, 6, 8, 10},
      targets{3, 5, 7, 9, 2, 4, 6, 8, 10, 0};
  MemoryAccountant acct;
  GptStage su(u, lu, nullptr, acct), st(t, lt, nullptr, acct);
  auto au = su.forward(pu.data(), tokens.data(), nullptr, targets.data(), 2, 5);
  su.backward(*au, pu.data(), gu.data(), 1.0f, nullptr, nullptr);
  auto at = st.forward(pt.data(), tokens.data(), nullptr, targets.data(), 2, 5);
  st.backward(*at, pt.data(), gt.data(), 1.0f, nullptr, nullptr);
  EXPECT_FLOAT_EQ(at->loss, au->loss);
  const size_t we = lt.spec("wte").offset, ue = lu.spec("wte").offset,
               uh = lu.spec("lm_head.weight").offset;
  for (size_t i = 0; i < 11 * 8; ++i) {
    ASSERT_NEAR(gt[we + i], gu[ue + i] + gu[uh + i], 1e-6f) << i;
  }
}

TEST(VocabParallel, EachTpRankHoldsItsRowsOfThePaddedVocabulary) {
  GptConfig c = tiny(60);
  c.structure.vocab_parallel = true;
  c.structure.divisible_by = 8;
  for (int r = 0; r < 2; ++r) {
    const ParamLayout shard(c, 2, r, 1, 0);
    EXPECT_EQ(shard.vocab_rows(), 64);
    EXPECT_EQ(shard.local_vocab(), 32);
    EXPECT_EQ(shard.vocab_begin(), 32 * r);
    EXPECT_EQ(shard.spec("wte").local_rows, 32);
    EXPECT_EQ(shard.spec("lm_head.weight").local_rows, 32);
    EXPECT_EQ(shard.spec("wte").split, Split::kRows);
  }
  // Replicated (the default): every rank holds every row, unpadded.
  const ParamLayout whole(tiny(60), 2, 1, 1, 0);
  EXPECT_EQ(whole.spec("wte").local_rows, 60);
  EXPECT_EQ(whole.vocab_begin(), 0);
}

// A dp 1, tp 1 checkpoint of model `c` on disk whose parameter i is i (so every copied element
// says where it came from); `unpadded`: its state dict lists wte and lm_head without padding.
nlohmann::json write_checkpoint(const std::filesystem::path& dir, const GptConfig& c,
                                bool unpadded = false) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const ParamLayout layout(c, 1, 0, 1, 0);
  std::vector<float> p(layout.total()), zeros(layout.total(), 0.0f);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<float>(i);
  const nlohmann::json header = {{"rank", 0}, {"dp_rank", 0}, {"tp_rank", 0},     {"pp_rank", 0},
                                 {"zero", 0}, {"offset", 0},  {"part", p.size()}, {"step", 1}};
  const std::string bytes =
      train::encode_shard(header, {{"params", p.data(), p.size()},
                                   {"exp_avg", zeros.data(), zeros.size()},
                                   {"exp_avg_sq", zeros.data(), zeros.size()}});
  train::write_file_atomic((dir / "shard_rank0.bin").string(), bytes);
  return {{"model", train::model_json(c)},
          {"layout", {{"world", 1}, {"dp", 1}, {"tp", 1}, {"pp", 1}, {"zero", 0}}},
          {"state_dict", train::state_dict_json(c, 1, "", true, unpadded)},
          {"state_dict_unpadded", unpadded},
          {"shards",
           {{{"rank", 0},
             {"file", "shard_rank0.bin"},
             {"bytes", bytes.size()},
             {"xxh64", fmt::format("{:016x}", train::checksum(bytes))},
             {"dp_rank", 0},
             {"tp_rank", 0},
             {"pp_rank", 0}}}}};
}

std::filesystem::path temp_dir(const char* what) {
  return fl::test::removed_at_exit(
      std::filesystem::temp_directory_path() /
      (std::string("faultline-structure-test-") + what + "-" + std::to_string(::getpid())));
}

// The parameters of `to` after a load by name of the checkpoint in `dir` (-1 where nothing
// loaded).
std::vector<float> load(const std::filesystem::path& dir, const nlohmann::json& m,
                        const GptConfig& model, bool strict) {
  const auto named = train::load_named(dir.string(), m, model, 1, "", strict, "opt");
  const ParamLayout to(model, 1, 0, 1, 0);
  std::vector<float> q(to.total(), -1.0f), a(to.total()), v(to.total());
  train::restore_by_name(dir.string(), m, named, to, 0, {q.data(), 0, q.size()},
                         {a.data(), 0, a.size()}, {v.data(), 0, v.size()});
  return q;
}

// A tied model loading an untied checkpoint (both keys present): load_state_dict copies
// wte.weight, then lm_head.weight into the same storage, so the tensor ends with lm_head's values
// (torch 1.13: wte filled with 1, lm_head with 2 -> both read 2.0).
TEST(TiedEmbeddings, LoadingBothKeysKeepsTheAliasValuesAsPyTorchDoes) {
  const auto dir = temp_dir("alias");
  const GptConfig untied = tiny(), model = tied(tiny());
  const auto m = write_checkpoint(dir, untied);
  const auto q = load(dir, m, model, true);
  const ParamLayout from(untied, 1, 0, 1, 0), to(model, 1, 0, 1, 0);
  const size_t head = from.spec("lm_head.weight").offset, wte = to.spec("wte").offset;
  for (size_t i = 0; i < 8 * 4; ++i) ASSERT_EQ(q[wte + i], static_cast<float>(head + i)) << i;
  EXPECT_EQ(q[to.spec("wpe").offset], static_cast<float>(from.spec("wpe").offset));
  std::filesystem::remove_all(dir);
}

// A save that strips the padding (Colossal-AI's gather-then-unpad) lists [63, 4]; the unpadded
// model loads it row by row and the padding row stays out.
TEST(VocabPadding, AnUnpaddedSaveLoadsRowByRowIntoTheUnpaddedModel) {
  const auto dir = temp_dir("unpad");
  GptConfig padded = tiny(63);
  padded.structure.padded_vocab = 64;
  const GptConfig plain = tiny(63);
  const auto m = write_checkpoint(dir, padded, true);
  EXPECT_EQ(train::checkpoint_state_dict(dir.string(), m).front().shape,
            (std::vector<int64_t>{63, 4}));
  const auto q = load(dir, m, plain, true);
  const ParamLayout from(padded, 1, 0, 1, 0), to(plain, 1, 0, 1, 0);
  for (const char* name : {"wte", "lm_head.weight"}) {
    const size_t src = from.spec(name).offset, dst = to.spec(name).offset;
    for (size_t i = 0; i < 63 * 4; ++i) ASSERT_EQ(q[dst + i], static_cast<float>(src + i)) << name;
  }
  // Saved with its padding, the same checkpoint is refused in PyTorch's words.
  try {
    load(dir, write_checkpoint(dir, padded, false), plain, true);
    ADD_FAILURE();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("size mismatch for wte.weight: copying a param with "
                                         "shape torch.Size([64, 4]) from checkpoint, the shape in "
                                         "current model is torch.Size([63, 4])."),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fl::model
