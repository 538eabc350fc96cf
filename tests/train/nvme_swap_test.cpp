// ZeRO-Infinity's NVMe parameter swap (workloads/parallel/nvme_swap.hpp): DeepSpeed's aio handle
// drops the request O_DIRECT refuses, so a piece whose bytes are not a multiple of the logical
// block loses its last request and the read's size check aborts (deepspeedai/DeepSpeed#1070);
// from 0.4.0 the swap buffers are padded and the files hold the partition exactly; pieces under
// 1 MiB stay in host memory; and training through the swap files is training without them.
#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "tests/support/scratch.hpp"
#include "tests/support/train_run.hpp"
#include "workloads/model/config.hpp"
#include "workloads/model/params.hpp"
#include "workloads/parallel/nvme_swap.hpp"

namespace fl::test {
namespace {

namespace fs = std::filesystem;
using parallel::AioConfig;
using parallel::AioHandle;
using parallel::NvmeConfig;
using parallel::NvmeParamSwapper;
using parallel::SwapReadCheck;

std::vector<char> pattern(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<char> v(n);
  for (char& c : v) c = static_cast<char>(gen() & 0xff);
  return v;
}

std::string dir_for(const char* test) {
  return fresh_test_dir("nvme-swap", test);
}

// 3 whole 4 KiB requests and a 448-byte tail, on a device of 512-byte blocks: as #1070's tensor
// (27 MiB and a last request of 512448 bytes) left 27 MiB in its file.
TEST(NvmeSwap, TheUnalignedTailRequestIsRefusedAndTheFileEndsBeforeIt) {
  const std::string path = dir_for("tail") + "/0_param.tensor.swp";
  const AioHandle aio(AioConfig{4096, 1, 512});
  const auto data = pattern(3 * 4096 + 448, 1);
  const auto done = aio.write(path, data.data(), data.size());
  ASSERT_EQ(done.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(done[i].res, 4096) << i;
  EXPECT_EQ(done[3].res, -EINVAL);
  EXPECT_EQ(done[3].length, 448u);
  EXPECT_EQ(fs::file_size(path), 3u * 4096);
  // Aligned: every request written, the file whole.
  const auto whole = pattern(3 * 4096 + 512, 2);
  const std::string p2 = dir_for("tail") + "/1_param.tensor.swp";
  for (const auto& c : aio.write(p2, whole.data(), whole.size())) EXPECT_GT(c.res, 0);
  EXPECT_EQ(fs::file_size(p2), whole.size());
  std::vector<char> back(whole.size());
  aio.read(p2, back.data(), back.size(), SwapReadCheck::kEqual);
  EXPECT_EQ(back, whole);
}

TEST(NvmeSwapDeathTest, ReadingAShortFileAbortsWithDeepSpeedsLine) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string path = dir_for("short") + "/2_param.tensor.swp";
  const AioHandle aio(AioConfig{4096, 1, 512});
  const auto data = pattern(3 * 4096 + 448, 3);
  aio.write(path, data.data(), data.size());
  std::vector<char> back(data.size());
  // Before 0.16.0: the sizes must be equal (the line itself goes to stdout, before the assert's
  // to stderr; the training test below reads both).
  const std::string old_where = parallel::nvme_config_of("0.3.15", DType::kF16).assert_where;
  EXPECT_DEATH(aio.read(path, back.data(), back.size(), SwapReadCheck::kEqual, old_where),
               "deepspeed_py_aio_handle.cpp:223: .*Assertion .*num_file_bytes' failed");
  // From 0.17.1: the file must hold what is read.
  const std::string new_where = parallel::nvme_config_of("", DType::kF16).assert_where;
  EXPECT_DEATH(aio.read(path, back.data(), back.size(), SwapReadCheck::kWithin, new_where),
               "is_valid_bytes_to_read.*Assertion .*<= num_file_bytes' failed");
  // 0.16.0 to 0.17.0 check nothing: the read returns, the tail is what the buffer held.
  std::fill(back.begin(), back.end(), 0);
  aio.read(path, back.data(), back.size(), SwapReadCheck::kNone);
  EXPECT_TRUE(std::equal(back.begin(), back.begin() + 12288, data.begin()));
  EXPECT_EQ(back.back(), 0);
}

TEST(NvmeSwap, VersionsDecideThePaddingTheCheckAndTheFolder) {
  EXPECT_THROW(parallel::nvme_config_of("0.3.14", DType::kF16), ConfigError);
  const NvmeConfig old = parallel::nvme_config_of("0.3.15", DType::kF16);
  EXPECT_FALSE(old.pad_aligned);
  EXPECT_FALSE(old.clear_folder);
  EXPECT_TRUE(parallel::nvme_config_of("0.6.2", DType::kF16).clear_folder);
  EXPECT_EQ(old.check, SwapReadCheck::kEqual);
  EXPECT_EQ(old.folder, "fp16params");
  const NvmeConfig fixed = parallel::nvme_config_of("0.4.0", DType::kF16);
  EXPECT_TRUE(fixed.pad_aligned);
  EXPECT_EQ(fixed.check, SwapReadCheck::kEqual);
  EXPECT_EQ(parallel::nvme_config_of("0.6.2", DType::kBF16).folder, "bfloat16params");
  EXPECT_EQ(parallel::nvme_config_of("0.16.0", DType::kF16).check, SwapReadCheck::kNone);
  EXPECT_EQ(parallel::nvme_config_of("0.17.1", DType::kF16).check, SwapReadCheck::kWithin);
  const NvmeConfig newest = parallel::nvme_config_of("", DType::kF16);
  EXPECT_TRUE(newest.pad_aligned);
  EXPECT_EQ(newest.check, SwapReadCheck::kWithin);
  EXPECT_EQ(newest.folder, "float16params");
}

// A GPT whose larger weights are pieces of at least 1 MiB (DeepSpeed's min_aio_bytes): width
// `d`, one block.
model::GptConfig wide(int d, int heads) {
  model::GptConfig cfg;
  cfg.d_model = d;
  cfg.heads = heads;
  cfg.layers = 1;
  return cfg;
}

// Rank 1's half of a GPT's 16-bit parameters: a file per piece of 1 MiB or more, padded to 1024
// bytes x threads, the smaller ones in host memory, read back exactly for any range.
TEST(NvmeSwap, PaddedPiecesRoundTripThroughTheirFiles) {
  const model::ParamLayout layout(wide(768, 12), 1, 0, 1, 0);
  const size_t part = (layout.total() + 1) / 2, lo = part, hi = layout.total();
  NvmeConfig c = parallel::nvme_config_of("0.4.0", DType::kF16);
  c.path = dir_for("roundtrip");
  c.rank = 1;
  c.aio.intra_op = 2;
  NvmeParamSwapper swapper(c, layout, lo, hi, DType::kF16);
  const auto data = pattern((hi - lo) * 2, 4);
  swapper.swap_out(data.data());
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(swapper.folder())) {
    ++files;
    EXPECT_EQ(e.file_size() % 2048, 0u) << e.path();
    EXPECT_GE(e.file_size(), 1048576u) << e.path();
  }
  EXPECT_GE(files, 2u);
  size_t kept = 0;
  for (size_t id = 0; id < layout.specs().size(); ++id) {
    const bool in_file = fs::exists(swapper.file_of(id));
    EXPECT_EQ(in_file, swapper.swapped(id)) << layout.specs()[id].name;
    kept += !in_file;
  }
  EXPECT_GT(kept, 0u);  // the layer norms, biases and embeddings
  std::vector<char> back((hi - lo) * 2);
  swapper.swap_in(lo, hi, back.data());
  EXPECT_EQ(back, data);
  swapper.release(-1);
  // A range inside the partition (a group's): its bytes only.
  const size_t a = lo + 7, b = hi - 5;
  std::vector<char> mid((b - a) * 2);
  swapper.swap_in(a, b, mid.data());
  EXPECT_TRUE(std::equal(mid.begin(), mid.end(), data.begin() + 14));
}

// Before 0.4.0 the pieces are written at their own size: one whose bytes are not a multiple of
// the 512-byte block loses its last request (width 1000: qkv's 6000000 bytes keep 5 MiB, the
// projection's 2000000 keep 1 MiB), an aligned one (the MLP's 8000000) is written whole.
TEST(NvmeSwap, UnpaddedPiecesLoseTheirLastRequest) {
  const model::ParamLayout layout(wide(1000, 8), 1, 0, 1, 0);
  NvmeConfig c = parallel::nvme_config_of("0.3.15", DType::kF16);
  c.path = dir_for("unpadded");
  NvmeParamSwapper swapper(c, layout, 0, layout.total(), DType::kF16);
  const auto data = pattern(layout.total() * 2, 5);
  swapper.swap_out(data.data());
  int short_files = 0, whole_files = 0;
  for (size_t id = 0; id < layout.specs().size(); ++id) {
    const size_t bytes = layout.specs()[id].numel() * 2;
    if (bytes < 1048576) {
      EXPECT_FALSE(fs::exists(swapper.file_of(id))) << layout.specs()[id].name;
      continue;
    }
    const auto have = fs::file_size(swapper.file_of(id));
    EXPECT_EQ(have, bytes % 512 == 0 ? bytes : bytes / c.aio.block_size * c.aio.block_size)
        << layout.specs()[id].name;
    short_files += have != bytes;
    whole_files += have == bytes;
  }
  EXPECT_GT(short_files, 0);
  EXPECT_GT(whole_files, 0);
  size_t qkv = 0;
  while (layout.specs()[qkv].name != "h0.attn.qkv.weight") ++qkv;
  EXPECT_EQ(fs::file_size(swapper.file_of(qkv)), 5u * 1048576);
}

// offload_param's buffer pool: each swapped piece read back holds a buffer until its group is
// released; a swap-in needing more than are free is DeepSpeed's assertion.
TEST(NvmeSwap, SwapInsHoldBuffersUntilTheirGroupIsReleased) {
  const model::ParamLayout layout(wide(768, 12), 1, 0, 1, 0);
  NvmeConfig c = parallel::nvme_config_of("", DType::kF16);
  c.path = dir_for("buffers");
  c.buffer_count = 3;
  NvmeParamSwapper swapper(c, layout, 0, layout.total(), DType::kF16);
  const auto data = pattern(layout.total() * 2, 6);
  swapper.swap_out(data.data());
  const int all = swapper.buffers_for(0, layout.total());
  ASSERT_EQ(all, 4);  // the block's qkv, projection and two MLP weights
  std::vector<char> back(layout.total() * 2);
  try {
    swapper.swap_in(0, layout.total(), back.data(), 1);
    ADD_FAILURE() << "four swapped pieces read back with three buffers";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("AssertionError: Not enough buffers 3 for swapping 4"),
              std::string::npos)
        << e.what();
  }
  // Half the partition: two pieces, held by group 1 until it is released.
  size_t fc = 0;
  while (layout.specs()[fc].name != "h0.mlp.fc.weight") ++fc;
  const size_t mid = layout.specs()[fc].offset;
  EXPECT_EQ(swapper.buffers_for(0, mid), 2);
  swapper.swap_in(0, mid, back.data(), 1);
  EXPECT_EQ(swapper.available_buffers(), 1);
  EXPECT_THROW(swapper.swap_in(mid, layout.total(), back.data() + mid * 2, 2), Error);
  swapper.release(1);
  EXPECT_EQ(swapper.available_buffers(), 3);
  swapper.swap_in(mid, layout.total(), back.data() + mid * 2, 2);
  EXPECT_EQ(back, data);
  // A buffer smaller than a swapped piece is refused naming both.
  NvmeConfig small = c;
  small.path = dir_for("small-buffers");
  small.buffer_size = 1000;
  NvmeParamSwapper tight(small, layout, 0, layout.total(), DType::kF16);
  tight.swap_out(data.data());
  EXPECT_THROW(tight.swap_in(0, mid, back.data(), 1), ConfigError);
}

