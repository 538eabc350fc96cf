// Exit statuses a worker uses when the observed symptom ends it, so a supervisor can classify the
// exit without parsing output. Values below 64 avoid the shell's signal range (128+N).
#pragma once

namespace fl::exit_code {

inline constexpr int kOk = 0;
inline constexpr int kError = 1;          // any other error
inline constexpr int kUsage = 2;          // bad command line, setting or configuration
inline constexpr int kCommTimeout = 20;   // a collective or p2p op hit its deadline
inline constexpr int kCommMismatch = 21;  // verify mode: ranks called different ops
inline constexpr int kCommError = 22;     // backend failure
inline constexpr int kRendezvous = 23;    // world check failed (mismatch, duplicate, missing)
inline constexpr int kStore = 24;         // store unreachable: refused, timeout, bind failure
inline constexpr int kOutOfMemory = 25;   // the memory accountant's budget was exceeded
inline constexpr int kLossScale = 26;     // fp16 overflow with the loss scale at its minimum
inline constexpr int kCheckpoint = 27;    // checkpoint missing, corrupt, or from another layout
inline constexpr int kPlugin = 28;        // a kernel plugin could not be loaded
inline constexpr int kDevice = 29;        // the rank's device is absent, not visible or lost
inline constexpr int kArtifact = 30;      // an artifact fetched at start could not be obtained

}  // namespace fl::exit_code
