// Reading files that another process may have put in place: a run's history, a rank's event
// files, a checkpoint manifest. Each is opened without blocking (a FIFO planted in place of
// history.jsonl hung `verdict`, `report`, `trace` and `fl-ckpt` in open(), issue 32) and refused
// unless it is a regular file; its lines are read with a length cap, so one line without a
// newline never makes the reader hold more than the cap.
#pragma once

#include <cstdint>
#include <string>

namespace fl {

// An open descriptor, closed when it goes.
class FileFd {
 public:
  explicit FileFd(int fd = -1) : fd_(fd) {}
  ~FileFd();
  FileFd(FileFd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  FileFd& operator=(FileFd&& o) noexcept;
  FileFd(const FileFd&) = delete;
  FileFd& operator=(const FileFd&) = delete;
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_;
};

// Opens `path` read-only without waiting on a FIFO's writer. An empty FileFd with *why set when
// it cannot be opened (strerror; errno as open() left it, ENOENT for a file not there), or is not
// a regular file ("not a regular file (a FIFO)"; errno EINVAL); *why names the file's type, not
// its path, so the caller can put the path in front.
FileFd open_regular_file(const std::string& path, std::string* why);

// The whole of the regular file `path`; raises fl::Error "PATH: not a regular file (a FIFO)",
// "PATH: cannot read: ..." or "PATH: N bytes (allowed: up to MAX)".
std::string read_regular_file(const std::string& path, uint64_t max_bytes);

// The lines of a file, from a byte offset on, each at most `max_line` bytes: a longer line is
// reported once and skipped up to its newline, never held whole. The reader keeps its place
// between calls, so a file that grows (a rank's probe.jsonl) is read on where it was left; an
// incomplete last line (a writer half-way through it) stays unread until its newline arrives.
class LineReader {
 public:
  explicit LineReader(size_t max_line) : max_line_(max_line) {}
  enum class Got { kLine, kTooLong, kEnd };
  // The next complete line of `fd` (without its '\n') in *line; kTooLong for a line over the cap
  // (counted once, its bytes skipped); kEnd when no complete line is left for now.
  Got next(int fd, std::string* line);
  // The number of the line last returned (kLine or kTooLong), from 1 at the reader's start.
  uint64_t line_number() const { return line_number_; }
  // The file offset just past the last line (or skipped bytes) returned.
  uint64_t offset() const { return base_ + pos_; }
  // Bytes read past offset() that do not end in a newline yet (a torn last line at the end).
  size_t pending() const { return buf_.size() - pos_; }
  std::string pending_text() const { return buf_.substr(pos_); }

 private:
  bool fill(int fd);  // reads one more chunk; false at the end of the file

  size_t max_line_;
  std::string buf_;
  uint64_t base_ = 0;      // file offset of buf_[0]
  size_t pos_ = 0;         // start of the next line in buf_
  bool skipping_ = false;  // inside a line already reported as too long
  uint64_t line_number_ = 0;
};

}  // namespace fl
