// Nothing: the translation unit whose target compiles the test binaries' precompiled header
// (tests/CMakeLists.txt, faultline_test_pch and faultline_harness_test_pch).
