// The run's one event type (base/event.hpp) from the worker to the history: its two JSON line
// formats byte for byte as the rank files and history.jsonl have them, the one parser (lenient
// for rank files, strict for the history, a torn line an error), the one protobuf conversion,
// and the whole way a worker's event takes: telemetry -> transport -> control plane -> history
// file -> read back, and the tools' view of it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/event.hpp"
#include "base/json_bounded.hpp"
#include "harness/detectors/client.hpp"
#include "harness/history/history.hpp"
#include "harness/history/probe_ingest.hpp"
#include "harness/proto/event_proto.hpp"
#include "tests/support/scratch.hpp"
#include "workloads/telemetry/telemetry.hpp"

namespace fl {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir() {
  return fl::test::fresh_test_dir("event",
                                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

Event sample() {
  Event e;
  e.index = 42;
  e.t_ns = 1234567;
  e.source = "rank";
  e.rank = 3;
  e.seq = 17;
  e.time_unix_ns = 1764037000123456789;
  e.kind = "collective";
  e.step = 5;
  e.data_json = R"({"count":4096,"op":"all_reduce","state":"completed"})";
  return e;
}

void expect_same(const Event& a, const Event& b, bool history_fields) {
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.seq, b.seq);
  EXPECT_EQ(a.time_unix_ns, b.time_unix_ns);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.data_json, b.data_json);
  if (history_fields) {
    EXPECT_EQ(a.index, b.index);
    EXPECT_EQ(a.t_ns, b.t_ns);
    EXPECT_EQ(a.late, b.late);
  }
}

// The bytes a rank's events.jsonl and the history have always had (tools and old runs read them).
TEST(EventLine, RankLineIsTheWorkersFormatAndParsesBack) {
  const Event e = sample();
  const std::string line = to_json_line(e, EventLine::kRank);
  EXPECT_EQ(
      line,
      "{\"rank\":3,\"seq\":17,\"time_unix_ns\":1764037000123456789,\"kind\":\"collective\","
      "\"step\":5,\"data\":{\"count\":4096,\"op\":\"all_reduce\",\"state\":\"completed\"}}\n");
  Event back = parse_json_line(line, EventLine::kRank);
  // The rank format has no source or history stamps: they come back as the defaults.
  EXPECT_EQ(back.source, "");
  EXPECT_EQ(back.index, 0u);
  EXPECT_EQ(back.t_ns, 0);
  EXPECT_FALSE(back.late);
  back.source = e.source;
  expect_same(back, e, false);
}

TEST(EventLine, HistoryLineCarriesTheStampsAndTheLateFlag) {
  Event e = sample();
  const std::string on_time = to_json_line(e, EventLine::kHistory);
  EXPECT_EQ(on_time,
            "{\"i\":42,\"t_ns\":1234567,\"source\":\"rank\",\"rank\":3,\"seq\":17,"
            "\"time_unix_ns\":1764037000123456789,\"kind\":\"collective\",\"step\":5,"
            "\"data\":{\"count\":4096,\"op\":\"all_reduce\",\"state\":\"completed\"}}\n");
  expect_same(parse_json_line(on_time, EventLine::kHistory), e, true);
  e.late = true;
  const std::string late = to_json_line(e, EventLine::kHistory);
  EXPECT_EQ(late.substr(late.size() - 14), ",\"late\":true}\n");
  const Event back = parse_json_line(late, EventLine::kHistory);
  EXPECT_TRUE(back.late);
  expect_same(back, e, true);
  // A rank's file never says late.
  EXPECT_EQ(to_json_line(e, EventLine::kRank).find("late"), std::string::npos);
}

TEST(EventLine, EmptyDataIsAnEmptyObjectAndTextIsEscaped) {
  Event e = sample();
  e.data_json.clear();
  e.source = "detector:my \"tool\"";
  e.kind = "odd\xff";
  const std::string line = to_json_line(e, EventLine::kHistory);
  const auto j = nlohmann::json::parse(line);  // valid JSON, valid UTF-8
  EXPECT_EQ(j["data"], nlohmann::json::object());
  EXPECT_EQ(j["source"], "detector:my \"tool\"");
  EXPECT_EQ(j["kind"], "odd\xef\xbf\xbd");  // the bad byte became U+FFFD
  EXPECT_EQ(parse_json_line(line, EventLine::kHistory).data_json, "{}");
}

TEST(EventLine, TornOrMalformedLinesThrow) {
  const std::string line = to_json_line(sample(), EventLine::kHistory);
  // Text that is not JSON is refused by the bounded parser (base/json_bounded.hpp).
  for (size_t cut : {size_t{1}, size_t{10}, line.size() / 2, line.size() - 2}) {
    EXPECT_THROW(parse_json_line(line.substr(0, cut), EventLine::kHistory), JsonRefused) << cut;
    EXPECT_THROW(parse_json_line(line.substr(0, cut), EventLine::kRank), JsonRefused) << cut;
  }
  // The history needs its envelope; a field of the wrong type is an error in both formats.
  EXPECT_THROW(parse_json_line(R"({"rank":0,"seq":1,"kind":"step","step":0,"data":{}})",
                               EventLine::kHistory),
               nlohmann::json::exception);
  EXPECT_THROW(parse_json_line(R"({"seq":"one","kind":"step"})", EventLine::kRank),
               nlohmann::json::exception);
  EXPECT_THROW(parse_json_line("[1,2]", EventLine::kRank), nlohmann::json::exception);
}

TEST(EventLine, RankLinesTakeWhatTheyFind) {
  // The probe's line: no rank; data as written (the history's check refuses what is not an
  // object).
  const std::string probe = R"({"seq":4,"time_unix_ns":9,"kind":"heartbeat","step":-1,"data":[1]})";
  Event e = parse_json_line(probe, EventLine::kRank);
  EXPECT_EQ(e.rank, -1);
  EXPECT_EQ(e.seq, 4u);
  EXPECT_EQ(e.time_unix_ns, 9);
  EXPECT_EQ(e.kind, "heartbeat");
  EXPECT_EQ(e.data_json, "[1]");
  e = parse_json_line(R"({"kind":"step"})", EventLine::kRank);
  EXPECT_EQ(e.step, -1);
  EXPECT_EQ(e.seq, 0u);
  EXPECT_EQ(e.data_json, "{}");
  // The harness's reading of a rank file: the file's rank, a kind required, a torn line refused.
  harness::HistoryEvent h;
  ASSERT_TRUE(harness::parse_rank_line(R"({"rank":7,"seq":2,"kind":"step","step":1})", 1, h));
  EXPECT_EQ(h.rank, 1);
  EXPECT_EQ(h.source, "rank");
  ASSERT_TRUE(harness::parse_rank_line(probe, 1, h));
  EXPECT_EQ(h.data_json, "{}");  // the probe's reader drops data that is not an object
  EXPECT_FALSE(harness::parse_rank_line(R"({"rank":1,"seq":2,"step":1})", 1, h));
  EXPECT_FALSE(harness::parse_rank_line(R"({"rank":1,"seq":2,"ki)", 1, h));
  EXPECT_FALSE(harness::parse_rank_line(R"({"rank":1,"step":"two","kind":"step"})", 1, h));
}

TEST(EventProto, RoundTripKeepsEveryFieldTheMessageHas) {
  Event e = sample();
  e.late = true;
  std::string wire;
  ASSERT_TRUE(to_proto(e).SerializeToString(&wire));
  faultline::v1::Event p;
  ASSERT_TRUE(p.ParseFromString(wire));
  EXPECT_EQ(p.harness_ns(), e.t_ns);
  const Event back = from_proto(p);
  expect_same(back, e, false);
  EXPECT_EQ(back.t_ns, e.t_ns);
  // The history's index and late flag are not on the wire.
  EXPECT_EQ(back.index, 0u);
  EXPECT_FALSE(back.late);
}

// What a worker sent before the conversion was shared, field by field: the same bytes now.
TEST(EventProto, WorkerEventsKeepTheirWireBytes) {
  Event e = sample();
  e.index = 0;
  e.t_ns = 0;
  faultline::v1::Event old;
  old.set_rank(e.rank);
  old.set_seq(e.seq);
  old.set_time_unix_ns(e.time_unix_ns);
  old.set_kind(e.kind);
  old.set_step(e.step);
  old.set_data_json(e.data_json);
  old.set_source("rank");
  std::string a, b;
  ASSERT_TRUE(old.SerializeToString(&a));
  ASSERT_TRUE(to_proto(e).SerializeToString(&b));
  EXPECT_EQ(a, b);
}

TEST(EventProto, ToolsViewTheSharedEvent) {
  Event e = sample();
  const detect::Event v = detect::view_of(e);
  EXPECT_EQ(v.rank, 3);
  EXPECT_EQ(v.source, "rank");
  EXPECT_EQ(v.kind, "collective");
  EXPECT_EQ(v.step, 5);
  EXPECT_EQ(v.t_ns, 1234567);
  EXPECT_EQ(v.data["count"], 4096);
  e.data_json = "{not json";
  EXPECT_EQ(detect::view_of(e).data, nlohmann::json::object());
}

// A transport that hands its batches to the history as the control plane does (through the
// message), so the whole path is checked without a network.
class ThroughTheWire final : public telemetry::Transport {
 public:
  explicit ThroughTheWire(harness::History& h) : h_(h) {}
  bool send(const std::vector<Event>& batch, uint64_t) override {
    faultline::v1::EventBatch msg;
    for (const Event& e : batch) to_proto(e, msg.add_events());
    std::string wire;
    msg.SerializeToString(&wire);
    faultline::v1::EventBatch got;
    got.ParseFromString(wire);
    for (const auto& p : got.events()) {
      sent.push_back(p);
      h_.append(from_proto(p));
    }
    return true;
  }
  void close() override {}
  std::vector<faultline::v1::Event> sent;

 private:
  harness::History& h_;
};

TEST(EventPath, WorkerFileStreamAndHistoryHoldTheSameEvent) {
  const std::string dir = fresh_dir();
  std::vector<faultline::v1::Event> sent;
  {
    harness::History history(dir + "/history.jsonl");
    history.harness("run_start", {{"ranks", 2}});
    auto t = std::make_unique<ThroughTheWire>(history);
    ThroughTheWire* wire = t.get();
    telemetry::Options o;
    o.events_file = dir + "/events.jsonl";
    o.heartbeat_ms = 0;
    o.transport = std::move(t);
    telemetry::start(1, std::move(o));
    telemetry::emit("step", {{"loss", 2.5}, {"step_time_s", 0.25}}, 7);
    telemetry::stop();
    sent = wire->sent;
  }
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].source(), "rank");
  EXPECT_EQ(sent[0].harness_ns(), 0);  // the worker does not stamp harness time

