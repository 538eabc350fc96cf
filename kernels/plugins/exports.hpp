// The symbols every AdamW kernel plugin exports beside fl_plugin_register: the instruction set it
// was built for (a JIT build passes the op builder's choice as FL_PLUGIN_ISA; a plain build is
// sse2) and the plugin ABI it was built against (kernels/plugin.hpp).
#pragma once

#include "kernels/plugin.hpp"

#ifndef FL_PLUGIN_ISA
#define FL_PLUGIN_ISA "sse2"
#endif

extern "C" const char* fl_plugin_isa() {
  return FL_PLUGIN_ISA;
}

extern "C" int fl_plugin_abi() {
  return fl::ops::kPluginAbi;
}
