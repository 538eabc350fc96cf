// The fault-plan grammar (accepts and rejects exactly, with positions) and each in-process
// action's effect at a site, including N* chaining, skip/every, targets and determinism.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "injector/actions.hpp"
#include "injector/plan.hpp"
#include "tests/support/scratch.hpp"

namespace fl::fault {
namespace {

TEST(PlanGrammar, AcceptsAndRoundTrips) {
  const char* cases[] = {
      "comm.all_reduce=drop",
      "comm.all_reduce[rank=2,seq=3]=drop",
      "optimizer.step[step=5-9]=50%nan",
      "comm.send[group=pp,skip=2,every=3]=3*sleep(10)->off",
      "data.fetch=2*delay(5)->error;memory.alloc[rank=1]=oom",
      "checkpoint.write=25%2*corrupt(8)->bitflip(3)",
      "comm.all_gather=scale(0.5)",
      "train.step[micro_batch=1]=crash(6)",
      "x=exit(3)",
      "comm.all_reduce[node=1,eval=4-6]=reorder",
      "comm.broadcast=resize(-3)->retype(fp16)",
      "checkpoint.write[rank=0]=truncate(100)",
      "train.step=pause",
  };
  for (const char* c : cases) {
    Plan p = parse_plan(c);
    EXPECT_EQ(to_string(p), c);
  }
  Plan p = parse_plan(" a [ rank = 1 - 3 ] = 10% 2 * sleep(7) -> drop ; b = hang ");
  ASSERT_EQ(p.entries.size(), 2u);
  EXPECT_EQ(p.entries[0].rank->lo, 1);
  EXPECT_EQ(p.entries[0].rank->hi, 3);
  EXPECT_EQ(*p.entries[0].terms[0].percent, 10.0);
  EXPECT_EQ(*p.entries[0].terms[0].count, 2);
  EXPECT_EQ(p.entries[0].terms[0].number, 7.0);
  EXPECT_EQ(p.entries[0].terms[1].action, Action::kDrop);
  EXPECT_EQ(p.entries[1].terms[0].action, Action::kHang);
}

TEST(PlanGrammar, RejectsWithPositionAndWhatWasExpected) {
  struct Case {
    const char* text;
    const char* message;
  } cases[] = {
      {"=drop", "at column 1: expected a fault site name"},
      {"a", "at column 2: expected '=' after the site name"},
      {"a=slep", "at column 3: expected an action (off, error, sleep"},
      {"a=sleep(ten)", "at column 9: expected a number as the argument of 'sleep'"},
      {"a=sleep(10", "expected ')' closing the argument of 'sleep'"},
      {"a[rank=x]=drop", "at column 8: expected a number or range A-B for 'rank'"},
      {"a[rank=3-1]=drop", "expected a range A-B with A <= B for 'rank'"},
      {"a[color=1]=drop", "at column 3: expected a filter (rank, node, step, seq, micro_batch"},
      {"a=retype(f8)", "at column 10: expected a dtype (fp32, fp16, bf16"},
      {"a=resize", "at column 9: expected '(' and an argument after 'resize'"},
      {"a=truncate", "expected '(' and an argument after 'truncate'"},
      {"a[every=0]=drop", "expected skip >= 0 and every >= 1"},
      {"a=150%drop", "at column 3: expected a percentage between 0 and 100"},
      {"a=5drop", "at column 3: expected '%' or '*' after a number"},
      {"a=drop->", "at column 9: expected an action"},
      {"a=drop b=drop", "at column 8: expected ';' between entries"},
  };
  for (auto& c : cases) {
    try {
      parse_plan(c.text, "FAULTLINE_FAULTS");
      ADD_FAILURE() << "accepted: " << c.text;
    } catch (const PlanError& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos)
          << c.text << " -> " << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("FAULTLINE_FAULTS: ", 0), 0u) << e.what();
    }
  }
}

