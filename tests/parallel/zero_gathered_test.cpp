// ZeRO-3's placeholders against PyTorch: what model.state_dict() lists on a rank outside a gather
// (every parameter torch.Size([0]), as after deepspeed.zero.Init), and the error a plain
// model.load_state_dict gives then, in both directions (a full checkpoint into the placeholders,
// and a checkpoint saved from the placeholders into a full model). The expected strings were
// printed by torch 1.13 (/usr/bin/python3) for an nn.Linear whose .data was set to
// torch.empty(0), as partition_parameters.py does.
#include <gtest/gtest.h>

#include "base/error.hpp"
#include "workloads/model/state_dict.hpp"
#include "workloads/parallel/zero_gathered.hpp"

namespace fl::parallel {
namespace {

// vocab 8, d_model 4, one layer, 2 heads, seq_len 4.
model::GptConfig tiny() {
  return model::GptConfig{8, 4, 1, 2, 4, 1};
}

std::string error_of(const std::vector<model::TensorKey>& module,
                     const std::vector<model::TensorKey>& ckpt) {
  try {
    model::load_state_dict(module, ckpt, true);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ZeroPlaceholders, OutsideAGatherEveryStage3ParameterIsSizeZeroWithItsName) {
  const auto full = model::gpt_state_dict(tiny());
  const auto placeholders = module_state_dict(full, 3, false);
  ASSERT_EQ(placeholders.size(), full.size());
  for (size_t i = 0; i < full.size(); ++i) {
    EXPECT_EQ(placeholders[i].name, full[i].name);
    EXPECT_EQ(model::torch_size(placeholders[i].shape), "torch.Size([0])");
  }
}

TEST(ZeroPlaceholders, InsideAGatherAndBelowStage3TheShapesAreWhole) {
  const auto full = model::gpt_state_dict(tiny());
  EXPECT_EQ(module_state_dict(full, 3, true), full);
  for (int stage = 0; stage < 3; ++stage) EXPECT_EQ(module_state_dict(full, stage, false), full);
}

TEST(ZeroPlaceholders, APlainLoadIntoThemFailsOnEveryKeyWithPyTorchsSizeMismatch) {
  const auto full = model::gpt_state_dict(tiny());
  const std::string err = error_of(module_state_dict(full, 3, false), full);
  EXPECT_EQ(err.rfind("Error(s) in loading state_dict for GPT:\n\tsize mismatch for wte.weight: "
                      "copying a param with shape torch.Size([8, 4]) from checkpoint, the shape "
                      "in current model is torch.Size([0]).\n\tsize mismatch for wpe.weight: "
                      "copying a param with shape torch.Size([4, 4]) from checkpoint, the shape "
                      "in current model is torch.Size([0]).",
                      0),
            0u)
      << err;
  size_t n = 0;
  for (size_t at = 0; (at = err.find("\tsize mismatch for ", at)) != std::string::npos; ++at) ++n;
  EXPECT_EQ(n, full.size());
  EXPECT_EQ(error_of(module_state_dict(full, 3, true), full), "(no error)");
}

TEST(ZeroPlaceholders, ACheckpointSavedFromThemDoesNotLoadIntoAFullModel) {
  const auto full = model::gpt_state_dict(tiny());
  const std::string err = error_of(full, module_state_dict(full, 3, false));
  EXPECT_NE(err.find("\tsize mismatch for ln_f.bias: copying a param with shape torch.Size([0]) "
                     "from checkpoint, the shape in current model is torch.Size([4])."),
            std::string::npos)
      << err;
}

}  // namespace
}  // namespace fl::parallel
