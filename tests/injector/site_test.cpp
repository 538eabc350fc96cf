// Fault sites: listed from the linker section with file:line, not evaluated while disarmed,
// counted and obeyed while armed.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "injector/site.hpp"

namespace fl::fault {
namespace {

int guarded_op(int x, bool* ran) {
  if (FAULTLINE_FAULT_POINT("test.guarded_op", (SiteContext{x, "g", "guarded_op"})) ==
      Verdict::kSkip) {
    return -1;
  }
  *ran = true;
  return x * 2;
}

Site* find_site(const char* name) {
  for (Site* s : all_sites()) {
    if (std::strcmp(s->name, name) == 0) return s;
  }
  return nullptr;
}

Verdict skip_odd(Site& site, SiteContext& ctx) {
  if (ctx.seq % 2 == 1) {
    site.fired.fetch_add(1);
    return Verdict::kSkip;
  }
  return Verdict::kProceed;
}

TEST(FaultSite, ListedWithFileAndLine) {
  Site* s = find_site("test.guarded_op");
  ASSERT_NE(s, nullptr);
  EXPECT_NE(std::string(s->file).find("site_test.cpp"), std::string::npos);
  EXPECT_GT(s->line, 0);
}

TEST(FaultSite, DisarmedSiteIsNotEvaluated) {
  remove_handler();
  Site* s = find_site("test.guarded_op");
  uint64_t before = s->evaluated.load();
  bool ran = false;
  EXPECT_EQ(guarded_op(3, &ran), 6);
  EXPECT_TRUE(ran);
  EXPECT_EQ(s->evaluated.load(), before);
}

TEST(FaultSite, ArmedHandlerDecidesAndIsCounted) {
  install_handler(&skip_odd);
  Site* s = find_site("test.guarded_op");
  uint64_t ev = s->evaluated.load();
  uint64_t fired = s->fired.load();
  bool ran = false;
  EXPECT_EQ(guarded_op(1, &ran), -1);
  EXPECT_FALSE(ran);
  EXPECT_EQ(guarded_op(2, &ran), 4);
  EXPECT_TRUE(ran);
  EXPECT_EQ(s->evaluated.load(), ev + 2);
  EXPECT_EQ(s->fired.load(), fired + 1);
  remove_handler();
}

TEST(FaultSite, RankAndStepAreProcessWide) {
  set_rank(3);
  set_step(41);
  EXPECT_EQ(current_rank(), 3);
  EXPECT_EQ(current_step(), 41);
}

}  // namespace
}  // namespace fl::fault
