// What the Slurm executor asks Slurm, and how it reads the answers: the client tools on PATH, the
// controller (`scontrol ping`), partitions and nodes (`scontrol show partition|node -o`), the
// cluster's MaxArraySize, and the states of an array job's tasks (`scontrol show job -o`, or
// `sacct` once the controller forgot the job). Every command runs without a shell.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/suite/suite.hpp"

namespace fl::harness::slurm {

// `scontrol ... -o` prints one record a line as KEY=VALUE words; a value may hold spaces only
// when it is the line's last key (Reason=..., Comment=...), which these readers never need.
std::vector<std::map<std::string, std::string>> parse_records(const std::string& text);

// "2-5", "0,3,7-9", "1-9%2", "4" -> the indices; throws Error for anything else.
std::vector<int> parse_index_set(const std::string& text);

// Slurm's time formats ("minutes", "minutes:seconds", "hours:minutes:seconds", "days-hours",
// "days-hours:minutes", "days-hours:minutes:seconds") in seconds; UNLIMITED and INFINITE: -1.
// std::nullopt for anything else.
std::optional<long> parse_duration(const std::string& text);

// What one case's array task asks for: one sbatch array per distinct shape (with the suite's
// partition and time limit), so a 1-node case never waits for the largest case's nodes.
struct Shape {
  int nodes = 1;           // topology.hosts' count (1 without hosts)
  int tasks_per_node = 1;  // ranks / nodes, rounded up
  auto operator<=>(const Shape&) const = default;
};

// The resources the suite asks for: the partition, the time limit, every case's shape, and the
// largest (summary.json's nodes and tasks_per_node).
struct Request {
  std::string partition;
  int nodes = 1;           // the most nodes any case needs
  int tasks_per_node = 1;  // the most tasks per node any case needs
  long time_limit_s = -1;  // -1: the partition's default
  int max_array_size = 1001;
  std::vector<Shape> case_shapes;  // one per case, in the cases' order
};

// The preflight: sbatch and scontrol on PATH, the controller answering, the partition (or the
// default one) existing and UP, and every case fitting it (nodes, CPUs per node unless
// --overcommit, --time-limit within MaxTime), the cases fitting one array (MaxArraySize). Each
// scenario is loaded as its runs will load it (fix, --set). Throws UsageError naming what is
// missing or too small and saying that nothing was submitted.
Request check_cluster(const std::vector<SuiteCase>& cases, const SuiteOptions& o);

// How an array task stands.
struct TaskState {
  std::string state;      // PENDING, RUNNING, COMPLETED, FAILED, TIMEOUT, CANCELLED, ...
  std::string exit_code;  // "1:0" (status:signal)
  std::string reason, node;
  double run_s = 0;
};
bool is_terminal(const std::string& state);
// The array job's tasks by index (pending ones from the job's combined record). nullopt when
// neither scontrol nor sacct knows the job.
std::optional<std::map<int, TaskState>> query_array(const std::string& job_id);

// The tasks of array job `job_id` in `sacct -n -P -X -o JobID,State,ExitCode,ElapsedRaw,NodeList`
// lines. A task's own line ("4242_1") wins over the array's combined record ("4242_[0-3%1]"),
// whatever their order: the accounting database keeps the range the combined record had when it
// was last written, which can still name tasks that ran since (a real slurmdbd 22.05 prints
// "4242_0|COMPLETED" and "4242_[0-3%1]|CANCELLED by 0" after the array was cancelled with three
// tasks pending). States lose what follows them ("CANCELLED by 0", a "+" of a cut column).
// Lines of other jobs, and malformed ones, are skipped.
std::map<int, TaskState> parse_sacct(const std::string& job_id, const std::string& text);

// A wait status (as waitpid gives it) for a task's ExitCode "status:signal".
int wait_status(const std::string& exit_code);

}  // namespace fl::harness::slurm
