#include "workloads/comm/pickle.hpp"

#include <bit>
#include <cstdint>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace fl::comm {

namespace {

// Opcodes of pickle protocol 2 (Python's Lib/pickletools.py documents each one).
constexpr char kProto = '\x80';
constexpr char kStop = '.';
constexpr char kNone = 'N';
constexpr char kTrue = '\x88';
constexpr char kFalse = '\x89';
constexpr char kBinInt1 = 'K';     // uint8
constexpr char kBinInt2 = 'M';     // uint16, little-endian
constexpr char kBinInt = 'J';      // int32, little-endian
constexpr char kLong1 = '\x8a';    // n bytes of two's complement, little-endian
constexpr char kBinFloat = 'G';    // IEEE double, big-endian
constexpr char kBinUnicode = 'X';  // uint32 length + UTF-8
constexpr char kEmptyDict = '}';
constexpr char kEmptyList = ']';
constexpr char kEmptyTuple = ')';
constexpr char kMark = '(';
constexpr char kSetItems = 'u';
constexpr char kAppends = 'e';
constexpr char kTuple = 't';

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_signed(std::string& out, int64_t v) {
  if (v >= 0 && v < 256) {
    out.push_back(kBinInt1);
    put_le(out, static_cast<uint64_t>(v), 1);
  } else if (v >= 0 && v < 65536) {
    out.push_back(kBinInt2);
    put_le(out, static_cast<uint64_t>(v), 2);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    out.push_back(kBinInt);
    put_le(out, static_cast<uint64_t>(static_cast<uint32_t>(static_cast<int32_t>(v))), 4);
  } else {
    // Shortest two's complement form: drop leading bytes while the next one carries the sign.
    const auto u = static_cast<uint64_t>(v);
    int n = 8;
    while (n > 1) {
      const uint8_t top = (u >> (8 * (n - 1))) & 0xff;
      const uint8_t next_sign = ((u >> (8 * (n - 2))) >> 7) & 1;
      if ((top == 0x00 && next_sign == 0) || (top == 0xff && next_sign == 1)) {
        --n;
      } else {
        break;
      }
    }
    out.push_back(kLong1);
    out.push_back(static_cast<char>(n));
    put_le(out, u, n);
  }
}

void put_unsigned(std::string& out, uint64_t v) {
  if (v <= static_cast<uint64_t>(INT64_MAX)) return put_signed(out, static_cast<int64_t>(v));
  out.push_back(kLong1);  // needs a ninth, zero byte so the value stays positive
  out.push_back(static_cast<char>(9));
  put_le(out, v, 8);
  out.push_back('\0');
}

void put_string(std::string& out, const std::string& s) {
  out.push_back(kBinUnicode);
  put_le(out, s.size(), 4);
  out += s;
}

void put(std::string& out, const nlohmann::json& v, bool as_tuple,
         const std::set<std::string>& tuple_keys) {
  switch (v.type()) {
    case nlohmann::json::value_t::null:
      out.push_back(kNone);
      return;
    case nlohmann::json::value_t::boolean:
      out.push_back(v.get<bool>() ? kTrue : kFalse);
      return;
    case nlohmann::json::value_t::number_integer:
      put_signed(out, v.get<int64_t>());
      return;
    case nlohmann::json::value_t::number_unsigned:
      put_unsigned(out, v.get<uint64_t>());
      return;
    case nlohmann::json::value_t::number_float: {
      out.push_back(kBinFloat);
      const auto bits = std::bit_cast<uint64_t>(v.get<double>());
      for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
      return;
    }
    case nlohmann::json::value_t::string:
      put_string(out, v.get_ref<const std::string&>());
      return;
    case nlohmann::json::value_t::array:
      if (as_tuple) {
        if (v.empty()) {
          out.push_back(kEmptyTuple);
          return;
        }
        out.push_back(kMark);
        for (const auto& x : v) put(out, x, false, tuple_keys);
        out.push_back(kTuple);
        return;
      }
      out.push_back(kEmptyList);
      if (v.empty()) return;
      out.push_back(kMark);
      for (const auto& x : v) put(out, x, false, tuple_keys);
      out.push_back(kAppends);
      return;
    case nlohmann::json::value_t::object:
      out.push_back(kEmptyDict);
      if (v.empty()) return;
      out.push_back(kMark);
      for (const auto& [k, x] : v.items()) {
        put_string(out, k);
        put(out, x, tuple_keys.count(k) > 0, tuple_keys);
      }
      out.push_back(kSetItems);
      return;
    case nlohmann::json::value_t::binary:
    case nlohmann::json::value_t::discarded:
      break;
  }
  throw std::invalid_argument("to_pickle: only null, bool, numbers, strings, arrays and objects");
}

}  // namespace

std::string to_pickle(const nlohmann::json& v, const std::set<std::string>& tuple_keys) {
  std::string out;
  out.push_back(kProto);
  out.push_back('\x02');
  put(out, v, false, tuple_keys);
  out.push_back(kStop);
  return out;
}

}  // namespace fl::comm
