/* A job faultline did not build, for the command-workload tests: it reports through the probe's
 * C ABI only (no gRPC), prints the launch contract it got, runs `steps` steps of `step_ms` each
 * and exits with `exit_code` (argv: steps step_ms exit_code). Plain C: the header must be C. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "workloads/probe/probe.h"

static const char* env(const char* k) {
  const char* v = getenv(k);
  return v ? v : "(unset)";
}

int main(int argc, char** argv) {
  const int steps = argc > 1 ? atoi(argv[1]) : 3;
  const int step_ms = argc > 2 ? atoi(argv[2]) : 50;
  const int code = argc > 3 ? atoi(argv[3]) : 0;
  char hello[256];
  snprintf(hello, sizeof hello, "{\"world_size\":%d,\"local_rank\":%d,\"pid\":%d}",
           atoi(env("WORLD_SIZE")), atoi(env("LOCAL_RANK")), (int)getpid());
  if (fl_probe_event("hello", -1, hello) != 0) return 90;
  printf(
      "contract RANK=%s WORLD_SIZE=%s LOCAL_RANK=%s LOCAL_WORLD_SIZE=%s NODE_RANK=%s "
      "MASTER_ADDR=%s MASTER_PORT=%s TORCHELASTIC_RUN_ID=%s TORCHELASTIC_RESTART_COUNT=%s "
      "probe=%d\n",
      env("RANK"), env("WORLD_SIZE"), env("LOCAL_RANK"), env("LOCAL_WORLD_SIZE"), env("NODE_RANK"),
      env("MASTER_ADDR"), env("MASTER_PORT"), env("TORCHELASTIC_RUN_ID"),
      env("TORCHELASTIC_RESTART_COUNT"), fl_probe_enabled());
  fflush(stdout);
  fl_probe_start_heartbeat(100);
  fl_probe_section("setup", 1);
  fl_probe_section("setup", 0);
  const struct timespec pause = {step_ms / 1000, (long)(step_ms % 1000) * 1000000L};
  for (int s = 0; s < steps; ++s) {
    fl_probe_section("step", 1);
    fl_probe_collective("all_reduce", "started", "world", s, 1024, "float32");
    nanosleep(&pause, NULL);
    fl_probe_collective("all_reduce", "completed", "world", s, 1024, "float32");
    fl_probe_section("step", 0);
    fl_probe_step(s, 1.0 / (s + 1), step_ms / 1000.0, 0.0);
  }
  if (code != 0) fl_probe_error("data", "probe_job: asked to fail", code);
  fl_probe_close();
  return code;
}