// Every row of the action table: its name parses to its action and back, and its argument is
// checked as the row says (required, a number, a dtype, or any text).
TEST(ActionTable, EveryRowParsesAndChecksItsArgumentAsItSays) {
  ASSERT_EQ(action_table().size(), 23u);
  std::string names;
  for (const auto& row : action_table()) {
    const std::string n(row.name);
    names += (names.empty() ? "" : ", ") + n;
    EXPECT_EQ(find_action(n), &row);
    EXPECT_EQ(action_name(row.action), row.name);
    EXPECT_FALSE(row.effect.empty()) << n;
    const std::string arg = row.arg == ActionArg::kRequiredDtype ? "(fp16)" : "(3)";
    const Plan p = parse_plan("s=" + n + arg);
    EXPECT_EQ(p.entries[0].terms[0].action, row.action) << n;
    EXPECT_EQ(to_string(p), "s=" + n + arg);
    auto refused = [&](const std::string& text) {
      try {
        parse_plan(text, "t");
      } catch (const PlanError& e) {
        return std::string(e.what());
      }
      return std::string("accepted");
    };
    const bool required =
        row.arg == ActionArg::kRequiredNumber || row.arg == ActionArg::kRequiredDtype;
    EXPECT_EQ(refused("s=" + n), required ? "t: at column " + std::to_string(3 + n.size()) +
                                                ": expected '(' and an argument after '" + n +
                                                "', got the end (in \"s=" + n + "\")"
                                          : "accepted");
    // The argument starts at column 4 + the name's length.
    const std::string bad = refused("s=" + n + "(x)");
    const std::string at = "t: at column " + std::to_string(4 + n.size()) + ": expected ";
    if (row.arg == ActionArg::kNumber || row.arg == ActionArg::kRequiredNumber) {
      EXPECT_EQ(bad.rfind(at + "a number as the argument of '" + n + "'", 0), 0u) << bad;
    } else if (row.arg == ActionArg::kRequiredDtype) {
      EXPECT_EQ(bad.rfind(at + "a dtype (fp32, fp16, bf16, fp64, int32, int64, uint8)", 0), 0u)
          << bad;
    } else {
      EXPECT_EQ(bad, "accepted");
    }
  }
  EXPECT_EQ(names,
            "off, error, sleep, hang, pause, crash, exit, oom, leak, nan, inf, bitflip, scale, "
            "corrupt, truncate, drop, reorder, resize, retype, delay, skip, repeat, duplicate");
  EXPECT_EQ(find_action("slep"), nullptr);
}

// A site as the workloads place them, over a float buffer.
Verdict op(const char* group, int64_t seq, float* data, size_t n) {
  return FAULTLINE_FAULT_POINT("test.op",
                               (SiteContext{seq, group, "op", -1, data, n, DType::kF32, -1}));
}

class PlanActions : public testing::Test {
 protected:
  void SetUp() override {
    set_rank(1);
    set_step(0);
  }
  void TearDown() override { disarm(); }
};

TEST_F(PlanActions, DropSkipsOnlyTheTargetedRankAndSeq) {
  arm(parse_plan("test.op[rank=1,seq=3]=drop"), 0);
  float x = 0;
  for (int64_t s = 0; s < 6; ++s) EXPECT_EQ(op("g", s, &x, 1) == Verdict::kSkip, s == 3) << s;
  set_rank(0);
  EXPECT_EQ(op("g", 3, &x, 1), Verdict::kProceed);
  auto log = fired_log();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].site, "test.op");
  EXPECT_EQ(log[0].rank, 1);
  EXPECT_EQ(log[0].seq, 3);
  EXPECT_EQ(log[0].action, "drop");
}

