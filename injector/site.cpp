#include "injector/site.hpp"

// Bounds of the fl_fault_sites section, provided by the linker when at least one site exists.
extern "C" {
extern fl::fault::Site __start_fl_fault_sites[] __attribute__((weak));
extern fl::fault::Site __stop_fl_fault_sites[] __attribute__((weak));
}

namespace fl::fault {

std::atomic<uint32_t> g_armed{0};

namespace {
std::atomic<Handler> g_handler{nullptr};
std::atomic<int> g_rank{-1};
std::atomic<int64_t> g_step{-1};
std::atomic<int> g_node{-1};
thread_local SiteContext t_altered;
}  // namespace

void set_rank(int rank) {
  g_rank.store(rank, std::memory_order_relaxed);
}
int current_rank() {
  return g_rank.load(std::memory_order_relaxed);
}
void set_step(int64_t step) {
  g_step.store(step, std::memory_order_relaxed);
}
int64_t current_step() {
  return g_step.load(std::memory_order_relaxed);
}
void set_node(int node) {
  g_node.store(node, std::memory_order_relaxed);
}
int current_node() {
  return g_node.load(std::memory_order_relaxed);
}

void install_handler(Handler handler) {
  g_handler.store(handler, std::memory_order_release);
  g_armed.store(handler ? 1 : 0, std::memory_order_release);
}

void remove_handler() {
  g_armed.store(0, std::memory_order_release);
  g_handler.store(nullptr, std::memory_order_release);
}

Verdict evaluate_armed(Site& site, SiteContext& ctx) {
  site.evaluated.fetch_add(1, std::memory_order_relaxed);
  Handler h = g_handler.load(std::memory_order_acquire);
  if (!h) return Verdict::kProceed;
  const Verdict v = h(site, ctx);  // the handler counts `fired` when it acts
  if (v == Verdict::kAlter) t_altered = ctx;
  return v;
}

const SiteContext& altered_context() {
  return t_altered;
}

std::vector<Site*> all_sites() {
  std::vector<Site*> out;
  if (__start_fl_fault_sites == nullptr) return out;
  for (Site* s = __start_fl_fault_sites; s < __stop_fl_fault_sites; ++s) out.push_back(s);
  return out;
}

}  // namespace fl::fault
