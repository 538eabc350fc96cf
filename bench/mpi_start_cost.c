/* What one MPI process's start costs, for bench/mpi_start_cost.sh: each rank takes its own CPU time
 * (getrusage: user + system) before MPI_Init (exec and loading libmpi), in MPI_Init, and in one
 * barrier, and its wall clock at start and after the barrier; rank 0 gathers them and prints one
 * line: the mean per rank (MPI_Init also as its largest), how far apart the ranks started, and the
 * time from the first rank's start to the last rank past the barrier ("ready"). With
 * START_COST_EXIT set, every rank also prints its whole CPU time after MPI_Finalize
 * ("exit_cpu_ms"), so the script can add up what the ranks cost in all. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static double cpu_s(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

static double wall_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char** argv) {
  const double start = wall_s();
  const double c0 = cpu_s();
  MPI_Init(&argc, &argv);
  const double c1 = cpu_s();
  MPI_Barrier(MPI_COMM_WORLD);
  const double c2 = cpu_s();
  const double ready = wall_s();
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  double mine[5] = {c0, c1 - c0, c2 - c1, start, ready};
  double* all = rank == 0 ? malloc(sizeof mine * (size_t)size) : NULL;
  MPI_Gather(mine, 5, MPI_DOUBLE, all, 5, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    double pre = 0, init = 0, init_max = 0, barrier = 0, first = 1e300, last = 0, done = 0;
    for (int i = 0; i < size; ++i) {
      const double* x = all + 5 * i;
      pre += x[0];
      init += x[1];
      barrier += x[2];
      if (x[1] > init_max) init_max = x[1];
      if (x[3] < first) first = x[3];
      if (x[3] > last) last = x[3];
      if (x[4] > done) done = x[4];
    }
    printf(
        "ranks %d: cpu per rank before MPI_Init %.1f ms, MPI_Init %.1f ms (largest %.1f), "
        "barrier %.1f ms; starts spread %.2f s; ready %.2f s\n",
        size, pre / size * 1e3, init / size * 1e3, init_max * 1e3, barrier / size * 1e3,
        last - first, done - first);
    free(all);
  }
  MPI_Finalize();
  if (getenv("START_COST_EXIT") != NULL) printf("exit_cpu_ms %.2f\n", cpu_s() * 1e3);
  return 0;
}
