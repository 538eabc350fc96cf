// What a rank is launched with: the worker binary, its arguments from the scenario, the part of
// the harness's environment it inherits, the run id and a free port.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/private_dir.hpp"
#include "harness/model/scenario.hpp"

namespace fl::harness {

// The worker of a workload kind (workload_kinds.hpp): FAULTLINE_BIN_DIR's, else this build's.
std::string worker_binary(const std::string& kind);
// <time>-<name>-<random hex>.
std::string make_run_id(const std::string& name);
// Creates the run directory RESULTS/ID exclusively (mkdir fails on an existing name): `run_id`
// when given (checked with check_path_component; an existing directory is an error), else a
// generated id, drawn again on a clash. Returns {id, absolute directory}.
std::pair<std::string, std::string> create_run_dir(const std::string& results_dir,
                                                   const std::string& run_id,
                                                   const std::string& scenario_name);
// The same, for a run: the results directory is first made (missing parts 0755) and checked with
// check_private_dir (`allow_shared`: --allow-shared-results, a refusal becomes `warning`); the run
// directory is opened once right after mkdir, and refused unless it is still the empty 0700
// directory of this user that mkdir made. Every file of the run is written through `fd`.
struct CreatedRunDir {
  std::string id, dir;
  DirFd fd;
  std::string warning;  // why the results directory is not private ("" when it is)
};
CreatedRunDir make_run_dir(const std::string& results_dir, const std::string& run_id,
                           const std::string& scenario_name, bool allow_shared);
// Tests: called with the run directory's path between its mkdir and its open (to swap it).
void set_run_dir_hook_for_tests(std::function<void(const std::string& dir)> hook);
// Throws ConfigError unless `value` is a safe single path component (a run id, a suite name):
// 1-200 of letters, digits and . _ - +, not starting with . or -. `what` names it in the message
// ("--run-id", "suite.yaml:2: name").
void check_path_component(const std::string& what, const std::string& value);
// Throws ConfigError unless `key` is an environment variable name, [A-Za-z_][A-Za-z0-9_]* (a
// key with whitespace, '=' or a newline would inject options into an mpirun app file).
void check_env_key(int rank, const std::string& key);
// A port nobody listens on now on 127.0.0.1, below the ephemeral range when there is room.
int free_port();
// The worker command of every rank (faults may append to one rank's copy): the kind's worker,
// the flags of the workload keys the scenario sets (worker_options.hpp), the kind's own
// arguments (topology, run-directory paths, resume), then workload.args.
std::vector<std::string> worker_args(const Scenario& s, const std::string& run_dir,
                                     const std::string& resume_from);
// The harness's environment minus what identifies a rank or arms faults (the scenario sets
// those), minus launcher-internal variables.
std::map<std::string, std::string> base_env();

// The worker arguments a restart_job request may append (fl-train): only options that make
// sense to change on a restart, each with a value of its kind; path values must stay inside
// `run_dir`. Returns "" when every argument is allowed, else an error naming the argument.
std::string check_restart_args(const std::vector<std::string>& args, const std::string& run_dir);
// Starts argv[0] (a path) with stdin from /dev/null and stdout+stderr to `log`; throws Error.
pid_t spawn_logged(const std::vector<std::string>& argv, const std::string& log);

}  // namespace fl::harness
