// FAULTLINE_CUDA_OP_TIMES (op_times.hpp): pairs of CUDA events per op call, resolved into per-op
// sums in batches (so that the events in flight stay few) and written at exit.
#include "kernels/cuda/op_times.hpp"

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <unistd.h>

#include "base/settings.hpp"

namespace fl::cuda {

FAULTLINE_SETTING(kCudaOpTimes, std::string, "FAULTLINE_CUDA_OP_TIMES", "",
                  "A file to which each process on a CUDA device appends, at exit, the GPU time of "
                  "each fl::ops op (CUDA events around every call; one JSON line per op). Empty: "
                  "no timing");
FAULTLINE_SETTING(kCudaOpTimesFrom, int64_t, "FAULTLINE_CUDA_OP_TIMES_FROM", 2,
                  "The first training step FAULTLINE_CUDA_OP_TIMES counts (the steps before it "
                  "hold cuBLAS's loading and the allocator's growth)");

namespace {

// A CUDA call whose failure only costs a measurement: its error is taken off CUDA's last error
// (a sticky error stays), or the next kernel's launch check would report it as its own.
bool ok(cudaError_t e) {
  if (e == cudaSuccess) return true;
  cudaGetLastError();
  return false;
}

struct Pending {
  enum State { kOpen, kClosed, kAbandoned };  // kClosed: its stop event is recorded
  const char* op;
  int device;
  cudaEvent_t start, stop;
  State state;
};

struct Total {
  long long calls = 0;
  double ms = 0;
};

class OpTimes {
 public:
  static OpTimes& get() {
    static OpTimes* t = new OpTimes();  // never destroyed: flushed by atexit while CUDA lives
    return *t;
  }
  bool enabled() const { return !path_.empty(); }

  // An id for end(), or -1 when this call goes untimed.
  long long begin(const char* op) {
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_.size() >= kBatch) resolve_locked(false);
    Pending p{op, 0, nullptr, nullptr, Pending::kOpen};
    if (!ok(cudaGetDevice(&p.device))) return -1;
    auto& free = free_[p.device];  // events belong to the device they were made on
    if (free.size() >= 2) {
      p.start = free.back();
      free.pop_back();
      p.stop = free.back();
      free.pop_back();
    } else if (!ok(cudaEventCreate(&p.start))) {
      return -1;  // no timing rather than a failed op
    } else if (!ok(cudaEventCreate(&p.stop))) {
      free.push_back(p.start);
      return -1;
    }
    if (!ok(cudaEventRecord(p.start, nullptr))) {
      release(p);
      return -1;
    }
    pending_.push_back(p);
    return first_id_ + static_cast<long long>(pending_.size()) - 1;
  }
  void end(long long id) {
    std::lock_guard<std::mutex> lock(mu_);
    const long long i = id - first_id_;
    if (i < 0 || i >= static_cast<long long>(pending_.size())) return;
    Pending& p = pending_[static_cast<size_t>(i)];
    p.state = ok(cudaEventRecord(p.stop, nullptr)) ? Pending::kClosed : Pending::kAbandoned;
  }
  void begin_step(long long step) {
    std::lock_guard<std::mutex> lock(mu_);
    // The first step counted (step from_, or the first one after it that runs: a resumed run, a
    // skipped step): what came before is warm-up, resolved and forgotten.
    if (!started_ && step >= from_) {
      resolve_locked(true);
      totals_.clear();
      started_ = true;
    }
    if (started_) ++steps_;
  }
  void flush() {
    std::lock_guard<std::mutex> lock(mu_);
    resolve_locked(true);
    if (totals_.empty()) return;  // no op ran on a CUDA device (or none in the counted steps)
    FILE* f = std::fopen(path_.c_str(), "a");
    if (f == nullptr) return;
    for (const auto& [op, t] : totals_) {
      std::fprintf(
          f, "{\"op\": \"%s\", \"calls\": %lld, \"ms\": %.6f, \"steps\": %lld, \"pid\": %d}\n",
          op.c_str(), t.calls, t.ms, steps_, static_cast<int>(::getpid()));
    }
    std::fclose(f);
  }

 private:
  static constexpr size_t kBatch = 4096;

  OpTimes() {
    path_ = kCudaOpTimes.get();
    if (!path_.empty()) {
      from_ = kCudaOpTimesFrom.get();
      std::atexit([] { OpTimes::get().flush(); });
    }
  }
  void release(const Pending& p) {
    free_[p.device].push_back(p.start);
    free_[p.device].push_back(p.stop);
  }
  // Sums the finished calls at the front, in order: an op still open (and those after it) waits
  // for a later pass, so ids stay valid. `wait`: block on each stop event; otherwise stop at the
  // first one the GPU has not reached (no host stall every kBatch ops).
  void resolve_locked(bool wait) {
    size_t k = 0;
    for (; k < pending_.size() && pending_[k].state != Pending::kOpen; ++k) {
      const Pending& p = pending_[k];
      if (p.state == Pending::kClosed) {
        if (!wait) {
          const cudaError_t q = cudaEventQuery(p.stop);
          if (q == cudaErrorNotReady) {  // not an error, but clear it as one to be sure
            cudaGetLastError();
            break;
          }
          ok(q);
        }
        float ms = 0;
        if ((!wait || ok(cudaEventSynchronize(p.stop))) &&
            ok(cudaEventElapsedTime(&ms, p.start, p.stop))) {
          Total& t = totals_[p.op];
          ++t.calls;
          t.ms += ms;
        }
      }
      release(p);  // an abandoned call's events are reused, its time not counted
    }
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<long>(k));
    first_id_ += static_cast<long long>(k);
  }

  std::string path_;
  long long from_ = 2;    // the first step counted
  bool started_ = false;  // a step >= from_ has begun
  long long steps_ = 0;   // steps counted so far
  std::mutex mu_;
  std::vector<Pending> pending_;  // ids first_id_, first_id_ + 1, ...
  long long first_id_ = 0;
  std::map<int, std::vector<cudaEvent_t>> free_;  // by device
  std::map<std::string, Total> totals_;
};

}  // namespace

bool op_times_enabled() {
  return OpTimes::get().enabled();
}

void op_times_begin_step(long long step) {
  if (OpTimes::get().enabled()) OpTimes::get().begin_step(step);
}

OpTimeScope::OpTimeScope(const char* op) {
  if (OpTimes::get().enabled()) id_ = OpTimes::get().begin(op);
}

OpTimeScope::~OpTimeScope() {
  if (id_ >= 0) OpTimes::get().end(id_);
}

}  // namespace fl::cuda
