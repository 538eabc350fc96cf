// Kernel plugins: JIT builds (cache, missing compiler, compiler errors), the device capability
// check, and the dispatcher's refusal of lengths a plugin kernel cannot handle. ctest runs every
// case in its own process, so each starts with an empty registry and fresh settings.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <vector>

#include "base/subprocess.hpp"
#include "injector/plan.hpp"
#include "kernels/cpu/plugin_package.hpp"
#include "kernels/ops.hpp"
#include "kernels/plugin.hpp"
#include "kernels/versions.hpp"
#include "tests/support/scratch.hpp"

namespace fl::ops {
namespace {
namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const fs::path d =
      fl::test::removed_at_exit(fs::temp_directory_path() / ("faultline-plugin-test-" + name + "-" +
                                                             std::to_string(::getpid())));
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const PluginError& e) {
    return e.what();
  }
  return "";
}

// Issue 32: the default build directory was the fixed /tmp/faultline-jit, where another user could
// plant a library a later root run loads. Now it is TMPDIR/faultline-jit-UID, refused unless this
// user made it (and only it can enter it).
TEST(PluginJit, ADefaultBuildDirectoryAnotherUserMadeIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to uid 65534";
  const std::string tmp = fresh_dir("tmpdir");
  fs::permissions(tmp, fs::perms(01777));
  const std::string planted = tmp + "/faultline-jit-0";
  fs::create_directory(planted);
  ASSERT_EQ(::chown(planted.c_str(), 65534, 65534), 0);
  fs::permissions(planted, fs::perms(0777));
  ::setenv("TMPDIR", tmp.c_str(), 1);
  ::unsetenv("FAULTLINE_JIT_DIR");
  EXPECT_EQ(error_of([] { jit_build_plugin("inference_kernels"); }),
            "cannot build kernel plugin 'inference_kernels': " + planted +
                ": refused: it is owned by uid 65534, and must be a directory of uid 0 that only "
                "it can enter (another user may have made it to plant files this user would "
                "load); remove it, or set FAULTLINE_JIT_DIR to a directory of your own");
  EXPECT_TRUE(fs::is_empty(planted));
  ::unsetenv("TMPDIR");
}

TEST(PluginJit, BuildsOnceAndReusesTheCachedLibrary) {
  const std::string dir = fresh_dir("cache");
  ::setenv("FAULTLINE_JIT_DIR", dir.c_str(), 1);
  ::unsetenv("CXXFLAGS");
  ::unsetenv("CXX");
  const std::string first = jit_build_plugin("inference_kernels");
  ASSERT_TRUE(fs::exists(first)) << first;
  const auto built_at = fs::last_write_time(first);
  EXPECT_EQ(jit_build_plugin("inference_kernels"), first);
  EXPECT_EQ(fs::last_write_time(first), built_at);  // not rebuilt
  // The built library loads and takes over GeLU; its numbers are the built-in's.
  load_plugin("inference_kernels", true);
  EXPECT_NE(plugin_kernels().gelu_forward, nullptr);
  std::vector<float> in{-2.f, -0.5f, 0.f, 0.7f, 3.f}, out(in.size());
  gelu_forward(out.data(), in.data(), in.size());
  EXPECT_NEAR(out[3], 0.5f * 0.7f * (1.f + std::tanh(0.7978845608f * (0.7f + 0.044715f * 0.343f))),
              1e-6);
}

