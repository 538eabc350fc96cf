// fl-detect-logs: a log classifier. Every line a rank prints, and every error a rank reports, is
// matched against known signatures (the first that matches wins), each mapped to a taxonomy
// symptom for training and for serving. It localises to the rank that printed the line.
#include <regex>
#include <vector>

#include <fmt/format.h>

#include "harness/detectors/tool_main.hpp"

using namespace fl::detect;

namespace {

struct Signature {
  const char* name;
  const char* pattern;
  const char* train;  // symptom when the run trains ("" : not a finding there)
  const char* serve;  // ... when it serves
  // Before the first step a timeout or OOM belongs to an earlier stage.
  const char* train_before_first_step = nullptr;
};

const std::vector<Signature>& signatures() {
  static const std::vector<Signature> s = {
      {"build failed",
       R"(building kernel plugin .* failed|error: .* (undeclared|was not declared)|compiler .* not found)",
       "1.1", "5.6"},
      {"import failed",
       R"(cannot load kernel plugin|cannot open shared object file|undefined symbol)", "1.2",
       "5.11"},
      {"no kernel image", R"(no kernel image is available)", "5.7", "5.7"},
      {"fetch failed", R"(cannot fetch artifact|HTTP [45][0-9][0-9])", "1.3", "1.3"},
      {"address in use", R"(address already in use|cannot listen on)", "2.1", "2.1"},
      {"world mismatch",
       R"(world size mismatch|duplicate rank|out of range for world|run id mismatch|config hash mismatch)",
       "2.1", "2.1"},
      {"rank missing", R"(missing: rank|ranks? never joined)", "2.2", "2.2"},
      {"store unreachable",
       R"(cannot reach the rendezvous store|connection refused|connect timed out)", "2.2", "2.2"},
      {"layout too large", R"(model-parallel size .* is larger than)", "2.3", "5.1"},
      {"zero + pp", R"(ZeRO stage [0-9] cannot be combined)", "3.2", "3.2"},
      {"token out of vocab", R"(token id [0-9]+ .*outside)", "3.3", "5.8"},
      {"replicas differ", R"(parameters differ across data-parallel replicas)", "3.5", "3.5"},
      {"format version", R"(format version [0-9]+, this build reads)", "4.12", "4.12"},
      {"other layout", R"(was saved with layout|partitioned tp [0-9]+ x pp [0-9]+)", "4.10", "5.5"},
      {"size mismatch", R"(size mismatch for)", "4.6", "5.8"},
      {"lost latest", R"(no 'latest' file .* although it holds)", "4.5", "4.5"},
      {"missing shard", R"(missing shard|shard .* (does not exist|not found)|No such file)", "3.1",
       "5.5", "3.1"},
      {"corrupt shard", R"(checksum mismatch|truncated|shard .* has [0-9]+ bytes)", "4.10", "5.5"},
      {"disk full", R"(No space left on device|disk full)", "4.2", "5.2"},
      {"oom", R"(out of memory)", "4.2", "5.2", "3.4"},
      {"kernel tail", R"(kernel '.*' of plugin '.*' cannot)", "4.3", "5.1"},
      {"device ordinal", R"(invalid device ordinal|no device)", "4.9", "5.7"},
      {"loss scale", R"(loss scale .*(minimum|gave up)|gradient overflow)", "4.4", "4.4"},
      {"tp diverge", R"(tensor-parallel outputs diverge)", "5.9", "5.9"},
      {"collective mismatch", R"(collective mismatch|called [a-z_]+\(count)", "4.6", "5.1"},
      {"comm timeout", R"(timed out|deadline exceeded|watchdog)", "4.7", "5.1", "2.2"},
      {"killed", R"(Killed|oom-kill|Segmentation fault|core dumped)", "4.8", "5.1"},
  };
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fl-detect-logs: rank output and errors matched against known signatures"};
  bool list = false;
  app.add_flag("--list", list, "Print the signatures and exit");
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--list") {
      for (auto& s : signatures()) {
        std::printf("%-20s train %-5s serve %-5s %s\n", s.name, s.train, s.serve, s.pattern);
      }
      return 0;
    }
  }
  std::vector<std::regex> compiled;
  for (auto& s : signatures()) {
    compiled.emplace_back(s.pattern,
                          std::regex::ECMAScript | std::regex::icase | std::regex::optimize);
  }
  return tool_main(app, argc, argv, "logs", [&](Tool& tool) {
    auto classify = [&](int rank, const std::string& line, int64_t step) {
      const RunView& v = tool.view();
      for (size_t i = 0; i < compiled.size(); ++i) {
        if (!std::regex_search(line, compiled[i])) continue;
        const Signature& s = signatures()[i];
        auto it = v.ranks.find(rank);
        const bool started = it != v.ranks.end() && it->second.last_step >= 0;
        const char* sym = v.workload == "infer"                     ? s.serve
                          : (!started && s.train_before_first_step) ? s.train_before_first_step
                                                                    : s.train;
        Finding f;
        f.symptom = sym;
        f.ranks = {rank};
        f.step = step;
        f.confidence = 0.8;
        f.evidence = fmt::format("rank {} [{}]: {}", rank, s.name, line.substr(0, 300));
        f.key = fmt::format("{}|{}", sym, rank);
        tool.report(f);
        return;
      }
    };
    auto on_event = [&](const Event& e) {
      if (e.rank < 0) return;
      if (e.source == "harness" && e.kind == "output") {
        classify(e.rank, e.data.value("line", ""), tool.view().max_step());
      } else if (e.source == "rank" && e.kind == "error") {
        classify(e.rank, e.data.value("message", ""), e.step);
      }
    };
    tool.run(on_event);
  });
}
