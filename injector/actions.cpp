// The table of fault-plan actions (actions.hpp) and the function behind each row.
#include "injector/actions.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "base/counter_rng.hpp"

namespace fl::fault {

namespace {

// Bumped by every arm and disarm; a paused site waits for it to change.
std::atomic<uint64_t> g_plan_generation{0};

Verdict proceed(const Term&, SiteContext&, uint64_t) {
  return Verdict::kProceed;
}
Verdict fail_op(const Term&, SiteContext&, uint64_t) {
  return Verdict::kFail;
}
Verdict skip_op(const Term&, SiteContext&, uint64_t) {
  return Verdict::kSkip;
}
Verdict repeat_op(const Term&, SiteContext&, uint64_t) {
  return Verdict::kRepeat;
}
Verdict defer_op(const Term&, SiteContext&, uint64_t) {
  return Verdict::kDefer;
}

Verdict sleep_ms(const Term& t, SiteContext&, uint64_t) {
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(t.number));
  return Verdict::kProceed;
}

[[noreturn]] Verdict hang_thread(const Term&, SiteContext&, uint64_t) {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

// Until the plan is cleared or replaced (Control clear_faults / arm_faults, or disarm()).
Verdict pause_until_rearmed(const Term&, SiteContext&, uint64_t) {
  const uint64_t g = g_plan_generation.load();
  while (g_plan_generation.load() == g) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return Verdict::kProceed;
}

Verdict raise_signal(const Term& t, SiteContext&, uint64_t) {
  int sig = t.arg.empty() ? SIGSEGV : static_cast<int>(t.number);
  if (sig == 0) sig = SIGSEGV;
  ::kill(::getpid(), sig);
  return Verdict::kProceed;
}

[[noreturn]] Verdict exit_process(const Term& t, SiteContext&, uint64_t) {
  std::_Exit(static_cast<int>(t.number));
}

Verdict leak_bytes(const Term& t, SiteContext&, uint64_t) {
  static std::mutex mu;
  static std::vector<void*> leaks;  // reachable, so leak checkers do not report them
  const size_t bytes = static_cast<size_t>(t.number);
  void* p = std::malloc(bytes);
  if (p) std::memset(p, 0xA5, bytes);  // touched: the pages are really resident
  std::lock_guard lock(mu);
  leaks.push_back(p);
  return Verdict::kProceed;
}

void set_special(SiteContext& ctx, size_t i, float v) {
  switch (ctx.dtype) {
    case DType::kF32:
      static_cast<float*>(ctx.data)[i] = v;
      break;
    case DType::kF16:
      static_cast<uint16_t*>(ctx.data)[i] = float_to_half(v);
      break;
    case DType::kBF16:
      static_cast<uint16_t*>(ctx.data)[i] = float_to_bf16(v);
      break;
    case DType::kF64:
      static_cast<double*>(ctx.data)[i] = v;
      break;
    default:
      break;
  }
}

// `v` into n random elements (n = the argument, default 1).
Verdict set_elements(const Term& t, SiteContext& ctx, uint64_t k, float v) {
  if (!ctx.data || ctx.count == 0) return Verdict::kProceed;
  const size_t n = t.arg.empty() ? 1 : std::min(ctx.count, static_cast<size_t>(t.number));
  for (size_t j = 0; j < n; ++j) set_special(ctx, rng::mix(k + j) % ctx.count, v);
  return Verdict::kProceed;
}
Verdict set_nan(const Term& t, SiteContext& ctx, uint64_t k) {
  return set_elements(t, ctx, k, std::numeric_limits<float>::quiet_NaN());
}
Verdict set_inf(const Term& t, SiteContext& ctx, uint64_t k) {
  return set_elements(t, ctx, k, std::numeric_limits<float>::infinity());
}

Verdict scale_values(const Term& t, SiteContext& ctx, uint64_t) {
  if (ctx.dtype != DType::kF32 || !ctx.data) return Verdict::kProceed;
  for (size_t i = 0; i < ctx.count; ++i) {
    static_cast<float*>(ctx.data)[i] *= static_cast<float>(t.number);
  }
  return Verdict::kProceed;
}

// n random changes (n = the argument, default 1) to the buffer's bytes: `change(byte, r)`.
template <class Change>
Verdict change_bytes(const Term& t, SiteContext& ctx, uint64_t k, Change change) {
  const size_t bytes = ctx.count * dtype_size(ctx.dtype);
  if (!ctx.data || bytes == 0) return Verdict::kProceed;
  auto* b = static_cast<uint8_t*>(ctx.data);
  const size_t n = t.arg.empty() ? 1 : static_cast<size_t>(t.number);
  for (size_t j = 0; j < n; ++j) change(b, bytes, rng::mix(k + j));
  return Verdict::kProceed;
}
Verdict flip_bits(const Term& t, SiteContext& ctx, uint64_t k) {
  return change_bytes(t, ctx, k, [](uint8_t* b, size_t bytes, uint64_t r) {
    b[(r >> 3) % bytes] ^= static_cast<uint8_t>(1u << (r & 7));
  });
}
Verdict corrupt_bytes(const Term& t, SiteContext& ctx, uint64_t k) {
  return change_bytes(t, ctx, k, [](uint8_t* b, size_t bytes, uint64_t r) {
    b[(r >> 8) % bytes] = static_cast<uint8_t>(r & 0xff);
  });
}

Verdict truncate_count(const Term& t, SiteContext& ctx, uint64_t) {
  ctx.count -= std::min(ctx.count, static_cast<size_t>(t.number));
  return Verdict::kAlter;
}
Verdict resize_count(const Term& t, SiteContext& ctx, uint64_t) {
  const auto n = static_cast<int64_t>(ctx.count) + static_cast<int64_t>(t.number);
  ctx.count = n < 0 ? 0 : static_cast<size_t>(n);
  return Verdict::kAlter;
}
Verdict retype_dtype(const Term& t, SiteContext& ctx, uint64_t) {
  ctx.dtype = *parse_dtype(t.arg);
  return Verdict::kAlter;
}

using A = Action;
using Arg = ActionArg;
constexpr const char* kAny = "any site";
constexpr const char* kData = "sites with a buffer (collectives, gradients, kernels, checkpoints)";
constexpr const char* kCalls = "sites around a script's calls (model.forward, optimizer.step, ...)";
constexpr const char* kOps = "collectives and send/recv, data.loader, checkpoint.write";

// One row per action: action, name, argument, where, the function, what it does.
constexpr ActionSpec kTable[] = {
    {A::kOff, "off", Arg::kText, kAny, proceed, "nothing: the term only counts its hits"},
    {A::kError, "error", Arg::kText, kAny, fail_op,
     "the operation fails with the site's own error"},
    {A::kSleep, "sleep", Arg::kNumber, kAny, sleep_ms,
     "waits the argument's milliseconds, then proceeds"},
    {A::kHang, "hang", Arg::kText, kAny, hang_thread, "blocks the thread forever"},
    {A::kPause, "pause", Arg::kText, kAny, pause_until_rearmed,
     "blocks until the plan is cleared or replaced"},
    {A::kCrash, "crash", Arg::kText, kAny, raise_signal,
     "raises the signal given (default SIGSEGV) in the process"},
    {A::kExit, "exit", Arg::kNumber, kAny, exit_process,
     "ends the process at once with the status given"},
    {A::kOom, "oom", Arg::kText, kAny, fail_op,
     "fails like error; memory.alloc raises out-of-memory"},
    {A::kLeak, "leak", Arg::kRequiredNumber, kAny, leak_bytes,
     "allocates and touches that many bytes, never freed"},
    {A::kNan, "nan", Arg::kNumber, kData, set_nan, "NaN into n random elements (default 1)"},
    {A::kInf, "inf", Arg::kNumber, kData, set_inf, "Inf into n random elements (default 1)"},
    {A::kBitflip, "bitflip", Arg::kNumber, kData, flip_bits,
     "flips k random bits of the buffer (default 1)"},
    {A::kScale, "scale", Arg::kNumber, kData, scale_values,
     "multiplies every fp32 element by the argument"},
    {A::kCorrupt, "corrupt", Arg::kNumber, kData, corrupt_bytes,
     "overwrites n random bytes with random values (default 1)"},
    {A::kTruncate, "truncate", Arg::kRequiredNumber, kOps, truncate_count,
     "the operation sees its data that many elements shorter"},
    {A::kDrop, "drop", Arg::kText, kAny, skip_op, "the operation is skipped on this rank"},
    {A::kReorder, "reorder", Arg::kText, kOps, defer_op,
     "the operation runs after the next one of its stream"},
    {A::kResize, "resize", Arg::kRequiredNumber, kOps, resize_count,
     "the operation is issued with n more (or fewer) elements"},
    {A::kRetype, "retype", Arg::kRequiredDtype, kOps, retype_dtype,
     "the operation is issued with another dtype"},
    {A::kDelay, "delay", Arg::kNumber, kAny, sleep_ms,
     "waits the argument's milliseconds, then proceeds"},
    {A::kSkip, "skip", Arg::kText, kCalls, skip_op,
     "the call is not made on this rank (the verdict of drop)"},
    {A::kRepeat, "repeat", Arg::kText, kCalls, repeat_op, "the call is made twice"},
    {A::kDuplicate, "duplicate", Arg::kText, kCalls, repeat_op,
     "a data-loader sample is yielded twice"},
};

constexpr bool in_enum_order() {
  for (size_t i = 0; i < std::size(kTable); ++i) {
    if (static_cast<size_t>(kTable[i].action) != i) return false;
  }
  return true;
}
static_assert(in_enum_order(), "one row per Action, in the enum's order");

}  // namespace

std::span<const ActionSpec> action_table() {
  return kTable;
}

const ActionSpec* find_action(std::string_view name) {
  for (const auto& row : kTable) {
    if (row.name == name) return &row;
  }
  return nullptr;
}

const ActionSpec& action_spec(Action a) {
  return kTable[static_cast<size_t>(a)];
}

void release_paused_sites() {
  g_plan_generation.fetch_add(1);
}

}  // namespace fl::fault