TEST(PluginJit, MissingCompilerFailsWithStatus127AndTheLog) {
  const std::string dir = fresh_dir("nocxx");
  ::setenv("FAULTLINE_JIT_DIR", dir.c_str(), 1);
  ::setenv("CXX", "g++-does-not-exist", 1);
  const std::string err = error_of([] { load_plugin("fused_adamw", true); });
  EXPECT_NE(err.find("building kernel plugin 'fused_adamw' failed (compiler exit status 127)"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("g++-does-not-exist"), std::string::npos) << err;
  EXPECT_NE(err.find("log: " + dir), std::string::npos) << err;
  EXPECT_TRUE(loaded_plugins().empty());
}

TEST(PluginJit, OldLanguageStandardFailsWithTheCompilersOwnErrors) {
  const std::string dir = fresh_dir("cxx11");
  ::setenv("FAULTLINE_JIT_DIR", dir.c_str(), 1);
  ::unsetenv("CXX");
  ::setenv("CXXFLAGS", "-std=c++11", 1);
  const std::string err = error_of([] { jit_build_plugin("inference_kernels"); });
  EXPECT_NE(err.find("compiler exit status 1"), std::string::npos) << err;
  EXPECT_NE(err.find("error"), std::string::npos) << err;
  EXPECT_NE(err.find("CXXFLAGS=-std=c++11"), std::string::npos) << err;
}

// Nothing about a plugin is ever shell text: names that would inject a command are refused
// before any file is touched, and odd characters in the source and build directories reach the
// compiler as plain arguments. Each payload would create a marker file in the working directory
// if a shell ran it.
TEST(PluginJit, ShellPayloadsInNamesAndPathsRunNothing) {
  const fs::path dir = fresh_dir("inject");
  ASSERT_EQ(::chdir(dir.c_str()), 0);
  const fs::path src = dir / "s'$(id>m_srcdir)'`id>m_srcdir2`";
  const fs::path jit = dir / "j;id>m_jit $(id>m_jit2)";
  fs::create_directories(src);
  ::setenv("FAULTLINE_PLUGIN_SRC", src.c_str(), 1);
  ::setenv("FAULTLINE_JIT_DIR", jit.c_str(), 1);
  ::setenv("FAULTLINE_PLUGIN_PATH", (dir / "nowhere").c_str(), 1);
  ::unsetenv("CXX");
  ::unsetenv("CXXFLAGS");
  const std::vector<std::string> names = {
      "p'$(id>m1)'q", "a;id>m2",        "$(id>m3)",      "`id>m4`", "a b",    "../../etc/passwd",
      "x|id>m5",      "p\"$(id>m6)\"q", "plugin\nid>m7", "",        "9lives", "a-b",
      "a.b"};
  for (const auto& n : names) {
    if (n.find('/') == std::string::npos && !n.empty()) {
      std::ofstream(src / (n + ".cpp")) << "extern \"C\" int fl_plugin_abi() { return 2; }\n";
    }
    for (bool jit_build : {false, true}) {
      const std::string err = error_of([&] {
        if (jit_build) {
          jit_build_plugin(n);
        } else {
          load_plugin(n, true);
        }
      });
      EXPECT_NE(err.find("kernel plugin name '" + n + "' is not an identifier"), std::string::npos)
          << "name [" << n << "]: " << err;
    }
  }
  EXPECT_TRUE(loaded_plugins().empty());
  EXPECT_FALSE(fs::exists(jit)) << "a refused name still started a build";
  // A valid name in those odd directories builds, with the directories taken literally.
  std::ofstream(src / "plain_plugin.cpp") << "extern \"C\" int fl_plugin_abi() { return 2; }\n"
                                             "extern \"C\" void fl_plugin_register(void*) {}\n";
  const std::string built = jit_build_plugin("plain_plugin");
  EXPECT_TRUE(fs::exists(built)) << built;
  EXPECT_EQ(fs::path(built).parent_path(), jit);
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    EXPECT_NE(e.path().filename().string().rfind("m", 0), 0u)
        << "a payload ran: " << e.path().string();
  }
}

