// ZeRO-Infinity's parameter offload to NVMe as DeepSpeed builds it: each parameter's piece of a
// rank's ZeRO-3 partition (16-bit) lives in a swap file, `<nvme_path>/zero_stage_3/<dtype>params/
// rank<R>/<ds_id>_param.tensor.swp`, written after every update and read back when the group is
// gathered (AsyncPartitionedParameterSwapper), through DeepSpeed's asynchronous I/O handle.
//
// The handle (csrc/aio, deepspeed_aio_common.cpp) opens the file O_DIRECT without O_TRUNC and
// cuts a transfer into block_size requests, the last one holding the remainder (queue_depth of
// them in flight; here they run one after another, which ends a file at the same place); its wait()
// counts completions and never reads an event's result, so a request the kernel refused (O_DIRECT's
// EINVAL for a length or offset that is not a multiple of the device's logical block, ENOSPC on a
// full filesystem) is dropped without a word and the file ends where the last written request
// ended. The read checks the file's size first (pread in deepspeed_py_aio_handle.cpp): before
// 0.16.0 it must equal the buffer's bytes ("buffer nbytes != file bytes", a C assert: the process
// aborts); 0.16.0 (PR 6641) dropped the check, and 0.17.1 (PR 7215) asserts the file holds offset +
// buffer bytes ("file_offset + buffer nbytes > file bytes"). From 0.4.0 (PR 1076) the swap buffer
// of each parameter is padded to a multiple of AIO_ALIGNED_BYTES (1024) x intra-op threads, so
// every request is aligned; before it a piece whose bytes are not a multiple of the logical block
// loses its tail (deepspeedai/DeepSpeed#1070).
//
// O_DIRECT itself is not used: the run's filesystems (tmpfs, overlay) do not all take it. The
// handle writes with pwrite and applies O_DIRECT's rule to each request as the kernel does for a
// device of `sector_bytes` logical blocks: a request whose offset or length is not a multiple
// completes with -EINVAL and writes nothing. A full filesystem's ENOSPC is the kernel's own.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"
#include "workloads/model/params.hpp"

namespace fl::parallel {

// DeepSpeed's "aio" section, and the device under the swap folder.
struct AioConfig {
  size_t block_size = 1048576;  // bytes per request
  int intra_op = 1;             // thread_count (intra_op_parallelism since 0.16.4)
  size_t sector_bytes = 512;    // the device's logical block: O_DIRECT's alignment
};

// What the read checks of the file's size before it reads (DeepSpeed's version decides).
enum class SwapReadCheck {
  kEqual,   // before 0.16.0: buffer bytes == file bytes
  kNone,    // 0.16.0 to 0.17.0: nothing
  kWithin,  // 0.17.1 on: offset + buffer bytes <= file bytes
};

struct NvmeConfig {
  std::string path;  // nvme_path (relative: to the rank's working directory)
  AioConfig aio;
  // Each parameter's swap buffer padded to AIO_ALIGNED_BYTES x intra_op (DeepSpeed 0.4.0 on).
  bool pad_aligned = true;
  // The swap folder emptied at start-up (DeepSpeed 0.6.2 on, PR 1884; before it a reused
  // nvme_path keeps its files, which a write never truncates).
  bool clear_folder = true;
  SwapReadCheck check = SwapReadCheck::kWithin;
  // Where DeepSpeed's size check sits (file:line: function:), for the C assert's line.
  std::string assert_where;
  // The swap folder's dtype part: "fp16" before 0.6.2 (PR 1884), else torch's dtype string
  // ("float16", "bfloat16").
  std::string folder = "float16params";
  int rank = 0;  // the global rank (the folder's rank<R>)
  // offload_param's pool of swap-in buffers (buffer_count of buffer_size elements): a swapped
  // piece read back holds one until its group is released.
  int buffer_count = 5;
  size_t buffer_size = 100000000;
};

// The NvmeConfig of a DeepSpeed version ("" : the newest behaviour) for `precision`.
NvmeConfig nvme_config_of(const std::string& deepspeed_version, DType precision);

// One request's outcome: bytes written, or -errno.
struct AioCompletion {
  size_t offset = 0, length = 0;
  long res = 0;
};

class AioHandle {
 public:
  explicit AioHandle(AioConfig c) : c_(c) {}
  // async_pwrite + wait(): `nbytes` of `buf` to `path` (created, never truncated) in block_size
  // requests. Every request's completion is returned; the handle itself,
  // as DeepSpeed's, does not look at them. A file that cannot be opened throws fl::Error.
  std::vector<AioCompletion> write(const std::string& path, const void* buf, size_t nbytes) const;
  // async_pread + wait(): DeepSpeed's check of the file's size (which aborts the process, as the
  // C assert does, after printing DeepSpeed's line), then the requests; a request past the end
  // of the file reads what is there.
  // `where`: the assert's file:line and function (NvmeConfig::assert_where).
  void read(const std::string& path, void* buf, size_t nbytes, SwapReadCheck check,
            const std::string& where = "") const;

 private:
  AioConfig c_;
};

// The swap files of one rank's ZeRO-3 partition [lo, hi) of `layout`'s flat parameters, stored
// as `t` (16-bit): one file per parameter the partition holds a piece of, when the piece is at
// least min_aio_bytes (max(1 MiB, block_size): DeepSpeed's swappable_tensor); a smaller piece
// stays in host memory, as DeepSpeed keeps such partitions on the CPU. DeepSpeed partitions each
// parameter on its own, faultline's ZeRO the flat vector, so a parameter cut by a partition
// boundary is two pieces on two ranks here.
class NvmeParamSwapper {
 public:
  NvmeParamSwapper(NvmeConfig c, const model::ParamLayout& layout, size_t lo, size_t hi, DType t);
  // swap_out: every piece of `partition` (hi - lo elements of type t, element 0 is lo) to its
  // file, through a host buffer of the piece's (aligned) size.
  void swap_out(const void* partition);
  // swap_in: the pieces holding flat [a, b) (within [lo, hi)) read from their files into `dst`
  // (element 0 is a). Each swapped piece takes a buffer of the pool, held for `group` until
  // release(group); fewer free than needed is DeepSpeed's assertion (AsyncPartitionedParameter-
  // Swapper.swap_in: "Not enough buffers 1 for swapping 4"), and a piece larger than a buffer its
  // own (ConfigError).
  void swap_in(size_t a, size_t b, void* dst, int group = -1);
  // The swapped pieces holding flat [a, b): the buffers a swap-in of that range takes.
  int buffers_for(size_t a, size_t b) const;
  int available_buffers() const { return available_; }
  // The group's buffers back to the pool (its gathered parameters freed).
  void release(int group);
  // The file of the piece of parameter `ds_id` (its index in the layout's specs).
  std::string file_of(size_t ds_id) const;
  const std::string& folder() const { return folder_; }
  // Whether the piece of parameter `ds_id` is in a swap file (false: kept in host memory).
  bool swapped(size_t ds_id) const;

 private:
  struct Piece {
    size_t ds_id, lo, hi;       // flat [lo, hi)
    std::vector<char> in_host;  // a piece under min_aio_bytes: its bytes (not swapped)
    bool swapped = false;
  };
  // The swap buffer's elements for a piece of n (padded under pad_aligned).
  size_t swap_numel(size_t n) const;
  NvmeConfig c_;
  AioHandle aio_;
  DType t_;
  size_t lo_ = 0;  // the partition's first element
  std::string folder_;
  std::vector<Piece> pieces_;
  int available_ = 0;
  std::vector<std::pair<int, int>> held_;  // group -> buffers it holds
};

}  // namespace fl::parallel
