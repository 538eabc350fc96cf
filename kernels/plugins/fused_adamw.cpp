// The fused_adamw kernel plugin (libfl_fused_adamw.so): installs the AdamW kernel.
#include "kernels/cpu/adamw_impl.hpp"
#include "kernels/plugin.hpp"

// The instruction set the kernels were built for (JIT builds pass the op builder's choice).
#ifndef FL_PLUGIN_ISA
#define FL_PLUGIN_ISA "sse2"
#endif
extern "C" const char* fl_plugin_isa() {
  return FL_PLUGIN_ISA;
}

extern "C" int fl_plugin_abi() {
  return fl::ops::kPluginAbi;
}

extern "C" void fl_plugin_register(fl::ops::PluginRegistry* r) {
  r->adamw = &fl::ops::impl::adamw;
}
