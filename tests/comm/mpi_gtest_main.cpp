// GoogleTest main for tests that run as several MPI ranks under mpirun: every rank runs every test;
// only rank 0 prints the usual output, other ranks print their failures tagged with their rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "workloads/comm/mpi_communicator.hpp"

namespace {

class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed()) {
      std::fprintf(stderr, "[rank %d] FAILED at %s:%d\n%s\n", rank_,
                   r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
    }
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  fl::comm::mpi_init_once();
  int rank = fl::comm::mpi_world_rank();
  if (rank != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  int rc = RUN_ALL_TESTS();
  // Agree on the outcome so that mpirun's exit status reflects a failure on any rank.
  int any = rc;
  MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any;
}
