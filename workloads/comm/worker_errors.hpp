// Maps the errors that end a worker to the exit statuses of base/exit_codes.hpp and prints them
// the way real frameworks do: one line naming rank and cause, on stderr.
#pragma once

#include <exception>
#include <functional>

namespace fl::comm {

// Runs `body`; on an exception prints it and returns the matching exit status, else body's.
int run_worker_main(const std::function<int()>& body);

}  // namespace fl::comm
