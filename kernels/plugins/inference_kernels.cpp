// The inference_kernels plugin (libfl_inference_kernels.so): the serving path's fused
// element-wise kernels (GeLU), compiled for the device capabilities in FL_PLUGIN_ARCHS (the
// build's FAULTLINE_ARCH_LIST, like TORCH_CUDA_ARCH_LIST for a CUDA extension).
#include "kernels/cpu/gelu_impl.hpp"
#include "kernels/plugin.hpp"

#ifndef FL_PLUGIN_ARCHS
#define FL_PLUGIN_ARCHS "8.0;9.0"
#endif

extern "C" int fl_plugin_abi() {
  return fl::ops::kPluginAbi;
}

extern "C" const char* fl_plugin_archs() {
  return FL_PLUGIN_ARCHS;
}

extern "C" void fl_plugin_register(fl::ops::PluginRegistry* r) {
  r->gelu_forward = &fl::ops::impl::gelu_forward;
}
