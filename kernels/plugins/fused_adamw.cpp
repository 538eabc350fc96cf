// The fused_adamw kernel plugin (libfl_fused_adamw.so): installs the AdamW kernel.
#include "kernels/cpu/adamw_impl.hpp"
#include "kernels/plugin.hpp"

extern "C" int fl_plugin_abi() {
  return fl::ops::kPluginAbi;
}

extern "C" void fl_plugin_register(fl::ops::PluginRegistry* r) {
  r->adamw = &fl::ops::impl::adamw;
}
