// The text of a failed NCCL call as users see it: the result's name and NCCL's description (what
// ncclGetErrorString says, e.g. "invalid usage (run with NCCL_DEBUG=WARN for details)"), then the
// reason NCCL recorded for it (ncclGetLastError, the text its WARN prints, e.g. "Duplicate GPU
// detected : rank 1 and rank 0 both on CUDA device 60"), which a user would otherwise only see
// with NCCL_DEBUG=WARN. The formatting is pure, so it is tested on machines without NCCL.
#pragma once

#include <string>
#include <string_view>

namespace fl::comm {

// "ncclInvalidUsage" for ncclInvalidUsage (5), "ncclResult 42" for an unknown code. The numbering
// is NCCL's ncclResult_t (nccl_communicator.cpp checks it against nccl.h).
std::string nccl_result_name(int result);

// "ncclInvalidUsage: invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9;
// last NCCL error: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 60". The last
// error is left out when NCCL recorded none; trailing whitespace of NCCL's text is dropped.
std::string format_nccl_error(int result, std::string_view description, std::string_view last_error,
                              std::string_view version);

#if defined(FAULTLINE_HAVE_NCCL)
// The text of `result` from the NCCL this process runs with: format_nccl_error over
// ncclGetErrorString, ncclGetLastError(comm) (comm may be null: an init that failed before it had
// a communicator; NCCL keeps the last error per process) and ncclGetVersion. Call it before
// ncclCommAbort, which may record warnings of its own.
std::string nccl_error_text(int result, void* comm);
#endif

}  // namespace fl::comm
