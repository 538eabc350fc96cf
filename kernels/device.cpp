#include "kernels/device.hpp"

#include <charconv>

#include "injector/site.hpp"
#if defined(FAULTLINE_HAVE_CUDA)
#include "kernels/cuda/runtime.hpp"
#endif

namespace fl {

namespace {
thread_local Device t_current;
}  // namespace

Device current_device() {
  return t_current;
}

void set_current_device(Device d) {
  if (d.is_cuda()) {
#if defined(FAULTLINE_HAVE_CUDA)
    cuda::activate(d.index);
#else
    raise<DeviceError>(
        "[rank {}] device {} requested but this build has no CUDA (configure with "
        "FAULTLINE_CUDA=ON on a machine with nvcc)",
        fault::current_rank(), d.str());
#endif
  }
  t_current = d;
}

Device parse_device(std::string_view text, int default_index) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(default_index);
  if (text.starts_with("cuda:")) {
    int index = -1;
    const auto digits = text.substr(5);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && index >= 0) {
      return Device::cuda(index);
    }
  }
  raise<DeviceError>("device '{}' is not allowed (allowed: cpu, cuda, cuda:N)", text);
}

}  // namespace fl