// A packaged install (FAULTLINE_JIT_MANIFEST, kernels/cpu/plugin_package.hpp): the JIT build
// compiles from a package holding what the manifest's patterns keep. DeepSpeed PR #5522's manifest
// did not keep .hpp files, so the fused AdamW source reached a header the package lacked.
std::vector<std::string> files_under(const fs::path& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out.push_back(fs::relative(e.path(), dir).generic_string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

fs::path only_package(const fs::path& jit) {
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(jit)) {
    if (e.path().filename().string().rfind("package-", 0) == 0) found.push_back(e.path());
  }
  return found.size() == 1 ? found[0] : fs::path();
}

TEST(PluginJitPackage, AManifestWithoutHppLeavesTheKernelHeaderOutAndTheCompilerSaysSo) {
  const std::string dir = fresh_dir("manifest-nohpp");
  ::setenv("FAULTLINE_JIT_DIR", dir.c_str(), 1);
  ::setenv("FAULTLINE_JIT_MANIFEST", "*.cpp *.h *.cu", 1);
  ::unsetenv("CXX");
  ::unsetenv("CXXFLAGS");
  const std::string err = error_of([] { load_plugin("fused_adamw", true); });
  EXPECT_NE(err.find("building kernel plugin 'fused_adamw' failed (compiler exit status 1)"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("kernels/cpu/adamw_impl.hpp: No such file or directory"), std::string::npos)
      << err;
  EXPECT_TRUE(loaded_plugins().empty());
  const fs::path pkg = only_package(dir);
  ASSERT_FALSE(pkg.empty()) << "no package staged under " << dir;
  EXPECT_EQ(files_under(pkg), std::vector<std::string>{"kernels/plugins/fused_adamw.cpp"});
}

TEST(PluginJitPackage, AManifestKeepingHeadersBuildsFromThePackage) {
  const std::string dir = fresh_dir("manifest-hpp");
  ::setenv("FAULTLINE_JIT_DIR", dir.c_str(), 1);
  ::setenv("FAULTLINE_JIT_MANIFEST", "*.cpp,*.h,*.cu,*.hpp", 1);
  ::unsetenv("CXX");
  ::unsetenv("CXXFLAGS");
  load_plugin("fused_adamw", true);
  EXPECT_EQ(loaded_plugins(), std::vector<std::string>{"fused_adamw"});
  EXPECT_EQ(plugin_kernels().adamw_plugin, "fused_adamw");
  const fs::path pkg = only_package(dir);
  ASSERT_FALSE(pkg.empty()) << "no package staged under " << dir;
  const auto files = files_under(pkg);
  // The source and the project headers it reaches, and nothing else of the tree.
  for (const char* f : {"kernels/plugins/fused_adamw.cpp", "kernels/cpu/adamw_impl.hpp",
                        "kernels/plugin.hpp", "kernels/plugins/exports.hpp", "base/error.hpp"}) {
    EXPECT_NE(std::find(files.begin(), files.end(), f), files.end()) << f;
  }
  for (const auto& f : files) {
    EXPECT_TRUE(f.ends_with(".hpp") || f.ends_with(".cpp") || f.ends_with(".h")) << f;
    EXPECT_EQ(f.find("plugin_package"), std::string::npos) << f;
  }
}

// The package's folder is named by its content and that name keys the build: a library built
// from a complete package is never reused by a build from one without the header.
TEST(PluginJitPackage, ABuildFromAnotherPackageNeverReusesTheCachedLibrary) {
  const std::string dir = fresh_dir("manifest-cache");
  ::setenv("FAULTLINE_JIT_DIR", dir.c_str(), 1);
  ::unsetenv("CXX");
  ::unsetenv("CXXFLAGS");
  ::setenv("FAULTLINE_JIT_MANIFEST", "*.cpp,*.h,*.hpp", 1);
  const std::string built = jit_build_plugin("fused_adamw");
  EXPECT_TRUE(fs::exists(built)) << built;
  // The same build again finds its library; without the manifest the tree's build is another.
  EXPECT_EQ(jit_build_plugin("fused_adamw"), built);
  ::setenv("FAULTLINE_JIT_MANIFEST", "*.cpp,*.h", 1);
  kJitManifest.reset();  // settings are read once per process
  const std::string err = error_of([] { jit_build_plugin("fused_adamw"); });
  EXPECT_NE(err.find("kernels/cpu/adamw_impl.hpp: No such file or directory"), std::string::npos)
      << err;
}

// The SettingError a JIT build with `manifest` raises ("" when none).
std::string setting_error_of(const std::string& manifest) {
  ::setenv("FAULTLINE_JIT_DIR", fresh_dir("manifest-bad").c_str(), 1);
  ::setenv("FAULTLINE_JIT_MANIFEST", manifest.c_str(), 1);
  kJitManifest.reset();
  try {
    jit_build_plugin("fused_adamw");
  } catch (const SettingError& e) {
    return e.what();
  }
  return "";
}

TEST(PluginJitPackage, ABadManifestIsASettingError) {
  EXPECT_NE(setting_error_of(" , ").find("FAULTLINE_JIT_MANIFEST is ' , ', which names no pattern"),
            std::string::npos);
  EXPECT_NE(setting_error_of("*.cpp, csrc/*.hpp")
                .find("FAULTLINE_JIT_MANIFEST: pattern 'csrc/*.hpp' holds '/'"),
            std::string::npos);
}

TEST(PluginCapability, ADeviceTheKernelsWereNotBuiltForIsRefused) {
  ::setenv("FAULTLINE_PLUGIN_PATH", FAULTLINE_PLUGIN_DIR, 1);
  set_device_capability("7.0");
  const std::string err = error_of([] { load_plugin("inference_kernels"); });
  EXPECT_NE(err.find("no kernel image is available for execution on the device (device "
                     "capability 7.0, plugin built for 8.0;9.0"),
            std::string::npos)
      << err;
  EXPECT_EQ(plugin_kernels().gelu_forward, nullptr);
  set_device_capability("9.0");
  load_plugin("inference_kernels");
  EXPECT_NE(plugin_kernels().gelu_forward, nullptr);
}

TEST(PluginDispatch, AKernelWithoutATailLoopIsRefusedOtherLengths) {
  ::setenv("FAULTLINE_PLUGIN_PATH", FAULTLINE_PLUGIN_DIR, 1);
  load_plugin("fused_adamw_vec16");
  EXPECT_EQ(plugin_kernels().adamw_multiple, 16u);
  EXPECT_EQ(plugin_kernels().adamw_plugin, "fused_adamw_vec16");
  AdamW hp;
  std::vector<float> p(32, 1.f), g(32, 0.5f), m(32, 0.f), v(32, 0.f);
  try {
    adamw_update(p.data(), g.data(), m.data(), v.data(), 17, 1, hp);
    FAIL() << "17 elements were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot run on 17 elements: it handles multiples of 16 "
                                         "only (1 left over)"),
              std::string::npos)
        << e.what();
  }
  // A multiple of 16 runs and updates every element.
  adamw_update(p.data(), g.data(), m.data(), v.data(), 32, 1, hp);
  for (float x : p) EXPECT_LT(x, 1.f);
}

