// The control plane's credential: a per-run secret the harness draws at start, keeps in a 0600
// file in the run directory (control.secret) and hands to the run's own ranks and tools in
// FAULTLINE_CONTROL_SECRET. Every RPC carries it as gRPC metadata; the harness compares it in
// constant time and answers UNAUTHENTICATED without it. No gRPC here: clients add the header.
#pragma once

#include <string>

namespace fl {

inline constexpr const char* kControlSecretEnv = "FAULTLINE_CONTROL_SECRET";
inline constexpr const char* kControlSecretHeader = "faultline-secret";  // gRPC metadata key
inline constexpr const char* kControlSecretFile = "control.secret";      // in the run directory

// 32 random bytes from the kernel (/dev/urandom), as 64 lowercase hex digits.
std::string make_control_secret();

// Equal strings, compared in time that depends only on their lengths.
bool secrets_equal(const std::string& a, const std::string& b);

// Writes `secret` to `path`, created exclusively with mode 0600.
void write_secret_file(const std::string& path, const std::string& secret);

// The secret a client presents to `addr`: FAULTLINE_CONTROL_SECRET when set, else, for a unix
// socket address (unix:DIR/control.sock), DIR/control.secret when this user can read it, else "".
std::string control_secret_for(const std::string& addr);

}  // namespace fl
