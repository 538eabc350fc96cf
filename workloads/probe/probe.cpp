// The probe's C ABI (probe.h): JSON lines appended to FAULTLINE_PROBE_FILE, one write(2) each.
// Self-contained on purpose (libc and libstdc++ only), so any job can load it.
#include "workloads/probe/probe.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

namespace {

std::mutex g_mu;  // opening, the heartbeat thread
int g_fd = -2;    // -2: not opened yet, -1: probe off
std::atomic<uint64_t> g_seq{0};
std::thread g_beat;
std::condition_variable g_beat_cv;
bool g_beat_stop = false;

int fd() {
  std::lock_guard lock(g_mu);
  if (g_fd == -2) {
    const char* path = std::getenv("FAULTLINE_PROBE_FILE");
    g_fd = path && *path ? ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600) : -1;
  }
  return g_fd;
}

void escape(std::string& out, const char* s) {
  out += '"';
  for (const char* p = s ? s : ""; *p; ++p) {
    const unsigned char c = static_cast<unsigned char>(*p);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

void number(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  out += buf;
}

bool word(const char* s) {
  if (!s || !*s) return false;
  for (const char* p = s; *p; ++p) {
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_')) return false;
  }
  return true;
}

// One line: {"seq":..,"time_unix_ns":..,"kind":..,"step":..,"data":DATA}
int emit(const char* kind, int64_t step, const std::string& data) {
  const int f = fd();
  if (f < 0) return 0;
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  std::string line =
      "{\"seq\":" + std::to_string(g_seq.fetch_add(1)) + ",\"time_unix_ns\":" +
      std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()) +
      ",\"kind\":";
  escape(line, kind);
  line += ",\"step\":" + std::to_string(step) + ",\"data\":" + data + "}\n";
  const ssize_t n = ::write(f, line.data(), line.size());
  return n == static_cast<ssize_t>(line.size()) ? 0 : -1;
}

}  // namespace

extern "C" {

int fl_probe_enabled(void) {
  return fd() >= 0 ? 1 : 0;
}

int fl_probe_step(int64_t step, double loss, double step_time_s, double comm_s) {
  if (step < 0) {
    errno = EINVAL;
    return -1;
  }
  std::string d = "{\"loss\":";
  number(d, loss);
  if (step_time_s >= 0) {
    d += ",\"step_time_s\":";
    number(d, step_time_s);
    d += ",\"interval_s\":";
    number(d, step_time_s);
  }
  if (comm_s >= 0) {
    d += ",\"comm_s\":";
    number(d, comm_s);
  }
  d += "}";
  return emit("step", step, d);
}

int fl_probe_heartbeat(void) {
  return emit("heartbeat", -1, "{}");
}

int fl_probe_start_heartbeat(int interval_ms) {
  if (fd() < 0) return 0;
  if (interval_ms <= 0) {
    const char* s = std::getenv("FAULTLINE_HEARTBEAT_MS");
    interval_ms = s ? std::atoi(s) : 0;
    if (interval_ms <= 0) interval_ms = 1000;
  }
  std::lock_guard lock(g_mu);
  if (g_beat.joinable()) return 0;
  g_beat_stop = false;
  g_beat = std::thread([interval_ms] {
    std::unique_lock lk(g_mu);
    while (!g_beat_stop) {
      lk.unlock();
      fl_probe_heartbeat();
      lk.lock();
      g_beat_cv.wait_for(lk, std::chrono::milliseconds(interval_ms), [] { return g_beat_stop; });
    }
  });
  return 0;
}

int fl_probe_section(const char* name, int begin) {
  if (!word(name)) {
    errno = EINVAL;
    return -1;
  }
  std::string d = "{\"name\":";
  escape(d, name);
  d += begin ? ",\"state\":\"begin\"}" : ",\"state\":\"end\"}";
  return emit("section", -1, d);
}

int fl_probe_collective(const char* op, const char* state, const char* group, int64_t seq,
                        int64_t count, const char* dtype) {
  if (!op || !*op || !state || !*state) {
    errno = EINVAL;
    return -1;
  }
  std::string d = "{\"op\":";
  escape(d, op);
  d += ",\"state\":";
  escape(d, state);
  d += ",\"group\":";
  escape(d, group && *group ? group : "world");
  d += ",\"seq\":" + std::to_string(seq) + ",\"count\":" + std::to_string(count);
  if (dtype && *dtype) {
    d += ",\"dtype\":";
    escape(d, dtype);
  }
  d += "}";
  return emit("collective", -1, d);
}

int fl_probe_error(const char* klass, const char* message, int exit_code) {
  std::string d = "{\"class\":";
  escape(d, klass && *klass ? klass : "error");
  d += ",\"message\":";
  escape(d, message);
  if (exit_code >= 0) d += ",\"exit_code\":" + std::to_string(exit_code);
  d += "}";
  return emit("error", -1, d);
}

int fl_probe_event(const char* kind, int64_t step, const char* data_json) {
  if (!word(kind) || step < -1) {
    errno = EINVAL;
    return -1;
  }
  // The harness checks the data where it enters the history; here only its outer shape.
  const char* d = data_json && *data_json ? data_json : "{}";
  const size_t n = std::strlen(d);
  if (d[0] != '{' || d[n - 1] != '}' || std::strchr(d, '\n')) {
    errno = EINVAL;
    return -1;
  }
  return emit(kind, step, d);
}

void fl_probe_close(void) {
  std::thread t;
  {
    std::lock_guard lock(g_mu);
    g_beat_stop = true;
    t = std::move(g_beat);
  }
  g_beat_cv.notify_all();
  if (t.joinable()) t.join();
  std::lock_guard lock(g_mu);
  if (g_fd >= 0) ::close(g_fd);
  g_fd = -2;
}

}  // extern "C"
