#include "base/event.hpp"

#include <algorithm>
#include <charconv>

#include <nlohmann/json.hpp>

#include "base/json_bounded.hpp"
#include "base/utf8.hpp"

namespace fl {

namespace {

template <typename T>
void put_number(std::string& out, T v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

// A JSON string. Kinds and sources are plain words: they are copied between the quotes; anything
// else is escaped by nlohmann, bytes that are not UTF-8 replaced first.
void put_string(std::string& out, std::string_view s) {
  const bool plain = std::all_of(
      s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\'; });
  if (!plain) {
    out += nlohmann::json(valid_utf8(s)).dump();
    return;
  }
  out += '"';
  out += s;
  out += '"';
}

}  // namespace

std::string to_json_line(const Event& e, EventLine format) {
  std::string out;
  out.reserve(128 + e.data_json.size() + e.kind.size() + e.source.size());
  out += '{';
  if (format == EventLine::kHistory) {
    out += "\"i\":";
    put_number(out, e.index);
    out += ",\"t_ns\":";
    put_number(out, e.t_ns);
    out += ",\"source\":";
    put_string(out, e.source);
    out += ',';
  }
  out += "\"rank\":";
  put_number(out, e.rank);
  out += ",\"seq\":";
  put_number(out, e.seq);
  out += ",\"time_unix_ns\":";
  put_number(out, e.time_unix_ns);
  out += ",\"kind\":";
  put_string(out, e.kind);
  out += ",\"step\":";
  put_number(out, e.step);
  out += ",\"data\":";
  out += e.data_json.empty() ? std::string_view("{}") : std::string_view(e.data_json);
  if (format == EventLine::kHistory && e.late) out += ",\"late\":true";
  out += "}\n";
  return out;
}

Event parse_json_line(std::string_view line, EventLine format) {
  const auto j = parse_json_bounded(line, JsonLimits{64, kMaxEventLineBytes});
  Event e;
  if (format == EventLine::kHistory) {
    e.index = j.at("i").get<uint64_t>();
    e.t_ns = j.at("t_ns").get<int64_t>();
    e.source = j.at("source").get<std::string>();
    e.rank = j.at("rank").get<int>();
    e.seq = j.at("seq").get<uint64_t>();
    e.time_unix_ns = j.at("time_unix_ns").get<int64_t>();
    e.kind = j.at("kind").get<std::string>();
    e.step = j.at("step").get<int64_t>();
    e.data_json = j.at("data").dump();
    e.late = j.value("late", false);
    return e;
  }
  // value() throws a type_error on a line that is not an object.
  e.rank = j.value("rank", -1);
  e.seq = j.value("seq", uint64_t{0});
  e.time_unix_ns = j.value("time_unix_ns", int64_t{0});
  e.kind = j.value("kind", "");
  e.step = j.value("step", int64_t{-1});
  const auto d = j.find("data");
  if (d != j.end()) e.data_json = d->dump();
  return e;
}

}  // namespace fl