TEST_F(PlanActions, FrameworkCallActionsSkipRepeatAndDuplicate) {
  // skip: the call is not made (the verdict drop gives); repeat and duplicate: it is made twice;
  // each fires only on its rank and step and is logged under its own name.
  arm(parse_plan("test.op[rank=1,step=2]=skip;test.op[rank=0]=repeat;test.op[rank=2]=1*duplicate"),
      0);
  float x = 0;
  set_step(1);
  EXPECT_EQ(op("g", 0, &x, 1), Verdict::kProceed);
  set_step(2);
  EXPECT_EQ(op("g", 0, &x, 1), Verdict::kSkip);
  set_rank(0);
  EXPECT_EQ(op("g", 0, &x, 1), Verdict::kRepeat);
  set_rank(2);
  EXPECT_EQ(op("g", 0, &x, 1), Verdict::kRepeat);
  EXPECT_EQ(op("g", 1, &x, 1), Verdict::kProceed);  // 1*: once
  auto log = fired_log();
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[0].action, "skip");
  EXPECT_EQ(log[0].step, 2);
  EXPECT_EQ(log[1].action, "repeat");
  EXPECT_EQ(log[2].action, "duplicate");
  EXPECT_EQ(to_string(parse_plan("model.forward[rank=1]=repeat;data.loader=duplicate")),
            "model.forward[rank=1]=repeat;data.loader=duplicate");
}

TEST_F(PlanActions, CountedTermsChainAndSkipEveryFilterHits) {
  arm(parse_plan("test.op[skip=1,every=2]=2*error->drop"), 0);
  float x = 0;
  std::vector<Verdict> got;
  for (int i = 0; i < 8; ++i) got.push_back(op("g", i, &x, 1));
  // hits 0..7: skip hit 0; fire on hits 1, 3, 5, 7: error, error, then drop, drop.
  std::vector<Verdict> want = {Verdict::kProceed, Verdict::kFail,    Verdict::kProceed,
                               Verdict::kFail,    Verdict::kProceed, Verdict::kSkip,
                               Verdict::kProceed, Verdict::kSkip};
  EXPECT_EQ(got, want);
}

TEST_F(PlanActions, GroupAndStepTargets) {
  arm(parse_plan("test.op[group=tp,step=2-3]=error"), 0);
  float x = 0;
  EXPECT_EQ(op("dp", 0, &x, 1), Verdict::kProceed);
  EXPECT_EQ(op("tp", 0, &x, 1), Verdict::kProceed);  // step 0
  set_step(2);
  EXPECT_EQ(op("tp", 0, &x, 1), Verdict::kFail);
  set_step(4);
  EXPECT_EQ(op("tp", 0, &x, 1), Verdict::kProceed);
}

TEST_F(PlanActions, NumericCorruptionsChangeTheData) {
  std::vector<float> v(64, 1.0f);
  arm(parse_plan("test.op=1*nan->1*inf(3)->1*scale(4)->1*bitflip(1)"), 9);
  op("g", 0, v.data(), v.size());
  EXPECT_EQ(std::count_if(v.begin(), v.end(), [](float f) { return std::isnan(f); }), 1);
  op("g", 1, v.data(), v.size());
  const auto infs = std::count_if(v.begin(), v.end(), [](float f) { return std::isinf(f); });
  EXPECT_GE(infs, 1);
  EXPECT_LE(infs, 3);
  std::fill(v.begin(), v.end(), 1.0f);
  op("g", 2, v.data(), v.size());
  EXPECT_EQ(v[17], 4.0f);
  std::vector<float> before = v;
  op("g", 3, v.data(), v.size());
  int bits = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &v[i], 4);
    std::memcpy(&b, &before[i], 4);
    bits += __builtin_popcount(a ^ b);
  }
  EXPECT_EQ(bits, 1);
}

TEST_F(PlanActions, SleepDelaysTheSite) {
  arm(parse_plan("test.op=sleep(30)"), 0);
  float x = 0;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(op("g", 0, &x, 1), Verdict::kProceed);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(30));
}

TEST_F(PlanActions, SameSeedFiresTheSameHitsAndAnotherSeedDoesNot) {
  auto hits = [](uint64_t seed) {
    arm(parse_plan("test.op=30%drop"), seed);
    float x = 0;
    std::vector<int> out;
    for (int i = 0; i < 200; ++i) {
      if (op("g", i, &x, 1) == Verdict::kSkip) out.push_back(i);
    }
    return out;
  };
  auto a = hits(5), b = hits(5), c = hits(6);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_GT(a.size(), 40u);  // ~60 expected of 200
  EXPECT_LT(a.size(), 80u);
}

