// ZeRO-Infinity's NVMe parameter swap files and DeepSpeed's asynchronous I/O handle
// (nvme_swap.hpp).
#include "workloads/parallel/nvme_swap.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "kernels/ops.hpp"
#include "kernels/versions.hpp"

namespace fl::parallel {
namespace {

constexpr size_t kAioAlignedBytes = 1024;  // DeepSpeed's AIO_ALIGNED_BYTES
constexpr size_t kMinAioBytes = 1048576;   // DeepSpeed's MIN_AIO_BYTES

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// One request as the kernel completes it under O_DIRECT on a device of `sector` logical blocks:
// an unaligned offset or length is refused whole (-EINVAL); otherwise the filesystem's pwrite
// (a full one stops short or answers -ENOSPC).
long do_request(int fd, const char* data, size_t off, size_t len, size_t sector) {
  if (off % sector != 0 || len % sector != 0) return -EINVAL;
  size_t done = 0;
  while (done < len) {
    const ssize_t w = ::pwrite(fd, data + done, len - done, static_cast<off_t>(off + done));
    if (w < 0) {
      if (errno == EINTR) continue;
      return done > 0 ? static_cast<long>(done) : -errno;
    }
    if (w == 0) break;
    done += static_cast<size_t>(w);
  }
  return static_cast<long>(done);
}

// The size of `path` as stat() reports it (get_file_size); -1 when it cannot be read.
long long file_bytes(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return static_cast<long long>(st.st_size);
}

// DeepSpeed's check failed: its line on stdout, then the C assert's on stderr (glibc's form:
// program, file:line, function, the expression), and the abort.
[[noreturn]] void fail_read_check(const std::string& line, const char* where,
                                  const char* assertion) {
  std::cout << line << std::endl;
  std::fprintf(stderr, "python: %s Assertion `%s' failed.\n", where, assertion);
  std::fflush(stderr);
  std::abort();
}

}  // namespace

NvmeConfig nvme_config_of(const std::string& deepspeed_version, DType precision) {
  const std::string& v = deepspeed_version;
  if (ops::stated_and_older(v, 0, 3, 15)) {
    raise<ConfigError>(
        "workload.zero.offload_param nvme: ZeRO-Infinity's NVMe offload came with DeepSpeed "
        "0.3.15 (workload.versions.deepspeed is {})",
        v);
  }
  NvmeConfig c;
  c.pad_aligned = !ops::stated_and_older(v, 0, 4, 0);
  c.clear_folder = !ops::stated_and_older(v, 0, 6, 2);
  // The read's check and where its assert sat (the line of one release of each range: 0.3.15,
  // 0.9, 0.15.0, 0.17.1): py_lib/deepspeed_py_aio_handle.cpp's pread up to 0.14,
  // deepspeed_py_io_handle.cpp's in 0.15 (PR 6641 dropped the check in 0.16.0), its
  // is_valid_bytes_to_read from 0.17.1 (PR 7215).
  const char* pread =
      ": int deepspeed_aio_handle_t::pread(const at::Tensor&, const char*, bool, bool):";
  if (ops::stated_and_older(v, 0, 9, 0)) {
    c.check = SwapReadCheck::kEqual;
    c.assert_where =
        std::string("deepspeed/ops/csrc/aio/py_lib/deepspeed_py_aio_handle.cpp:223") + pread;
  } else if (ops::stated_and_older(v, 0, 15, 0)) {
    c.check = SwapReadCheck::kEqual;
    c.assert_where =
        std::string("deepspeed/ops/csrc/aio/py_lib/deepspeed_py_aio_handle.cpp:228") + pread;
  } else if (ops::stated_and_older(v, 0, 16, 0)) {
    c.check = SwapReadCheck::kEqual;
    c.assert_where =
        "deepspeed/ops/csrc/aio/py_lib/deepspeed_py_io_handle.cpp:232: int "
        "deepspeed_io_handle_t::pread(const at::Tensor&, const char*, bool, bool):";
  } else if (ops::stated_and_older(v, 0, 17, 1)) {
    c.check = SwapReadCheck::kNone;
  } else {
    c.assert_where =
        "deepspeed/ops/csrc/aio/py_lib/deepspeed_py_io_handle.cpp:33: bool "
        "is_valid_bytes_to_read(const char*, int64_t, int64_t):";
  }
  const bool bf16 = precision == DType::kBF16;
  if (ops::stated_and_older(v, 0, 6, 2)) {
    c.folder = "fp16params";
  } else {
    c.folder = bf16 ? "bfloat16params" : "float16params";
  }
  return c;
}

std::vector<AioCompletion> AioHandle::write(const std::string& path, const void* buf,
                                            size_t nbytes) const {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT, 0600));
  if (fd.get() < 0) {
    raise<Error>("{}: open for write failed: {}", path, std::strerror(errno));
  }
  const auto* data = static_cast<const char*>(buf);
  const size_t block = std::max<size_t>(1, c_.block_size);
  std::vector<AioCompletion> done;
  // The requests run in submission order; the file's end is the furthest request that wrote,
  // whatever failed before it.
  for (size_t off = 0; off < nbytes; off += block) {
    const size_t len = std::min(block, nbytes - off);
    done.push_back({off, len, do_request(fd.get(), data + off, off, len, c_.sector_bytes)});
  }
  return done;
}

