// fl-train: the training worker. Starts like every worker (worker::Runtime: options, world,
// telemetry, plugins), builds the DP × TP × PP groups, trains the GPT on the synthetic corpus and
// prints one line per step from rank 0 (loss, grad norm, lr, loss scale, step time, tokens/s,
// memory). --metrics writes every step as JSON lines (with the step's phases by the host's clock);
// --checksum prints each rank's parameter checksum. Each option a scenario sets names its key here
// (train_options.cpp's declarations).
#include <xxhash.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "workloads/rendezvous/artifacts.hpp"
#include "workloads/runtime/runtime.hpp"
#include "workloads/telemetry/telemetry.hpp"
#include "workloads/train/checkpoint.hpp"
#include "workloads/train/memory_report.hpp"
#include "workloads/train/train_options.hpp"
#include "workloads/train/trainer.hpp"

namespace {

using namespace fl;

// One line per step on rank 0 (and its JSON line under --metrics); a step event from every rank.
train::MetricsSink step_printer(bool printer, std::ofstream& metrics) {
  return [printer, &metrics](const train::StepMetrics& m) {
    nlohmann::json d = {{"loss", m.loss},
                        {"grad_norm", m.grad_norm},
                        {"lr", m.lr},
                        {"loss_scale", m.loss_scale},
                        {"skipped", m.skipped},
                        {"step_time_s", m.step_time_s},
                        {"interval_s", m.interval_s},
                        {"comm_s", m.comm_s},
                        {"tokens_per_s", m.tokens_per_s},
                        {"mem_current", m.mem_current},
                        {"mem_peak", m.mem_peak}};
    if (m.eval_loss) d["eval_loss"] = *m.eval_loss;
    if (m.comm_op_s) d["comm_ops_s"] = *m.comm_op_s;
    // The step's parts, [name, start_s, dur_s] from its start, for `faultline trace`.
    nlohmann::json phases = nlohmann::json::array();
    for (const auto& p : m.phases) phases.push_back({p.name, p.start_s, p.dur_s});
    d["phases"] = phases;
    d["reported_after_s"] = m.reported_after_s;
    telemetry::emit("step", d, m.step);
    if (!printer) return;
    std::printf("  %5lld %10.6f %9.4f %9.2e %10.0f %8.1f %9.0f %10.2f %10.2f%s%s\n",
                static_cast<long long>(m.step), m.loss, m.grad_norm, m.lr, m.loss_scale,
                m.step_time_s * 1e3, m.tokens_per_s, m.mem_current / 1048576.0,
                m.mem_peak / 1048576.0, m.skipped ? "  (skipped: overflow)" : "",
                m.eval_loss ? fmt::format("  eval {:.6f}", *m.eval_loss).c_str() : "");
    std::fflush(stdout);
    if (!metrics.is_open()) return;
    nlohmann::json j = {{"step", m.step},
                        {"epoch", m.epoch},
                        {"loss", m.loss},
                        {"grad_norm", m.grad_norm},
                        {"lr", m.lr},
                        {"loss_scale", m.loss_scale},
                        {"skipped", m.skipped},
                        {"skipped_total", m.skipped_total},
                        {"step_time_s", m.step_time_s},
                        {"tokens_per_s", m.tokens_per_s},
                        {"mem_current", m.mem_current},
                        {"mem_peak", m.mem_peak}};
    if (m.eval_loss) j["eval_loss"] = *m.eval_loss;
    // The communicator operations that ended since the previous step's report.
    if (m.comm_op_s) j["comm_ops"] = m.comm_op_s->size();
    j["phases"] = std::move(phases);  // [name, start_s, dur_s] by the host's clock
    metrics << j.dump() << '\n';
    metrics.flush();
  };
}

// The layout event, and rank 0's header: the model, the world and the columns that follow.
void announce(const train::TrainArgs& a, const std::string& model_name,
              const worker::Runtime::World& w, const parallel::Topology& topo,
              const train::Trainer& trainer) {
  const auto& cfg = a.cfg;
  telemetry::emit("layout", {{"dp", cfg.layout.dp},
                             {"tp", cfg.layout.tp},
                             {"pp", cfg.layout.pp},
                             {"zero", cfg.layout.zero},
                             {"dp_rank", topo.dp_rank},
                             {"tp_rank", topo.tp_rank},
                             {"pp_rank", topo.pp_rank},
                             {"steps", trainer.planned_steps()},
                             {"micro_batch", cfg.micro_batch},
                             {"grad_accum", cfg.grad_accum},
                             {"precision", a.precision},
                             {"cpu_ms", comm::process_cpu_ms()},
                             {"world_cpu_ms", w.b.world_cpu_ms}});
  if (w.b.comm->rank() != 0) return;
  // "bf16 (bf16 GEMMs)" where the rank's GEMMs run on tensor cores.
  const std::string precision_note =
      trainer.gemm_precision() == DType::kF32
          ? a.precision
          : fmt::format("{} ({} GEMMs)", a.precision, dtype_name(trainer.gemm_precision()));
  std::printf(
      "# gpt %s: vocab %d, d_model %d, layers %d, heads %d, seq %d | world %d = dp %d "
      "x tp %d x pp %d, zero %d, %s, micro-batch %d x %d, schedule %s, %s, %s backend\n",
      model_name.c_str(), cfg.model.vocab, cfg.model.d_model, cfg.model.layers, cfg.model.heads,
      cfg.model.seq_len, w.b.comm->size(), cfg.layout.dp, cfg.layout.tp, cfg.layout.pp,
      cfg.layout.zero, precision_note.c_str(), cfg.micro_batch, cfg.grad_accum,
      cfg.schedule.c_str(), w.b.compute.str().c_str(), w.b.comm->backend().data());
  std::printf("# %5s %10s %9s %9s %10s %8s %9s %10s %10s\n", "step", "loss", "gnorm", "lr", "scale",
              "ms", "tok/s", "mem MiB", "peak MiB");
}

// --checksum: every rank's parameter digest, printed and reported.
void print_checksum(train::Trainer& trainer, const worker::Runtime::World& w,
                    const parallel::Topology& topo) {
  auto p = trainer.full_parameters();
  auto h = XXH64(p.data(), p.size() * sizeof(float), 0);
  std::printf("checksum rank %d (dp %d tp %d pp %d): %016llx\n", w.b.comm->rank(), topo.dp_rank,
              topo.tp_rank, topo.pp_rank, static_cast<unsigned long long>(h));
  telemetry::emit("output", {{"what", "parameters"},
                             {"digest", fmt::format("{:016x}", static_cast<unsigned long long>(h))},
                             {"group", "all"}});
  std::fflush(stdout);
}

// workload.tokenizer: the tokenizer is built on every rank before the model (Megatron's
// build_tokenizer); its vocabulary, padded as the structure says, sizes the embedding, and the
// data keeps the vocabulary it was preprocessed with (the model preset's, or --data-vocab).
void use_tokenizer(train::TrainArgs& a, int world, bool printer) {
  if (a.tokenizer.type == "none") return;
  auto& cfg = a.cfg;
  if (printer) std::printf("> building %s tokenizer ...\n", a.tokenizer.type.c_str());
  const train::Tokenizer tok = train::build_tokenizer(a.tokenizer);
  if (cfg.data_vocab == 0) cfg.data_vocab = cfg.model.vocab;
  cfg.model.vocab = tok.vocab;
  // The layout check before the world formed saw the preset's vocabulary: the tokenizer's must
  // pass it too (an explicit padded_vocab below it, vocab-parallel shards) before it is printed.
  model::Layout layout = cfg.layout;
  layout.world = world;
  model::validate(cfg.model, layout);
  if (!printer) return;
  const int padded = model::padded_vocab(cfg.model, cfg.layout.tp);
  std::printf(" > padded vocab (size: %d) with %d dummy tokens (new size: %d)\n", tok.vocab,
              padded - tok.vocab, padded);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  worker::Runtime rt{"faultline GPT training worker"};
  train::TrainArgs a;
  train::declare_train_options(rt, a);
  if (auto rc = rt.parse(argc, argv)) return *rc;
  auto& cfg = a.cfg;
  train::finish_train_options(rt, a);
  auto trainer_checks = [&](const model::Layout& l) { train::validate_before_world(cfg, l); };
  if (auto rc = rt.check_layout(cfg.model, cfg.layout, trainer_checks)) return *rc;  // validate
  // The tokenizer's arguments too: its vocabulary replaces the preset's after the world forms.
  const auto& t = a.tokenizer;
  const std::string hash = fmt::format(
      "gpt:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}", cfg.model.vocab, cfg.model.d_model,
      cfg.model.layers, cfg.model.heads, cfg.model.seq_len, cfg.layout.dp, cfg.layout.tp,
      cfg.layout.pp, cfg.layout.zero, a.precision, cfg.micro_batch, t.type, t.vocab_file,
      t.merge_file, t.tokenizer_model, t.vocab_size);
  auto on_fetch = [&](const std::string& name, const std::string& path) {
    if (name == "tokenizer.json") cfg.data_vocab = rdzv::tokenizer_vocab(path);
  };
  return rt.run(hash, on_fetch, [&](worker::Runtime::World& w) {
    // The run's sections (setup, eval, checkpoint) as the probe sends a job's.
    auto section = [](const char* name, bool begin) {
      telemetry::emit("section", {{"name", name}, {"state", begin ? "begin" : "end"}});
    };
    section("setup", true);
    use_tokenizer(a, w.b.comm->size(), w.b.comm->rank() == 0);
    auto topo = parallel::build_topology(*w.b.comm, cfg.layout, cfg.model);
    if (!a.auto_resume.empty() && cfg.resume.empty()) {
      std::string note;
      cfg.resume = train::auto_resume_target(a.auto_resume, a.resume_scan, note);
      if (w.b.comm->rank() == 0) std::printf("# %s\n", note.c_str());
      telemetry::emit("warning", {{"what", "auto_resume"}, {"message", note}});
    }
    train::Trainer trainer(cfg, topo, w.acct);
    announce(a, rt.model_name(), w, topo, trainer);
    const bool printer = w.b.comm->rank() == 0;
    std::ofstream metrics;
    if (printer && !a.metrics_path.empty()) metrics.open(a.metrics_path);
    trainer.set_metrics_sink(step_printer(printer, metrics));
    trainer.set_section_sink(section);
    section("setup", false);
    auto history = trainer.run();
    if (a.checksum) print_checksum(trainer, w, topo);
    if (a.memory_report) {
      train::print_memory_report(
          *w.b.comm, w.acct, MemoryAccountant::host(),
          {trainer.zero().largest_bucket_bytes(), trainer.zero().largest_gather_bytes()});
    }
    if (printer) std::printf("# done: %zu steps\n", history.size());
    return 0;
  });
}