// Stop 56: fp16 moments and an fp16 denominator. A gradient of 1e-4 leaves a second moment
// ((1 - 0.95) 1e-8) that rounds to 0 in fp16 and an eps (1e-8) that rounds to 0, so the first
// update is m / 0: infinite; a gradient of exactly 0 (an embedding row no token used) gives 0 / 0.
// A gradient of 0.5 still updates finitely; fused_adamw (fp32 state) keeps all three finite.
TEST(PluginDispatch, AHalfPrecisionStateKernelDividesBySmallGradientsSecondMomentOfZero) {
  ::setenv("FAULTLINE_PLUGIN_PATH", FAULTLINE_PLUGIN_DIR, 1);
  AdamW hp;
  auto step = [&](const char* plugin) {
    load_plugin(plugin);
    std::vector<float> p(3, 1.f), g{1e-4f, 0.5f, 0.f}, m(3, 0.f), v(3, 0.f);
    adamw_update(p.data(), g.data(), m.data(), v.data(), 3, 1, hp);
    return p;
  };
  const auto half = step("fused_adamw_half_state");
  EXPECT_EQ(plugin_kernels().adamw_plugin, "fused_adamw_half_state");
  EXPECT_TRUE(std::isinf(half[0])) << half[0];
  EXPECT_TRUE(std::isfinite(half[1])) << half[1];
  EXPECT_LT(half[1], 1.f);
  EXPECT_TRUE(std::isnan(half[2])) << half[2];
  const auto fp32 = step("fused_adamw");
  for (float x : fp32) EXPECT_TRUE(std::isfinite(x)) << x;
  EXPECT_LT(fp32[0], 1.f);
}

