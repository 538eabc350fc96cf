// The run's one I/O loop: Boost.Asio's io_context behind a small interface, so that what a run
// is made of (run.hpp and the run_*.cpp files) compiles without Asio; only event_loop.cpp and
// supervisor.cpp include it (Asio's headers and instantiations cost seconds per file).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace fl::harness {

class EventLoop {
 public:
  EventLoop();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // For what runs its own handlers on the loop (the Supervisor's pipes and SIGCHLD).
  boost::asio::io_context& io();
  // Runs `fn` on the loop's thread; callable from any thread.
  void post(std::function<void()> fn);
  void run();  // until stop() or nothing is left to do
  void run_for(std::chrono::milliseconds d);
  void poll();  // the handlers that are ready, without waiting
  void stop();  // run() and poll() return; restart() before running again
  void restart();
  // `fn(signal)` on the loop once one of `signals` arrives (SIGINT, SIGTERM); from then on they
  // no longer end the process.
  void on_signal(const std::vector<int>& signals, std::function<void(int)> fn);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A one-shot timer on a loop: after() arms it (replacing what was armed), cancel() disarms it;
// the function never runs once cancelled or once the timer is gone.
class LoopTimer {
 public:
  explicit LoopTimer(EventLoop& loop);
  ~LoopTimer();
  LoopTimer(const LoopTimer&) = delete;
  LoopTimer& operator=(const LoopTimer&) = delete;

  void after(std::chrono::milliseconds d, std::function<void()> fn);
  void cancel();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fl::harness