TEST_F(PlanActions, PauseBlocksUntilThePlanIsCleared) {
  arm(parse_plan("test.op=pause"), 0);
  float x = 0;
  std::atomic<bool> returned{false};
  std::thread t([&] {
    op("g", 0, &x, 1);
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(returned.load());
  disarm();
  t.join();
  EXPECT_TRUE(returned.load());
}

TEST_F(PlanActions, ResizeRetypeTruncateAlterTheContextAndReorderDefers) {
  arm(parse_plan("test.op=1*resize(-2)->1*resize(5)->1*retype(bf16)->1*truncate(3)->1*reorder"), 0);
  std::vector<float> v(8, 1.0f);
  ASSERT_EQ(op("g", 0, v.data(), v.size()), Verdict::kAlter);
  EXPECT_EQ(altered_context().count, 6u);
  EXPECT_EQ(altered_context().dtype, DType::kF32);
  ASSERT_EQ(op("g", 1, v.data(), v.size()), Verdict::kAlter);
  EXPECT_EQ(altered_context().count, 13u);
  ASSERT_EQ(op("g", 2, v.data(), v.size()), Verdict::kAlter);
  EXPECT_EQ(altered_context().count, 8u);
  EXPECT_EQ(altered_context().dtype, DType::kBF16);
  ASSERT_EQ(op("g", 3, v.data(), v.size()), Verdict::kAlter);
  EXPECT_EQ(altered_context().count, 5u);
  EXPECT_EQ(op("g", 4, v.data(), v.size()), Verdict::kDefer);
  EXPECT_EQ(op("g", 5, v.data(), v.size()), Verdict::kProceed);
}

TEST_F(PlanActions, NodeAndEvalTargets) {
  set_node(1);
  arm(parse_plan("test.op[node=1,eval=2]=error;test.op[node=0]=drop"), 0);
  float x = 0;
  std::vector<Verdict> got;
  for (int i = 0; i < 4; ++i) got.push_back(op("g", i, &x, 1));
  EXPECT_EQ(got, (std::vector<Verdict>{Verdict::kProceed, Verdict::kProceed, Verdict::kFail,
                                       Verdict::kProceed}));
  set_node(-1);
}

TEST_F(PlanActions, ReplayPlanFiresExactlyTheLoggedEvaluations) {
  const std::string log = fl::test::removed_at_exit(testing::TempDir() + "/fired-replay." +
                                                    std::to_string(::getpid()) + ".jsonl")
                              .string();
  std::remove(log.c_str());
  auto run = [&](const std::string& plan, uint64_t seed, const std::string& path) {
    arm(parse_plan(plan), seed, path);
    float x = 0;
    std::vector<int> skipped;
    for (int i = 0; i < 300; ++i) {
      set_step(i / 10);
      if (op("g", i, &x, 1) != Verdict::kProceed) skipped.push_back(i);
    }
    return skipped;
  };
  auto original = run("test.op[step=3-20]=20%drop->off;test.op=5%error", 11, log);
  ASSERT_GT(original.size(), 10u);
  const auto records = read_fired_log(log);
  ASSERT_EQ(records.size(), original.size());
  const std::string replay = replay_plan(records);
  EXPECT_EQ(replay.find('%'), std::string::npos) << replay;
  auto again = run(replay, 999, "");  // another seed: the replay has no random choice left
  EXPECT_EQ(again, original);
  auto fired = fired_log();
  ASSERT_EQ(fired.size(), records.size());
  for (size_t i = 0; i < fired.size(); ++i) {
    EXPECT_EQ(fired[i].eval, records[i].eval);
    EXPECT_EQ(fired[i].action, records[i].action);
  }
}

}  // namespace
}  // namespace fl::fault
