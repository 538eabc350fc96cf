// Wire format of the rendezvous store. A frame is a little-endian u32 length followed by that many
// bytes: one command or status byte, then fields (strings as u32 length + bytes, integers as i64).
// A connection's first frame is kAuth with the run's secret; the server reads nothing else before
// it, and closes a connection whose first frame is not that without answering.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"

namespace fl::rdzv {

enum class Command : uint8_t {
  kSet = 1,
  kGet = 2,         // key, timeout_ms: waits for the key
  kWait = 3,        // n, keys..., timeout_ms
  kAdd = 4,         // key, delta -> new value
  kCompareSet = 5,  // key, expected, desired -> value after the call
  kCheck = 6,       // n, keys... -> 1 if all exist
  kDelete = 7,      // key -> 1 if it existed
  kNumKeys = 8,
  kAuth = 9,  // secret: the first frame of every connection -> ok, or the connection is closed
};

enum class Status : uint8_t { kOk = 0, kTimeout = 1, kError = 2 };

// The largest reply a client accepts (the server bounds requests by FAULTLINE_STORE_MAX_MESSAGE).
constexpr uint32_t kMaxFrame = 64u << 20;
// The largest first frame (kAuth) the server reads: a secret is 64 hex digits.
constexpr uint32_t kMaxAuthFrame = 512;

class ProtocolError : public Error {
 public:
  using Error::Error;
};

class Writer {
 public:
  explicit Writer(uint8_t head) {
    buf_.resize(4);
    buf_.push_back(static_cast<char>(head));
  }
  Writer& str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    buf_.insert(buf_.end(), s.begin(), s.end());
    return *this;
  }
  Writer& i64(int64_t v) {
    char b[8];
    std::memcpy(b, &v, 8);
    buf_.insert(buf_.end(), b, b + 8);
    return *this;
  }
  // Returns the frame with its length prefix filled in.
  std::string finish() {
    uint32_t n = static_cast<uint32_t>(buf_.size() - 4);
    std::memcpy(buf_.data(), &n, 4);
    return std::string(buf_.begin(), buf_.end());
  }

 private:
  void u32(uint32_t v) {
    char b[4];
    std::memcpy(b, &v, 4);
    buf_.insert(buf_.end(), b, b + 4);
  }
  std::vector<char> buf_;
};

class Reader {
 public:
  explicit Reader(std::string_view body) : body_(body) {}
  uint8_t head() {
    need(1);
    return static_cast<uint8_t>(body_[pos_++]);
  }
  std::string str() {
    need(4);
    uint32_t n;
    std::memcpy(&n, body_.data() + pos_, 4);
    pos_ += 4;
    need(n);
    std::string s(body_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  int64_t i64() {
    need(8);
    int64_t v;
    std::memcpy(&v, body_.data() + pos_, 8);
    pos_ += 8;
    return v;
  }

 private:
  void need(size_t n) {
    if (pos_ + n > body_.size()) {
      throw ProtocolError("rendezvous store: truncated frame (" + std::to_string(body_.size()) +
                          " bytes, field at " + std::to_string(pos_) + " needs " +
                          std::to_string(n) + ")");
    }
  }
  std::string_view body_;
  size_t pos_ = 0;
};

}  // namespace fl::rdzv
