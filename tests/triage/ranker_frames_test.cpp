// Traceback frames as learned evidence (harness/triage/ranker_frames.hpp, stop 53): the frames
// read from Python, C++ and NCCL lines, the same tokens learn_frames.py reads
// (tests/triage/data/frames_fixture.txt), frames.yaml's loader errors, and an inferred stage that
// frames_stage_weight moves, with the frame's line shown as evidence.
#include "harness/triage/ranker_frames.hpp"
#include "harness/triage/triage.hpp"
#include "tests/support/scratch.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace fl::triage {
namespace {

namespace fs = std::filesystem;

std::string tokens(const std::string& line) {
  std::string out;
  for (const auto& t : frame_line_tokens(line)) out += (out.empty() ? "" : " ") + t;
  return out;
}

TEST(TriageRankerFrames, APythonTracebackLineIsItsModuleAndFunction) {
  EXPECT_EQ(tokens("  File \"/opt/conda/lib/python3.10/site-packages/deepspeed/inference/"
                   "engine.py\", line 367, in _apply_injection_policy"),
            "_apply_injection_policy deepspeed.inference.* "
            "deepspeed.inference.engine:_apply_injection_policy ~apply ~deepspeed ~engine "
            "~inference ~injection ~policy");
  EXPECT_EQ(tokens("[2024-01-02 03:04:05,678] [INFO] [comm.py:652:init_distributed] Initializing"),
            "comm:init_distributed init_distributed ~comm ~distributed ~init");
}

TEST(TriageRankerFrames, ACxxFrameIsItsNamespaceAndFunction) {
  EXPECT_EQ(tokens("frame #4: c10d::ProcessGroupNCCL::workCleanupLoop() + 0x11c (0x7f in "
                   "/usr/lib/libtorch_cuda.so)"),
            "c10d.processgroupnccl:workcleanuploop workcleanuploop ~processgroupnccl "
            "~workcleanuploop");
  EXPECT_EQ(tokens("#2 0x00007ffff7a in ncclProxyProgress (proxyState_=0x5) at proxy.cc:880"),
            "ncclproxyprogress proxy: ~ncclproxyprogress ~proxy");
}

TEST(TriageRankerFrames, AnNcclSourceReferenceIsItsFile) {
  EXPECT_EQ(tokens("node1:123:456 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion"),
            "net_ib: ~net");
  EXPECT_EQ(tokens("[E ProcessGroupNCCL.cpp:1234] [Rank 3] Watchdog caught collective operation"),
            "processgroupnccl: ~processgroupnccl");
  EXPECT_EQ(tokens("see #1234 and the docs at example.com for why"), "");
}

// Each `in:` line of the fixture gives the `out:` tokens learn_frames.py gives
// (learn_frames_test.py checks the Python side against the same file).
TEST(TriageRankerFrames, TheBinaryReadsTheFixtureAsLearnFramesDoes) {
  std::ifstream in(std::string(FAULTLINE_SOURCE_DIR) + "/tests/triage/data/frames_fixture.txt");
  ASSERT_TRUE(in);
  std::string line, input;
  size_t cases = 0;
  while (std::getline(in, line)) {
    if (line.rfind("in: ", 0) == 0) input = line.substr(4);
    if (line.rfind("out:", 0) != 0) continue;
    const std::string want = line.size() > 5 ? line.substr(5) : "";
    EXPECT_EQ(tokens(input), want) << input;
    ++cases;
  }
  EXPECT_GE(cases, 15u);
}

// A copy of the shipped ranker folder with `frames` as frames.yaml and `weight` as
// frames_stage_weight.
std::string ranker_dir(const std::string& name, const std::string& frames, double weight) {
  const fs::path dir = ::fl::test::removed_at_exit(
      fs::temp_directory_path() / ("fl_ranker_frames_" + name + std::to_string(::getpid())));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"cues.yaml", "priors.yaml", "words.yaml"})
    fs::copy_file(fs::path(default_ranker_dir()) / f, dir / f);
  std::ifstream in(dir / "cues.yaml");
  std::string cues((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = cues.find("  frames_stage_weight:");
  if (at != std::string::npos)
    cues.replace(at, cues.find('\n', at) - at, "  frames_stage_weight: " + std::to_string(weight));
  std::ofstream(dir / "cues.yaml", std::ios::trunc) << cues;
  std::ofstream(dir / "frames.yaml") << frames;
  return dir.string();
}

std::string load_error(const std::string& frames) {
  try {
    load_tables(default_signature_dir(), default_taxonomy_path(), ranker_dir("bad", frames, 1));
  } catch (const SignatureError& e) {
    return e.what();
  }
  return "";
}

TEST(TriageRankerFrames, TheLoaderNamesTheFileLineAndKey) {
  const std::string head = "issues: 4\nstages: {\"3\": 2, \"4\": 2}\nframe_stages:\n";
  EXPECT_NE(load_error(head + "  \"step\": {\"7\": 2}\n").find("frames.yaml:4:"),
            std::string::npos);
  EXPECT_NE(load_error(head + "  \"step\": {\"7\": 2}\n").find("frame_stages: step: stage '7'"),
            std::string::npos);
  EXPECT_NE(
      load_error(head + "  \"step\": {\"4\": many}\n").find("frame_stages: step: 4: not a number"),
      std::string::npos);
  EXPECT_NE(load_error(head + "  \"Step\": {\"4\": 2}\n").find("'Step' is not a lower-case token"),
            std::string::npos);
  EXPECT_NE(load_error("issues: 4\nstage: {\"4\": 2}\n")
                .find("frames.yaml:2:1: file: unknown key 'stage'"),
            std::string::npos);
  EXPECT_EQ(load_error(head + "  \"step\": {\"4\": 2}\n"), "");
}

// Eight stage-3 failures with frames, four with the made-up function quuxprepare; eight stage-4.
const char* kFrames =
    "issues: 16\n"
    "stages: {\"3\": 8, \"4\": 8}\n"
    "frame_stages:\n"
    "  \"quuxprepare\": {\"3\": 4}\n"
    "  \"quuxmod:quuxprepare\": {\"3\": 4}\n"
    "  \"forward\": {\"3\": 2, \"4\": 6}\n";

TEST(TriageRankerFrames, AFrameLeansTheInferredStageAndIsShownAsEvidence) {
  const std::string text =
      "training does not work on 8 gpus\n"
      "  File \"/home/u/quuxmod.py\", line 9, in quuxprepare\n";
  auto run = [&](double w) {
    const Tables t = load_tables(default_signature_dir(), default_taxonomy_path(),
                                 ranker_dir("lean", kFrames, w));
    return triage(Input{text, false, text.size()}, t);
  };
  const Result off = run(0), on = run(5);
  ASSERT_EQ(off.kind, Result::Kind::kFound);
  ASSERT_EQ(on.kind, Result::Kind::kFound);
  EXPECT_EQ(off.basis, Result::Basis::kInferred);
  EXPECT_EQ(off.stage, 4);
  EXPECT_EQ(on.stage, 3);
  bool shown = false;
  for (const auto& c : on.symptoms)
    for (const auto& e : c.evidence)
      shown |= e.line == 2 && e.signature.find("traceback frames 'quux") != std::string::npos;
  EXPECT_TRUE(shown);
}

}  // namespace
}  // namespace fl::triage
