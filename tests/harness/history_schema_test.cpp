// What a run history accepts (issue 16, items 4 and 5): every event passes a schema check where
// it enters the history and where a history is read back; a malformed one or one with a rank
// outside the world is counted and dropped, never written; text that is not UTF-8 is replaced,
// not thrown on; the report never indexes by a rank it has not checked.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/utf8.hpp"
#include "harness/history/event_schema.hpp"
#include "harness/history/history.hpp"
#include "harness/oracles/oracle.hpp"
#include "harness/report/report.hpp"
#include "tests/support/scratch.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir() {
  return fl::test::fresh_test_dir("hist",
                                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

HistoryEvent rank_event(int rank, const std::string& kind, int64_t step, std::string data) {
  HistoryEvent e;
  e.source = "rank";
  e.rank = rank;
  e.kind = kind;
  e.step = step;
  e.data_json = std::move(data);
  return e;
}

TEST(Utf8, InvalidBytesBecomeReplacementCharacters) {
  EXPECT_TRUE(is_valid_utf8("plain \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));
  EXPECT_EQ(valid_utf8("ok"), "ok");
  EXPECT_EQ(valid_utf8("a\xFF"
                       "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(valid_utf8("\xC3"), "\xEF\xBF\xBD");                                  // truncated
  EXPECT_EQ(valid_utf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // overlong
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(valid_utf8("\xF4\x90\x80\x80").size(), 12u);                          // past U+10FFFF
  // Whatever comes out, nlohmann dumps it.
  EXPECT_NO_THROW(nlohmann::json(valid_utf8("x\xFE\xFF\x80y")).dump());
}

TEST(Utf8, APrefixEndsBetweenCharacters) {
  const std::string s = "ab\xE2\x82\xAC\xF0\x9F\x98\x80";  // a, b, U+20AC, U+1F600
  EXPECT_EQ(utf8_prefix(s, 2), "ab");
  EXPECT_EQ(utf8_prefix(s, 3), "ab");
  EXPECT_EQ(utf8_prefix(s, 4), "ab");
  EXPECT_EQ(utf8_prefix(s, 5), "ab\xE2\x82\xAC");
  EXPECT_EQ(utf8_prefix(s, 8), "ab\xE2\x82\xAC");
  EXPECT_EQ(utf8_prefix(s, 9), s);
  EXPECT_EQ(utf8_prefix(s, 100), s);
  EXPECT_EQ(utf8_prefix(s, 0), "");
}

TEST(EventSchema, RankEventsAreCheckedAgainstTheWorldAndTheirKind) {
  EventContext ctx;
  ctx.live = true;
  auto e = rank_event(0, "step", 1, R"({"loss": 1.0})");
  EXPECT_EQ(check_event(e, ctx).value_or(""), "step: a rank event before run_start");
  EventContext offline;  // a history read back without a run_start: ranks 0-4095
  EXPECT_FALSE(check_event(e, offline));
  auto far = rank_event(4096, "step", 1, "{}");
  EXPECT_EQ(check_event(far, offline).value_or(""),
            "step: rank 4096 is not a rank of the world (allowed 0-4095)");
  HistoryEvent start;
  start.source = "harness";
  start.kind = "run_start";
  start.data_json = R"({"ranks": 2})";
  EXPECT_FALSE(check_event(start, ctx));
  EXPECT_EQ(ctx.world, 2);
  e = rank_event(0, "step", 1, "{\"loss\":\n 1.5}");
  EXPECT_FALSE(check_event(e, ctx));
  EXPECT_EQ(e.data_json, R"({"loss":1.5})") << "re-serialised on one line";
  auto why = [&](HistoryEvent x) { return check_event(x, ctx).value_or("accepted"); };
  EXPECT_EQ(why(rank_event(-3, "step", 1, "{}")),
            "step: rank -3 is not a rank of the world (allowed 0-1)");
  EXPECT_EQ(why(rank_event(2, "heartbeat", -1, "{}")),
            "heartbeat: rank 2 is not a rank of the world (allowed 0-1)");
  EXPECT_EQ(why(rank_event(0, "step", -1, "{}")), "step: step -1 (allowed: 0 or more)");
  EXPECT_EQ(why(rank_event(0, "heartbeat", -7, "{}")), "heartbeat: step -7 (allowed: -1 or more)");
  EXPECT_EQ(why(rank_event(0, "step", 1, "{not json")), "step: data is not JSON");
  EXPECT_EQ(why(rank_event(0, "step", 1, "[1,2]")), "step: data is not a JSON object");
  EXPECT_EQ(why(rank_event(0, "step", 1, R"({"step_time_s": "slow"})")),
            "step: data.step_time_s must be a number");
  EXPECT_EQ(why(rank_event(0, "error", -1, R"({"class": "x"})")), "error: data has no 'message'");
  EXPECT_EQ(why(rank_event(0, "exit", -1, R"({"exit_code": 1.5})")),
            "exit: data.exit_code must be an integer");
  EXPECT_EQ(why(rank_event(0, "bogus", -1, "{}")), "'bogus' is not a kind of rank event");
  EXPECT_EQ(why(rank_event(0, "Step\n", -1, "{}")),
            "kind 'Step\n' is not a word of a-z, 0-9 and '_'");
  HistoryEvent src = rank_event(0, "step", 1, "{}");
  src.source = "harness\xFF";
  EXPECT_EQ(why(src).rfind("unknown source 'harness\xEF\xBF\xBD'", 0), 0u);
  // Bytes that are not UTF-8 inside the data are replaced, and the event kept.
  auto out = rank_event(1, "error", -1, "{\"class\":\"x\",\"message\":\"bad \xFF byte\"}");
  EXPECT_FALSE(check_event(out, ctx));
  EXPECT_NE(out.data_json.find("bad \xEF\xBF\xBD byte"), std::string::npos);
  // A detector's diagnosis names ranks of the world.
  HistoryEvent d;
  d.source = "detector:comm";
  d.kind = "diagnosis";
  d.data_json = R"({"detector":"comm","symptom":"2.1","ranks":[1]})";
  EXPECT_EQ(why(d), "accepted");
  d.data_json = R"({"detector":"comm","symptom":"2.1","ranks":[-5]})";
  EXPECT_EQ(why(d), "diagnosis: data.ranks has -5 (allowed 0-1)");
  d.kind = "step";
  EXPECT_EQ(why(d), "step: a detector sends diagnoses only");
}

TEST(History, MalformedEventsAreCountedAndDroppedNeverWritten) {
  const auto dir = fresh_dir();
  const std::string path = dir + "/history.jsonl";
  {
    History h(path);
    h.harness("run_start", {{"ranks", 2}});
    h.harness("launch", {{"pid", 1}}, 0);
    h.harness("launch", {{"pid", 2}}, 1);
    EXPECT_EQ(h.append(rank_event(0, "step", 0, R"({"loss": 2.0, "step_time_s": 0.1})")), 3u);
    EXPECT_EQ(h.append(rank_event(-3, "step", 1, R"({"loss": 1.0})")), History::kRejected);
    EXPECT_EQ(h.append(rank_event(1, "step", 1, "{\"loss\": 1.0}\n{\"i\":0}")), History::kRejected);
    EXPECT_EQ(h.append(rank_event(7, "error", -1, R"({"class":"x","message":"y"})")),
              History::kRejected);
    // Output that is not UTF-8 (a corrupt file a rank printed) goes in replaced.
    h.harness("output", {{"stream", "stderr"}, {"line", "poison \xFF\xFE here"}}, 1);
    h.append(rank_event(1, "step", 0, R"({"loss": 2.5})"));
    h.harness("run_end", {{"reason", "all ranks ended"}});
    EXPECT_EQ(h.rejected(), 3u);
    ASSERT_EQ(h.rejected_reasons().size(), 3u);
    EXPECT_EQ(h.rejected_reasons()[0], "step: rank -3 is not a rank of the world (allowed 0-1)");
    EXPECT_EQ(h.size(), 7u);
  }
  // Every line of the file is JSON, and reading it back rejects nothing.
  std::ifstream in(path);
  int lines = 0;
  for (std::string l; std::getline(in, l); ++lines) {
    EXPECT_FALSE(nlohmann::json::parse(l, nullptr, false).is_discarded()) << l;
  }
  EXPECT_EQ(lines, 7);
  size_t rejected = 99;
  const auto events = read_history(path, &rejected);
  EXPECT_EQ(rejected, 0u);
  ASSERT_EQ(events.size(), 7u);
  const RunSummary f = summarize(events);
  EXPECT_EQ(f.world, 2);
  ASSERT_EQ(f.steps.size(), 2u);
  ASSERT_EQ(f.lines.size(), 1u);
  EXPECT_EQ(f.lines[0].text, "poison \xEF\xBF\xBD\xEF\xBF\xBD here");
  const Expect x = parse_expect_text("{oracle: error_signature, pattern: poison}");
  EXPECT_EQ(judge(x, events).outcome, "pass");
  fs::remove_all(dir);
}

// A history written by something else is held to the same rules when read back, and the report
// of it renders: a step of rank -3 and a diagnosis of rank -5 are left out, not drawn with a
// colour read from before the palette.
TEST(History, AHandWrittenHistoryWithNegativeRanksIsReadAndReportedSafely) {
  const auto dir = fresh_dir();
  std::ofstream h(dir + "/history.jsonl");
  // The data is spliced in as text, as the harness writes it.
  auto line = [&](int i, const std::string& source, int rank, const std::string& kind, int64_t step,
                  const std::string& data) {
    std::string head =
        nlohmann::json{{"i", i},   {"t_ns", i * 1000000}, {"source", source}, {"rank", rank},
                       {"seq", i}, {"time_unix_ns", 0},   {"kind", kind},     {"step", step}}
            .dump();
    head.pop_back();
    h << head << ",\"data\":" << data << "}\n";
  };
  line(0, "harness", -1, "run_start", -1, R"({"ranks": 2, "run_id": "r"})");
  line(1, "harness", 0, "launch", -1, "{}");
  line(2, "harness", 1, "launch", -1, "{}");
  line(3, "rank", 0, "step", 0, R"({"loss": 2.0})");
  line(4, "rank", -3, "step", 1, R"({"loss": 1.0})");
  line(5, "rank", 1, "step", 1, R"({"loss": "high"})");
  line(6, "detector:x", -1, "diagnosis", -1,
       R"({"detector":"x","symptom":"2.1","ranks":[-5],"evidence":"e"})");
  line(7, "harness", -1, "run_end", -1, "{}");
  h.close();
  size_t rejected = 0;
  const auto events = read_history(dir + "/history.jsonl", &rejected);
  EXPECT_EQ(rejected, 3u);
  EXPECT_EQ(events.size(), 5u);
  std::string html;
  ASSERT_NO_THROW({
    const auto out = write_report(dir);
    std::ifstream r(out);
    html.assign(std::istreambuf_iterator<char>(r), {});
  });
  EXPECT_NE(html.find("data-rank=\"0\""), std::string::npos);
  EXPECT_EQ(html.find("data-rank=\"-3\""), std::string::npos);
  EXPECT_EQ(html.find("data-rank=\"-5\""), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fl::harness
