// The fused_adamw kernel plugin (libfl_fused_adamw.so): installs the AdamW kernel.
#include "kernels/cpu/adamw_impl.hpp"
#include "kernels/plugin.hpp"
#include "kernels/plugins/exports.hpp"

extern "C" void fl_plugin_register(fl::ops::PluginRegistry* r) {
  r->adamw = &fl::ops::impl::adamw;
}