TEST(PluginAbi, AStaleLibraryIsRefusedByItsAbiVersion) {
  // A plugin library built for ABI 1 (what the loader accepted before the registry grew).
  const std::string dir = fresh_dir("abi");
  const std::string src = dir + "/old.cpp";
  std::ofstream(src) << "extern \"C\" int fl_plugin_abi() { return 1; }\n"
                        "extern \"C\" void fl_plugin_register(void*) {}\n";
  run_tool({"c++", "-shared", "-fPIC", "-o", dir + "/libfl_old.so", src});
  ::setenv("FAULTLINE_PLUGIN_PATH", dir.c_str(), 1);
  const std::string err = error_of([] { load_plugin("old"); });
  EXPECT_NE(err.find("was built for plugin ABI 1, this worker needs 2"), std::string::npos) << err;
}

TEST(KernelSites, AFailedLaunchAndAFailedImportAreReportedAtTheirSites) {
  fault::arm_text("kernel.gemm=1*error", "test", 1);
  std::vector<float> in(6, 1.f), w(6, 1.f), out(4, 0.f);
  try {
    linear_forward(out.data(), in.data(), w.data(), nullptr, 2, 3, 2);
    FAIL() << "the injected launch failure was not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel.gemm launch failed on 6 elements"),
              std::string::npos)
        << e.what();
  }
  // 1*: only the first launch fails; the next one computes.
  linear_forward(out.data(), in.data(), w.data(), nullptr, 2, 3, 2);
  EXPECT_FLOAT_EQ(out[0], 3.f);
  fault::arm_text("plugin.load=error", "test", 1);
  ::setenv("FAULTLINE_PLUGIN_PATH", FAULTLINE_PLUGIN_DIR, 1);
  EXPECT_NE(error_of([] {
              load_plugin("fused_adamw");
            }).find("cannot load kernel plugin 'fused_adamw': fault injected at plugin.load"),
            std::string::npos);
  fault::disarm();
  load_plugin("fused_adamw");
  EXPECT_EQ(loaded_plugins(), std::vector<std::string>{"fused_adamw"});
}

}  // namespace
}  // namespace fl::ops

