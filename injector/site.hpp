// Named fault sites. A site is a static, constant-initialised descriptor placed in its own linker
// section, so every site compiled into a binary can be listed without running it. When nothing is
// armed, a site costs one relaxed atomic load and a predicted-not-taken branch; building with
// FAULTLINE_NO_FAULT_SITES removes sites entirely. The injector (issue 5) installs the handler
// that decides what an armed site does; this file only defines the contract.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "base/dtype.hpp"

namespace fl::fault {

// What the code at the site should do after evaluation.
enum class Verdict : uint8_t {
  kProceed = 0,  // carry on (possibly after the handler delayed, corrupted data, ...)
  kSkip = 1,     // skip the guarded operation on this rank (e.g. drop a collective)
  kFail = 2,     // the operation must fail with the handler's error (already thrown or logged)
  kAlter = 3,    // run the operation with altered_context()'s count / dtype (resize, retype,
                 // truncate): the site copies through a scratch buffer of the new shape
  kDefer = 4,    // run the operation after the next one of the same kind of stream (reorder)
  kRepeat = 5,   // run the operation twice (repeat, duplicate); sites that cannot ignore it
};

// Everything a handler may need to match targets and act on data.
struct SiteContext {
  int64_t seq = -1;        // collective sequence number in `group`, or -1
  std::string_view group;  // comm group name, or empty
  std::string_view op;     // op or sub-operation name
  int peer = -1;           // p2p peer or broadcast root, or -1
  void* data = nullptr;    // buffer the operation works on, when there is one
  size_t count = 0;        // elements in `data`
  DType dtype = DType::kU8;
  int64_t micro_batch = -1;
};

// Sites are found by walking the fl_fault_sites section as an array, so every Site must occupy
// exactly one fixed-size, fixed-alignment slot: the compiler pads static objects of 32 bytes or
// more to 32-byte boundaries, so the slot is made 64 bytes and 64-aligned explicitly.
struct alignas(64) Site {
  const char* name;
  const char* file;
  int line;
  std::atomic<uint64_t> evaluated;
  std::atomic<uint64_t> fired;
};
static_assert(sizeof(Site) == 64);

using Handler = Verdict (*)(Site& site, SiteContext& ctx);

// Non-zero while a handler is installed and armed.
extern std::atomic<uint32_t> g_armed;

// Process-wide identity and progress used by targets (rank, step); set by the worker.
void set_rank(int rank);
int current_rank();
void set_step(int64_t step);
int64_t current_step();
void set_node(int node);
int current_node();

void install_handler(Handler handler);  // also arms
void remove_handler();                  // disarms
Verdict evaluate_armed(Site& site, SiteContext& ctx);
// The context a kAlter verdict asks for (count and dtype changed by the action); per thread,
// valid until the next site evaluation on this thread.
const SiteContext& altered_context();

// Every site linked into this binary, in link order.
std::vector<Site*> all_sites();

}  // namespace fl::fault

#if defined(FAULTLINE_NO_FAULT_SITES)
#define FAULTLINE_FAULT_POINT(site_name, ctx_expr) (::fl::fault::Verdict::kProceed)
#else
// Evaluates the site. `ctx_expr` (a SiteContext) is only built when something is armed.
#define FAULTLINE_FAULT_POINT(site_name, ctx_expr)                                        \
  ([&]() -> ::fl::fault::Verdict {                                                        \
    if (__builtin_expect(::fl::fault::g_armed.load(std::memory_order_relaxed) != 0, 0)) { \
      __attribute__((section("fl_fault_sites"), used)) static ::fl::fault::Site fl_site_{ \
          site_name, __FILE__, __LINE__, {0}, {0}};                                       \
      ::fl::fault::SiteContext fl_ctx_ = ctx_expr;                                        \
      return ::fl::fault::evaluate_armed(fl_site_, fl_ctx_);                              \
    }                                                                                     \
    return ::fl::fault::Verdict::kProceed;                                                \
  }())
#endif