void AioHandle::read(const std::string& path, void* buf, size_t nbytes, SwapReadCheck check,
                     const std::string& where_) const {
  const char* where = where_.c_str();
  const long long have = file_bytes(path);
  const auto want = static_cast<long long>(nbytes);
  if (check == SwapReadCheck::kEqual && have != want) {
    fail_read_check(fmt::format("{}: buffer nbytes != file bytes {} != {}", path, want, have),
                    where, "static_cast<long long int>(buffer.nbytes()) == num_file_bytes");
  }
  if (check == SwapReadCheck::kWithin && want > have) {
    fail_read_check(
        fmt::format("{}: file_offset + buffer nbytes > file bytes {} > {}", path, want, have),
        where, "(file_offset + num_bytes_to_read) <= num_file_bytes");
  }
  Fd fd(::open(path.c_str(), O_RDONLY));
  if (fd.get() < 0) raise<Error>("{}: open for read failed: {}", path, std::strerror(errno));
  auto* data = static_cast<char*>(buf);
  size_t off = 0;
  while (off < nbytes) {
    const ssize_t r = ::pread(fd.get(), data + off, nbytes - off, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;  // past the end: the buffer keeps what it held
    off += static_cast<size_t>(r);
  }
}

NvmeParamSwapper::NvmeParamSwapper(NvmeConfig c, const model::ParamLayout& layout, size_t lo,
                                   size_t hi, DType t)
    : c_(std::move(c)), aio_(c_.aio), t_(t), lo_(lo) {
  namespace fs = std::filesystem;
  folder_ =
      (fs::path(c_.path) / "zero_stage_3" / c_.folder / fmt::format("rank{}", c_.rank)).string();
  // As the swapper's constructor: the folder made (and from 0.6.2 emptied first).
  std::error_code ec;
  if (c_.clear_folder) fs::remove_all(folder_, ec);
  fs::create_directories(folder_, ec);
  if (ec) raise<Error>("cannot create the NVMe swap folder {}: {}", folder_, ec.message());
  available_ = c_.buffer_count;
  // DeepSpeed's min_aio_bytes: max(MIN_AIO_BYTES, block_size).
  const size_t min_aio_bytes = std::max<size_t>(kMinAioBytes, c_.aio.block_size);
  const auto& specs = layout.specs();
  for (size_t i = 0; i < specs.size(); ++i) {
    const size_t a = std::max(lo, specs[i].offset);
    const size_t b = std::min(hi, specs[i].offset + specs[i].numel());
    if (a >= b) continue;
    Piece p{i, a, b, {}, (b - a) * dtype_size(t) >= min_aio_bytes};
    if (!p.swapped) p.in_host.resize((b - a) * dtype_size(t));
    pieces_.push_back(std::move(p));
  }
}

bool NvmeParamSwapper::swapped(size_t ds_id) const {
  for (const Piece& p : pieces_) {
    if (p.ds_id == ds_id) return p.swapped;
  }
  return false;
}

size_t NvmeParamSwapper::swap_numel(size_t n) const {
  if (!c_.pad_aligned) return n;
  const size_t align =
      kAioAlignedBytes * static_cast<size_t>(std::max(1, c_.aio.intra_op)) / dtype_size(t_);
  return (n + align - 1) / align * align;
}

std::string NvmeParamSwapper::file_of(size_t ds_id) const {
  return (std::filesystem::path(folder_) / fmt::format("{}_param.tensor.swp", ds_id)).string();
}

void NvmeParamSwapper::swap_out(const void* partition) {
  const size_t es = dtype_size(t_);
  std::vector<char> host;
  for (Piece& p : pieces_) {
    const size_t n = p.hi - p.lo;
    const char* src = static_cast<const char*>(partition) + (p.lo - lo_) * es;
    if (!p.swapped) {
      ops::to_host(p.in_host.data(), src, n * es);
      continue;
    }
    host.assign(swap_numel(n) * es, 0);
    ops::to_host(host.data(), src, n * es);
    aio_.write(file_of(p.ds_id), host.data(), host.size());
  }
}

int NvmeParamSwapper::buffers_for(size_t a, size_t b) const {
  int n = 0;
  for (const Piece& p : pieces_) n += p.swapped && std::max(a, p.lo) < std::min(b, p.hi);
  return n;
}

void NvmeParamSwapper::release(int group) {
  for (auto it = held_.begin(); it != held_.end();) {
    if (it->first == group) {
      available_ += it->second;
      it = held_.erase(it);
    } else {
      ++it;
    }
  }
}

void NvmeParamSwapper::swap_in(size_t a, size_t b, void* dst, int group) {
  for (const Piece& p : pieces_) {
    if (p.swapped && std::max(a, p.lo) < std::min(b, p.hi) &&
        swap_numel(p.hi - p.lo) > c_.buffer_size) {
      raise<ConfigError>(
          "offload_param.buffer_size {} is smaller than the swapped partition of parameter {} "
          "({} elements; allowed: buffer_size at least the largest swapped partition)",
          c_.buffer_size, p.ds_id, swap_numel(p.hi - p.lo));
    }
  }
  const int need = buffers_for(a, b);
  if (need > available_) {
    raise<Error>(
        "AssertionError: Not enough buffers {} for swapping {} (offload_param's "
        "buffer_count {}; the others are held by gathered parameters)",
        available_, need, c_.buffer_count);
  }
  available_ -= need;
  if (need > 0) held_.emplace_back(group, need);
  const size_t es = dtype_size(t_);
  std::vector<char> host;
  for (const Piece& p : pieces_) {
    const size_t from = std::max(a, p.lo), to = std::min(b, p.hi);
    if (from >= to) continue;
    const char* bytes = p.in_host.data();
    if (p.swapped) {
      host.assign(swap_numel(p.hi - p.lo) * es, 0);
      aio_.read(file_of(p.ds_id), host.data(), host.size(), c_.check, c_.assert_where);
      bytes = host.data();
    }
    ops::from_host(static_cast<char*>(dst) + (from - a) * es, bytes + (from - p.lo) * es,
                   (to - from) * es);
  }
}

}  // namespace fl::parallel
