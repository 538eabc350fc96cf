#include "base/file_read.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "base/error.hpp"

namespace fl {

namespace {

const char* type_name(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "not a plain file";
}

}  // namespace

FileFd::~FileFd() {
  if (fd_ >= 0) ::close(fd_);
}

FileFd& FileFd::operator=(FileFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

FileFd open_regular_file(const std::string& path, std::string* why) {
  // O_NONBLOCK: open() of a FIFO returns at once instead of waiting for a writer; a regular
  // file ignores the flag, so reads stay as they were.
  FileFd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (!fd) {
    if (why != nullptr) *why = std::strerror(errno);
    return fd;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    if (why != nullptr) *why = std::strerror(errno);
    return FileFd();
  }
  if (!S_ISREG(st.st_mode)) {
    if (why != nullptr) *why = fmt::format("not a regular file ({})", type_name(st.st_mode));
    { const FileFd closed = std::move(fd); }  // before errno is set: close() may change it
    errno = EINVAL;
    return FileFd();
  }
  return fd;
}

std::string read_regular_file(const std::string& path, uint64_t max_bytes) {
  std::string why;
  const FileFd fd = open_regular_file(path, &why);
  if (!fd) raise<Error>("{}: {}", path, why);
  std::string out;
  char chunk[65536];
  for (;;) {
    const ssize_t got = ::read(fd.get(), chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) raise<Error>("{}: cannot read: {}", path, std::strerror(errno));
    if (got == 0) return out;
    if (out.size() + static_cast<uint64_t>(got) > max_bytes) {
      raise<Error>("{}: longer than {} bytes (the most this reader takes)", path, max_bytes);
    }
    out.append(chunk, static_cast<size_t>(got));
  }
}

bool LineReader::fill(int fd) {
  if (pos_ > 0 && pos_ >= buf_.size() / 2) {  // drop what was returned before growing
    buf_.erase(0, pos_);
    base_ += pos_;
    pos_ = 0;
  }
  char chunk[65536];
  for (;;) {
    const ssize_t got = ::pread(fd, chunk, sizeof chunk, static_cast<off_t>(base_ + buf_.size()));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    buf_.append(chunk, static_cast<size_t>(got));
    return true;
  }
}

LineReader::Got LineReader::next(int fd, std::string* line) {
  size_t scanned = pos_;  // bytes before this in the current line hold no newline
  for (;;) {
    const size_t nl = buf_.find('\n', scanned);
    if (nl == std::string::npos) {
      scanned = buf_.size();
    }
    if (skipping_) {
      // The rest of a line already reported: drop it up to its newline.
      if (nl != std::string::npos) {
        pos_ = scanned = nl + 1;
        skipping_ = false;
        continue;
      }
      pos_ = buf_.size();
      if (!fill(fd)) return Got::kEnd;
      scanned = pos_;
      continue;
    }
    if (nl != std::string::npos) {
      const size_t len = nl - pos_;
      const size_t start = pos_;
      pos_ = nl + 1;
      ++line_number_;
      if (len > max_line_) return Got::kTooLong;
      line->assign(buf_, start, len);
      return Got::kLine;
    }
    if (buf_.size() - pos_ > max_line_) {
      // Over the cap with no newline yet: report it now, skip the rest as it comes.
      pos_ = buf_.size();
      skipping_ = true;
      ++line_number_;
      return Got::kTooLong;
    }
    const size_t before = pos_;
    if (!fill(fd)) return Got::kEnd;
    scanned -= before - pos_;  // fill() may have moved the buffer's start
  }
}

}  // namespace fl
