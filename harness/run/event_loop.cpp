#include "harness/run/event_loop.hpp"

// boost 1.74 asio uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio.hpp>

namespace fl::harness {

struct EventLoop::Impl {
  boost::asio::io_context io;
  std::unique_ptr<boost::asio::signal_set> signals;
};

EventLoop::EventLoop() : impl_(std::make_unique<Impl>()) {}

EventLoop::~EventLoop() {
  if (impl_->signals) {
    boost::system::error_code ec;
    impl_->signals->cancel(ec);
  }
}

boost::asio::io_context& EventLoop::io() {
  return impl_->io;
}

void EventLoop::post(std::function<void()> fn) {
  boost::asio::post(impl_->io, std::move(fn));
}

void EventLoop::run() {
  impl_->io.run();
}

void EventLoop::run_for(std::chrono::milliseconds d) {
  impl_->io.run_for(d);
}

void EventLoop::poll() {
  impl_->io.poll();
}

void EventLoop::stop() {
  impl_->io.stop();
}

void EventLoop::restart() {
  impl_->io.restart();
}

void EventLoop::on_signal(const std::vector<int>& signals, std::function<void(int)> fn) {
  impl_->signals = std::make_unique<boost::asio::signal_set>(impl_->io);
  for (int s : signals) impl_->signals->add(s);
  impl_->signals->async_wait([fn = std::move(fn)](const boost::system::error_code& ec, int sig) {
    if (!ec) fn(sig);
  });
}

struct LoopTimer::Impl {
  explicit Impl(boost::asio::io_context& io) : timer(io) {}
  boost::asio::steady_timer timer;
};

LoopTimer::LoopTimer(EventLoop& loop) : impl_(std::make_unique<Impl>(loop.io())) {}

LoopTimer::~LoopTimer() = default;

void LoopTimer::after(std::chrono::milliseconds d, std::function<void()> fn) {
  impl_->timer.expires_after(d);  // cancels what was armed
  impl_->timer.async_wait([fn = std::move(fn)](const boost::system::error_code& ec) {
    if (!ec) fn();
  });
}

void LoopTimer::cancel() {
  impl_->timer.cancel();
}

}  // namespace fl::harness
