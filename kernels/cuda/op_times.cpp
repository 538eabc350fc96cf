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

struct Pending {
  const char* op;
  cudaEvent_t start, stop;
  bool closed;  // its stop event is recorded
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
    if (pending_.size() >= kBatch) resolve_locked();
    Pending p{op, nullptr, nullptr, false};
    if (free_.size() >= 2) {
      p.start = free_.back();
      free_.pop_back();
      p.stop = free_.back();
      free_.pop_back();
    } else if (cudaEventCreate(&p.start) != cudaSuccess ||
               cudaEventCreate(&p.stop) != cudaSuccess) {
      return -1;  // no timing rather than a failed op
    }
    if (cudaEventRecord(p.start, nullptr) != cudaSuccess) {
      free_.push_back(p.start);
      free_.push_back(p.stop);
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
    p.closed = cudaEventRecord(p.stop, nullptr) == cudaSuccess;
  }
  void begin_step(long long step) {
    std::lock_guard<std::mutex> lock(mu_);
    if (step == from_) {  // what came before is warm-up: resolve it, then forget it
      resolve_locked();
      totals_.clear();
      steps_ = 0;
    }
    if (step >= from_) ++steps_;
  }
  void flush() {
    std::lock_guard<std::mutex> lock(mu_);
    resolve_locked();
    FILE* f = std::fopen(path_.c_str(), "a");
    if (f == nullptr) return;
    for (const auto& [op, t] : totals_) {
      std::fprintf(
          f, "{\"op\": \"%s\", \"calls\": %lld, \"ms\": %.3f, \"steps\": %lld, \"pid\": %d}\n",
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
  // Sums the closed calls at the front (an op still open, and those after it, wait for the next
  // batch: ids stay valid).
  void resolve_locked() {
    size_t k = 0;
    for (; k < pending_.size() && pending_[k].closed; ++k) {
      const Pending& p = pending_[k];
      float ms = 0;
      if (cudaEventSynchronize(p.stop) == cudaSuccess &&
          cudaEventElapsedTime(&ms, p.start, p.stop) == cudaSuccess) {
        Total& t = totals_[p.op];
        ++t.calls;
        t.ms += ms;
      }
      free_.push_back(p.start);
      free_.push_back(p.stop);
    }
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<long>(k));
    first_id_ += static_cast<long long>(k);
  }

  std::string path_;
  long long from_ = 2;   // the first step counted
  long long steps_ = 0;  // steps counted so far
  std::mutex mu_;
  std::vector<Pending> pending_;  // ids first_id_, first_id_ + 1, ...
  long long first_id_ = 0;
  std::vector<cudaEvent_t> free_;
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
