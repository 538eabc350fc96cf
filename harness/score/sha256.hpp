// SHA-256 (FIPS 180-4) of a file, for the dataset manifest's hashes: a reader checks that every
// file is the one the export wrote without faultline (sha256sum gives the same hex).
#pragma once

#include <string>
#include <string_view>

namespace fl::harness {

std::string sha256_hex(std::string_view data);
// Reads the file in blocks; throws Error when it cannot be read.
std::string sha256_file_hex(const std::string& path);

}  // namespace fl::harness
