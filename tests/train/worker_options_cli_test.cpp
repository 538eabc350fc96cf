// A worker declares a scenario-visible option once (workloads/runtime/options.hpp): the CLI11
// option it parses and the description the build hands the harness come from that one call.
#include <gtest/gtest.h>

#include "workloads/runtime/options.hpp"

namespace fl::worker {
namespace {

struct Knobs {
  int64_t bucket = 0;
  float lr = 0.01f;
  bool init = true, drop_last = false;
  std::string precision = "fp32";
  std::vector<std::string> plugins;
};

void declare(Options& o, Knobs& k) {
  o.section("workload.zero", "ZeRO knobs");
  o.add("workload.zero.reduce_bucket_size", "--reduce-bucket-size", k.bucket, "Bucket bytes")
      .range(0, 1e12);
  o.add("workload.lr", "--lr", k.lr, "Peak learning rate").range(0, 10);
  o.add_flag("workload.zero.init", "!--no-zero-init", k.init, "Partitioned init");
  o.add_flag("workload.data.drop_last", "--drop-last", k.drop_last, "Drop the tail");
  o.add("workload.precision", "--precision", k.precision, "Precision")
      .choices({"fp32", "fp16", "bf16"});
  o.add("workload.plugins", "--plugin", k.plugins, "Plugins");
}

int parse(CLI::App& app, std::vector<std::string> args) {
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector in reverse order
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return e.get_exit_code();
  }
  return 0;
}

TEST(WorkerOptionsCliTest, TheDescriptionCarriesTypeDefaultRangeChoicesAndFlags) {
  CLI::App app;
  Options o(app);
  Knobs k;
  declare(o, k);
  const auto d = o.describe();
  ASSERT_EQ(d.size(), 7u);
  EXPECT_EQ(d[0].dump(), R"({"help":"ZeRO knobs","key":"workload.zero","type":"section"})");
  EXPECT_EQ(d[1].dump(),
            R"({"always":false,"default":"0","flag":"--reduce-bucket-size","flag_only":false,)"
            R"("help":"Bucket bytes","key":"workload.zero.reduce_bucket_size","negation":"",)"
            R"("range":[0.0,1000000000000.0],"scenario_default":"0","type":"int"})");
  EXPECT_EQ(d[2]["default"], "0.01");
  EXPECT_EQ(d[2]["type"], "float");
  EXPECT_EQ(d[3]["flag"], "");
  EXPECT_EQ(d[3]["negation"], "--no-zero-init");
  EXPECT_EQ(d[3]["default"], "true");
  EXPECT_EQ(d[4]["flag"], "--drop-last");
  EXPECT_EQ(d[5]["choices"].dump(), R"(["fp32","fp16","bf16"])");
  EXPECT_EQ(d[6]["type"], "list");
  EXPECT_EQ(d[6]["default"], "[]");
}

TEST(WorkerOptionsCliTest, TheDeclaredOptionParsesAndChecksWhatItSays) {
  CLI::App app;
  Options o(app);
  Knobs k;
  declare(o, k);
  EXPECT_EQ(parse(app, {"--reduce-bucket-size", "4096", "--no-zero-init", "--drop-last", "--plugin",
                        "a", "--plugin", "b", "--precision", "bf16"}),
            0);
  EXPECT_EQ(k.bucket, 4096);
  EXPECT_FALSE(k.init);
  EXPECT_TRUE(k.drop_last);
  EXPECT_EQ(k.plugins, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(k.precision, "bf16");
  CLI::App app2;
  Options o2(app2);
  Knobs k2;
  declare(o2, k2);
  EXPECT_NE(parse(app2, {"--reduce-bucket-size", "-5"}), 0);
  CLI::App app3;
  Options o3(app3);
  Knobs k3;
  declare(o3, k3);
  EXPECT_NE(parse(app3, {"--precision", "fp8"}), 0);
}

}  // namespace
}  // namespace fl::worker
