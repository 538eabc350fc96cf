/* The reference of bench/harness_launch.sh: a bare MPI program that starts, joins MPI_COMM_WORLD,
 * synchronises once and ends, started by the same mpirun as the harness's ranks. Its wall time
 * under mpirun is what N ranks cost without the harness and the workers (no telemetry, store,
 * groups or model). */
#include <mpi.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