TrainRun train(const std::string& nvme, std::vector<std::string> extra) {
  std::vector<std::string> a = {"--dp",     "2", "--zero",  "3", "--precision", "fp16",
                                "--layers", "1", "--heads", "8", "--d-model",   "1000"};
  if (!nvme.empty()) {
    a.insert(a.end(), {"--offload-param", "nvme", "--nvme-path", nvme});
  }
  a.insert(a.end(), extra.begin(), extra.end());
  return run_train(FAULTLINE_TRAIN, 2, a, 4);
}

std::vector<double> losses(const TrainRun& r) {
  std::vector<double> out;
  for (const auto& s : r.steps) out.push_back(s["loss"].get<double>());
  return out;
}

TEST(NvmeSwap, TrainingThroughTheSwapFilesIsTrainingWithoutThem) {
  const std::string dir = dir_for("train");
  const TrainRun plain = train("", {});
  const TrainRun swapped = train(dir, {"--deepspeed-version", "0.4.0"});
  ASSERT_EQ(plain.proc.exit_code, 0) << plain.proc.output;
  ASSERT_EQ(swapped.proc.exit_code, 0) << swapped.proc.output;
  ASSERT_EQ(plain.steps.size(), 4u);
  EXPECT_EQ(losses(plain), losses(swapped));  // the 16-bit bytes round-trip exactly
  EXPECT_FALSE(fs::is_empty(dir + "/zero_stage_3/fp16params/rank0"));
}

