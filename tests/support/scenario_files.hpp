// A test's own folder for scenario files, and the loader's error for a `topology:` value: the
// hostfile and the deepspeed launcher tests load scenarios the same way.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "harness/model/scenario.hpp"
#include "tests/support/scratch.hpp"

namespace fl::test {

class ScenarioFiles : public ::testing::Test {
 protected:
  explicit ScenarioFiles(std::string prefix) : prefix_(std::move(prefix)) {}
  void SetUp() override {
    dir_ = fresh_test_dir(prefix_, ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const auto p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  std::string error_of(const std::string& topology) {
    try {
      harness::load_scenario(write("s.yaml", "name: s\ntopology: " + topology + "\n"));
    } catch (const harness::ScenarioError& e) {
      return e.what();
    }
    return "";
  }
  std::string prefix_;
  std::filesystem::path dir_;
};

}  // namespace fl::test
