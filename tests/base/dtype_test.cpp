// fp16 / bf16 storage: exact round-to-nearest-even and range, checked against known bit patterns
// and, for fp16, exhaustively against the round trip of every 16-bit value.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "base/ranks.hpp"
#include "base/settings.hpp"

namespace fl {
namespace {

TEST(Half, KnownValues) {
  EXPECT_EQ(float_to_half(0.0f), 0x0000);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);          // largest finite
  EXPECT_EQ(float_to_half(6.103515625e-05f), 0x0400);  // smallest normal
  EXPECT_EQ(float_to_half(5.9604645e-08f), 0x0001);    // smallest subnormal
  EXPECT_EQ(half_to_float(0x0001), 5.9604644775390625e-08f);
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
}

TEST(Half, OverflowsToInfinityAbove65504LikeAGpu) {
  EXPECT_EQ(float_to_half(65519.0f), 0x7bff);  // rounds down to 65504
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // halfway rounds to even: inf
  EXPECT_EQ(float_to_half(1e6f), 0x7c00);
  EXPECT_EQ(float_to_half(-1e6f), 0xfc00);
  EXPECT_TRUE(std::isinf(half_to_float(float_to_half(70000.0f))));
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Half, RoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties go to the even mantissa (1.0).
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3*2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9 (even).
  EXPECT_EQ(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);
  // Subnormal ties: 2^-25 (half of the smallest subnormal) rounds to zero, 3*2^-25 to 2*2^-24.
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(float_to_half(3 * std::ldexp(1.0f, -25)), 0x0002);
}

TEST(Half, EveryFiniteValueRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint16_t bits = static_cast<uint16_t>(h);
    if ((bits & 0x7c00) == 0x7c00 && (bits & 0x3ff)) continue;  // nan payloads
    ASSERT_EQ(float_to_half(half_to_float(bits)), bits) << std::hex << h;
  }
}

TEST(BFloat16, RoundingAndRange) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  // bf16 keeps fp32's range: no overflow at 1e30.
  EXPECT_FALSE(std::isinf(bf16_to_float(float_to_bf16(1e30f))));
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  for (uint32_t b = 0; b < 0x10000; ++b) {
    uint16_t bits = static_cast<uint16_t>(b);
    if ((bits & 0x7f80) == 0x7f80 && (bits & 0x7f)) continue;
    ASSERT_EQ(float_to_bf16(bf16_to_float(bits)), bits) << std::hex << b;
  }
}

TEST(DType, NamesParseBack) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64, DType::kU8}) {
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  }
  EXPECT_EQ(parse_dtype("float16"), DType::kF16);
  EXPECT_FALSE(parse_dtype("fp8").has_value());
}

TEST(Ranks, FormatsRangesLikePeopleWriteThem) {
  EXPECT_EQ(format_ranks({3}), "rank 3");
  EXPECT_EQ(format_ranks({2, 0, 1}), "ranks 0-2");
  EXPECT_EQ(format_ranks({0, 2, 5, 6, 7}), "ranks 0,2,5-7");
}

TEST(Settings, ParseErrorsNameTheVariableAndWhatIsAllowed) {
  try {
    parse_setting<bool>("FAULTLINE_X", "maybe");
    FAIL();
  } catch (const SettingError& e) {
    EXPECT_STREQ(e.what(),
                 "FAULTLINE_X='maybe' is not a boolean (allowed: 1/0, true/false, yes/no, on/off)");
  }
  EXPECT_THROW(parse_setting<int64_t>("FAULTLINE_N", "12x"), SettingError);
  EXPECT_EQ(parse_setting<int64_t>("FAULTLINE_N", "-12"), -12);
  EXPECT_TRUE(parse_setting<bool>("FAULTLINE_B", "ON"));
}

TEST(Settings, RegistryListsDeclaredSettingsWithCurrentValues) {
  static Setting<int64_t> s("FAULTLINE_TEST_ONLY_SETTING", 7, "test");
  s.set(9);
  bool found = false;
  for (auto& info : SettingsRegistry::instance().all()) {
    if (info.env == "FAULTLINE_TEST_ONLY_SETTING") {
      found = true;
      EXPECT_EQ(info.default_value, "7");
      EXPECT_EQ(info.current(), "9");
      EXPECT_EQ(info.type, "int");
    }
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace fl
