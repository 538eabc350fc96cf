// Where the harness finds the programs and files of this build. The values are absolute paths
// into one checkout and its build directory; harness/CMakeLists.txt writes them into one
// generated file (build_paths.cpp.in) instead of compile definitions on every harness file, so
// that the other files compile alike in every checkout (ccache, precompiled headers).
#pragma once

namespace fl::harness::this_build {

const char* source_dir();         // the repository
const char* train_bin();          // fl-train
const char* infer_bin();          // fl-infer
const char* ckpt_bin();           // fl-ckpt
const char* launch_bin();         // fl-launch
const char* harness_bin();        // faultline
const char* tools_dir();          // fl-detect-NAME and fl-recover
const char* plugin_build_dir();   // the worker plugins this build made
const char* plugin_build_libs();  // their file names, comma-separated
const char* python_proto_dir();   // the Python classes of faultline.proto
const char* probe_lib();          // libfaultline_probe.so

}  // namespace fl::harness::this_build