namespace fl::ops {
namespace {

// The simulated CPU: a JIT build targets the building CPU's best instruction set unless
// FAULTLINE_JIT_ISA names one; a kernel built for a set this CPU lacks loads, then traps with a
// real SIGILL on its first call, whatever the host has.
TEST(PluginIsa, NativeBuildsTargetTheBestSetTheCpuHas) {
  ::setenv("FAULTLINE_CPU_FLAGS", "fpu sse sse2 sse4_2 avx avx2", 1);
  ::unsetenv("FAULTLINE_JIT_ISA");
  EXPECT_EQ(jit_target_isa(), "avx2");
  EXPECT_TRUE(cpu_has("avx2"));
  EXPECT_FALSE(cpu_has("avx512f"));
  EXPECT_TRUE(cpu_has("sse2"));  // x86-64's baseline, listed or not
}

TEST(PluginIsa, AnUnknownTargetIsRefusedNamingTheChoices) {
  ::setenv("FAULTLINE_JIT_ISA", "avx1024", 1);
  EXPECT_EQ(error_of([] { jit_target_isa(); }),
            "FAULTLINE_JIT_ISA='avx1024' is not allowed (allowed: native, avx512f, avx2, avx, "
            "sse4_2, sse2)");
}

TEST(PluginIsa, AKernelBuiltForAvx512TrapsWithSigillOnACpuWithoutIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // The threadsafe death test runs this body again in a child process, which SIGILL ends before
  // it could remove a folder of its own: the child takes the parent's, which the parent removes.
  const char* inherited = std::getenv("FAULTLINE_TEST_ISA_DIR");
  const std::string dir = inherited != nullptr ? inherited : fresh_dir("isa");
  ::setenv("FAULTLINE_TEST_ISA_DIR", dir.c_str(), 1);
  ::setenv("FAULTLINE_JIT_DIR", dir.c_str(), 1);
  ::unsetenv("CXXFLAGS");
  ::unsetenv("CXX");
  ::setenv("FAULTLINE_CPU_FLAGS", "sse sse2 sse4_2 avx avx2 fma", 1);
  ::setenv("FAULTLINE_JIT_ISA", "avx512f", 1);
  std::vector<float> p(8, 1.f), g(8, 0.5f), m(8, 0.f), v(8, 0.f);
  AdamW hp;
  // Loading works (nothing checks the instruction set at load) ...
  load_plugin("fused_adamw", true);
  EXPECT_EQ(plugin_kernels().adamw_plugin, "fused_adamw");
  // ... the first kernel call does not.
  EXPECT_EXIT(adamw_update(p.data(), g.data(), m.data(), v.data(), p.size(), 1, hp),
              ::testing::KilledBySignal(SIGILL),
              "trap invalid opcode in libfl_fused_adamw.so: an avx512f instruction, which this "
              "CPU does not have");
  ::unsetenv("FAULTLINE_TEST_ISA_DIR");  // a later test in this process makes a folder of its own
}

TEST(PluginIsa, ABuildForTheCpuItRunsOnRuns) {
  const std::string dir = fresh_dir("isa-native");
  ::setenv("FAULTLINE_JIT_DIR", dir.c_str(), 1);
  ::unsetenv("CXXFLAGS");
  ::unsetenv("CXX");
  ::setenv("FAULTLINE_CPU_FLAGS", "sse sse2 sse4_2 avx avx2 fma", 1);
  ::setenv("FAULTLINE_JIT_ISA", "native", 1);
  std::vector<float> p(8, 1.f), g(8, 0.5f), m(8, 0.f), v(8, 0.f);
  AdamW hp;
  load_plugin("fused_adamw", true);
  adamw_update(p.data(), g.data(), m.data(), v.data(), p.size(), 1, hp);
  EXPECT_LT(p[0], 1.f);  // the step ran
}

// Issue 38 item 4: versions as a cause. DeepSpeed's assert_no_cuda_mismatch (op_builder/
// builder.py): the toolkit's major.minor against torch.version.cuda, minor mismatches accepted
// only inside one cuda_minor_mismatch_ok list.
TEST(JobVersions, AMinorMismatchDeepSpeedListsIsAcceptedWithItsNote) {
  EXPECT_EQ(check_cuda_versions("12.4", "12.1", false),
            "Installed CUDA version 12.4 does not match the version torch was compiled with 12.1 "
            "but since the APIs are compatible, accepting this combination");
  EXPECT_EQ(check_cuda_versions("11.3", "11.8", false),
            "Installed CUDA version 11.3 does not match the version torch was compiled with 11.8 "
            "but since the APIs are compatible, accepting this combination");
  EXPECT_EQ(check_cuda_versions("12.1", "12.1", false), "");
  EXPECT_EQ(check_cuda_versions("12.1.105", "12.1", false), "");  // nvcc's release: major.minor
  EXPECT_EQ(check_cuda_versions("", "12.1", false), "");          // nothing to compare
}

TEST(JobVersions, AMajorMismatchIsDeepSpeedsErrorUnlessTheCheckIsSkipped) {
  const std::string words =
      ">- DeepSpeed Op Builder: Installed CUDA version 12.1 does not match the version torch was "
      "compiled with 11.8, unable to compile cuda/cpp extensions without a matching cuda version.";
  EXPECT_EQ(error_of([] { check_cuda_versions("12.1", "11.8", false); }), words);
  EXPECT_EQ(check_cuda_versions("12.1", "11.8", true),
            "DeepSpeed Op Builder: Installed CUDA version 12.1 does not match the version torch "
            "was compiled with 11.8.Detected `DS_SKIP_CUDA_CHECK=1`: Allowing this combination of "
            "CUDA, but it may result in unexpected behavior.");
  // "There is no CUDATk 12.7": in no list, so even a minor mismatch with it is refused.
  EXPECT_EQ(error_of([] { check_cuda_versions("12.7", "12.1", false); }),
            ">- DeepSpeed Op Builder: Installed CUDA version 12.7 does not match the version "
            "torch was compiled with 12.1, unable to compile cuda/cpp extensions without a "
            "matching cuda version.");
}

TEST(JobVersions, TheExtensionsFolderIsNamedAsTorchNamesIt) {
  EXPECT_EQ(extensions_folder("3.10", "12.1"), "py310_cu121");
  EXPECT_EQ(extensions_folder("3.8.18", "11.7"), "py38_cu117");
  EXPECT_EQ(extensions_folder("3.11", ""), "py311_cpu");
  EXPECT_EQ(framework_namespace("2.1.0+cu121"), "v2_1_0");
}

TEST(JobVersions, AVersionThatDoesNotParseIsAConfigErrorNamingTheKey) {
  JobVersions v;
  v.torch = "2.x";
  try {
    set_job_versions(v);
    ADD_FAILURE() << "accepted torch 2.x";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "workload.versions.torch: '2.x' is not a version (allowed: MAJOR.MINOR or "
                 "MAJOR.MINOR.PATCH, digits, optionally +LOCAL (e.g. 12.1, 2.1.0+cu121))");
  }
  v.torch = "";
  v.cached_torch = "2.0.1";
  EXPECT_THROW(set_job_versions(v), ConfigError);  // a cached build needs the job's framework
}

std::string versions_jit_dir(const std::string& name) {
  const std::string dir = fresh_dir(name);
  ::setenv("FAULTLINE_JIT_DIR", dir.c_str(), 1);
  ::unsetenv("CXXFLAGS");
  ::unsetenv("CXX");
  ::unsetenv("FAULTLINE_PLUGIN_SRC");  // the tree's sources
  ::unsetenv("CUDA_HOME");             // torch finds the toolkit itself: the stated one stands
  ::unsetenv("CUDA_PATH");
  return dir;
}

// torch keys its extensions cache by the sources and the builder's flags, not by its own version
// or ABI: a build an earlier job left with torch's other ABI is found, opened, and the dynamic
// loader cannot resolve the framework symbol it was compiled against.
TEST(JobVersions, AStaleBuildForTheOtherCxxAbiFailsAtImportWithUndefinedSymbol) {
  const std::string dir = versions_jit_dir("stale-abi");
  JobVersions v;
  v.torch = "2.1.0";
  v.cxx11_abi = true;
  v.cached_torch = "2.1.0";
  v.cached_cxx11_abi = false;
  set_job_versions(v);
  const std::string err = error_of([] { load_plugin("fused_adamw", true); });
  const std::string at = "cannot load kernel plugin 'fused_adamw': " + dir +
                         "/py310_cpu/fused_adamw/libfl_fused_adamw-";
  EXPECT_EQ(err.substr(0, at.size()), at) << err;
  EXPECT_NE(err.find(".so: undefined symbol: _ZN8fl_torch6v2_1_017register_operatorERKSs"),
            std::string::npos)
      << err;
}

TEST(JobVersions, AStaleBuildForAnotherTorchFailsWithThatVersionsSymbol) {
  versions_jit_dir("stale-version");
  JobVersions v;
  v.torch = "1.8.1";
  v.cached_torch = "1.8.0";
  set_job_versions(v);
  EXPECT_NE(error_of([] { load_plugin("fused_adamw", true); })
                .find("undefined symbol: _ZN8fl_torch6v1_8_017register_operatorERKNSt7__"
                      "cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"),
            std::string::npos);
}

TEST(JobVersions, ABuildForTheJobsOwnFrameworkLoads) {
  const std::string dir = versions_jit_dir("fresh");
  JobVersions v;
  v.torch = "2.1.0";
  v.cxx11_abi = false;
  v.torch_cuda = "12.1";
  v.cuda_toolkit = "12.4";  // accepted (12.x list)
  set_job_versions(v);
  EXPECT_EQ(error_of([] { load_plugin("fused_adamw", true); }), "");
  EXPECT_EQ(loaded_plugins(), std::vector<std::string>{"fused_adamw"});
  EXPECT_TRUE(fs::exists(dir + "/framework/libfl_torch-v2_1_0-abi0.so"));
  EXPECT_FALSE(fs::is_empty(dir + "/py310_cu121/fused_adamw"));
}

TEST(JobVersions, AToolkitMismatchStopsTheJitLoadBeforeAnythingIsBuilt) {
  const std::string dir = versions_jit_dir("toolkit");
  JobVersions v;
  v.torch = "2.0.1";
  v.torch_cuda = "11.8";
  v.cuda_toolkit = "12.1";
  set_job_versions(v);
  ::unsetenv("DS_SKIP_CUDA_CHECK");
  EXPECT_EQ(error_of([] { load_plugin("fused_adamw", true); }),
            ">- DeepSpeed Op Builder: Installed CUDA version 12.1 does not match the version torch "
            "was compiled with 11.8, unable to compile cuda/cpp extensions without a matching "
            "cuda version.");
  EXPECT_TRUE(fs::is_empty(dir));
}

// torch takes CUDA_HOME from the environment as written, and DeepSpeed's op builder runs
// CUDA_HOME/bin/nvcc -V before anything is built: a CUDA_HOME written as a path list
// (NVIDIA/apex#368) stops the load; one directory holding bin/nvcc lets it through.
TEST(JobVersions, ACudaHomeWithoutNvccStopsTheJitLoadBeforeAnythingIsBuilt) {
  const std::string dir = versions_jit_dir("cuda-home");
  JobVersions v;
  v.torch = "2.1.0";
  v.torch_cuda = "12.1";
  v.cuda_toolkit = "12.1";
  set_job_versions(v);
  ::setenv("CUDA_HOME", ":/usr/local/cuda", 1);
  EXPECT_EQ(error_of([] { load_plugin("fused_adamw", true); })
                .rfind("FileNotFoundError: [Errno 2] No such file or directory: "
                       "':/usr/local/cuda/bin/nvcc' (",
                       0),
            0u);
  EXPECT_TRUE(fs::is_empty(dir));
  // CUDA_PATH is read when CUDA_HOME is empty; a directory with an executable bin/nvcc passes.
  const fs::path home = fs::path(dir).parent_path() / "cuda-home-toolkit";
  fs::create_directories(home / "bin");
  std::ofstream(home / "bin" / "nvcc") << "#!/bin/sh\n";
  fs::permissions(home / "bin" / "nvcc", fs::perms::owner_all);
  ::setenv("CUDA_HOME", "", 1);
  ::setenv("CUDA_PATH", (home / "nowhere").c_str(), 1);
  EXPECT_NE(error_of([] { load_plugin("fused_adamw", true); }).find("nowhere/bin/nvcc"),
            std::string::npos);
  ::setenv("CUDA_PATH", home.c_str(), 1);
  EXPECT_EQ(error_of([] { load_plugin("fused_adamw", true); }), "");
  // A framework without CUDA builds no CUDA op: CUDA_HOME is not read.
  ::setenv("CUDA_HOME", ":/usr/local/cuda", 1);
  v.torch_cuda = "";
  v.cuda_toolkit = "";
  set_job_versions(v);
  EXPECT_EQ(error_of([] { load_plugin("fused_adamw", true); }), "");
  ::unsetenv("CUDA_HOME");
  ::unsetenv("CUDA_PATH");
  fs::remove_all(home);
}

}  // namespace
}  // namespace fl::ops