  std::ifstream in(dir + "/events.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const Event in_file = parse_json_line(line, EventLine::kRank);
  EXPECT_EQ(in_file.rank, 1);
  EXPECT_EQ(in_file.kind, "step");
  EXPECT_EQ(in_file.step, 7);

  const auto events = harness::read_history(dir + "/history.jsonl");
  ASSERT_EQ(events.size(), 2u);
  const Event& h = events[1];
  EXPECT_EQ(h.index, 1u);
  EXPECT_EQ(h.source, "rank");
  EXPECT_FALSE(h.late);
  Event want = in_file;
  want.source = "rank";
  expect_same(h, want, false);
  EXPECT_EQ(nlohmann::json::parse(h.data_json)["loss"], 2.5);
  fs::remove_all(dir);
}

TEST(EventPath, LateEventsAreMarkedInTheHistoryFileAndReadBack) {
  const std::string dir = fresh_dir();
  {
    harness::History history(dir + "/history.jsonl");
    history.harness("run_start", {{"ranks", 1}});
    harness::HistoryEvent e;
    ASSERT_TRUE(harness::parse_rank_line(
        R"({"rank":0,"seq":3,"time_unix_ns":5,"kind":"heartbeat","step":-1,"data":{}})", 0, e));
    e.late = true;
    EXPECT_EQ(history.append(e), 1u);
    history.flush();
  }
  std::ifstream in(dir + "/history.jsonl");
  std::string first, second;
  std::getline(in, first);
  std::getline(in, second);
  EXPECT_NE(second.find(",\"late\":true}"), std::string::npos) << second;
  const auto events = harness::read_history(dir + "/history.jsonl");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_FALSE(events[0].late);
  EXPECT_TRUE(events[1].late);
  EXPECT_EQ(events[1].seq, 3u);
  // A torn last line is skipped; a torn line in the middle is an error naming the file and line.
  { std::ofstream(dir + "/history.jsonl", std::ios::app) << second.substr(0, 20); }
  EXPECT_EQ(harness::read_history(dir + "/history.jsonl").size(), 2u);
  { std::ofstream(dir + "/history.jsonl", std::ios::app) << "\n" << second << "\n"; }
  try {
    harness::read_history(dir + "/history.jsonl");
    ADD_FAILURE() << "a torn line in the middle was accepted";
  } catch (const Error& x) {
    EXPECT_NE(std::string(x.what()).find("history.jsonl:3: malformed history line"),
              std::string::npos)
        << x.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fl