// A prefetch is a collective gather: with a budget larger than a block, rank 0 (whose partition
// holds the first two blocks) lacks the buffers to prefetch the second while rank 1 has them;
// the ranks decide together and train as without NVMe (before, rank 1 prefetched alone and the
// backward's collectives went out of step).
TEST(NvmeSwap, RanksAgreeWhetherToPrefetchAGroupTheyHaveBuffersFor) {
  const std::vector<std::string> shape = {
      "--layers", "4", "--heads", "12", "--d-model", "768", "--zero3-prefetch-bytes", "100000000"};
  std::vector<std::string> nvme = shape;
  nvme.insert(nvme.end(), {"--dp", "2", "--zero", "3", "--precision", "fp16", "--offload-param",
                           "nvme", "--nvme-path", dir_for("prefetch")});
  std::vector<std::string> plain = shape;
  plain.insert(plain.end(), {"--dp", "2", "--zero", "3", "--precision", "fp16"});
  const TrainRun a = run_train(FAULTLINE_TRAIN, 2, nvme, 2);
  const TrainRun b = run_train(FAULTLINE_TRAIN, 2, plain, 2);
  ASSERT_EQ(a.proc.exit_code, 0) << a.proc.output;
  ASSERT_EQ(b.proc.exit_code, 0) << b.proc.output;
  EXPECT_EQ(losses(a), losses(b));
}

TEST(NvmeSwap, DeepSpeed0315AbortsAtTheFirstGatherOfAShortFile) {
  const std::string dir = dir_for("abort");
  const TrainRun r = train(dir, {"--deepspeed-version", "0.3.15"});
  EXPECT_NE(r.proc.exit_code, 0);
  EXPECT_TRUE(r.steps.empty()) << r.proc.output;
  // h0.attn.qkv.weight, ds_id 4 (after wte, wpe and the first layer norm's two).
  EXPECT_NE(r.proc.output.find("4_param.tensor.swp: buffer nbytes != file bytes 6000000 != "
                               "5242880"),
            std::string::npos)
      << r.proc.output;
  EXPECT_NE(r.proc.output.find("Assertion `static_cast<long long int>(buffer.nbytes()) == "
                               "num_file_bytes' failed."),
            std::string::npos)
      << r.proc.output;
  EXPECT_TRUE(fs::is_directory(dir + "/zero_stage_3/fp16params/rank0"));
}

}  // namespace
}  // namespace fl::test
