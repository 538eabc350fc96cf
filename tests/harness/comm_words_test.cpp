// fl-detect-comm reads a few words of a rank's error message (comm_words.hpp); a path or the run's
// own name in the message must not be one of them.
#include <gtest/gtest.h>

#include <string>

#include "harness/detectors/comm_words.hpp"

namespace fl::detect::comm {
namespace {

TEST(CommWords, SetupErrorsReadTheirOwnSentence) {
  EXPECT_STREQ(setup_symptom("rendezvous",
                             "rendezvous timed out after 3000 ms (timeout 3000 ms) at store "
                             "127.0.0.1:29500: 3 of 4 ranks arrived (ranks 0-2); missing: rank 3",
                             ""),
               "2.2");
  EXPECT_STREQ(setup_symptom("rendezvous",
                             "rendezvous failed: world size mismatch: rank 3 reports world size 8, "
                             "ranks 0-2 report world size 4",
                             ""),
               "2.1");
  EXPECT_STREQ(setup_symptom("store", "cannot listen on 0.0.0.0:29500: address already in use", ""),
               "2.1");
  EXPECT_STREQ(setup_symptom("store", "cannot reach the rendezvous store at 10.0.0.9:29500", ""),
               "2.2");
  EXPECT_EQ(setup_symptom("checkpoint", "missing: rank 3", ""), nullptr);
}

// Before the mask `missing` anywhere in the message made a rendezvous error 2.2, so a run id
// mismatch in a run named after a missing rank (the run id is its directory's name), or a store
// file under such a directory, read as a missing rank.
TEST(CommWords, TheRunsNameAndPathsAreNotEvidence) {
  const std::string run = "rank-missing-s7";
  EXPECT_STREQ(setup_symptom("rendezvous",
                             "rendezvous failed: run id mismatch: rank 1 has run id "
                             "'rank-missing-s7-old', ranks 0, 2-3 have run id 'rank-missing-s7'",
                             run),
               "2.1");
  EXPECT_STREQ(setup_symptom("rendezvous",
                             "rendezvous failed: config hash mismatch: rank 1 has config hash "
                             "9f2c (from /runs/rank-missing-s7/scenario.yaml), ranks 0 have a1b0",
                             ""),
               "2.1");
  // (A made-up message without the dtype: faultline's own mismatch sentence names every member's
  // dtype, so this fallback, used only when no flight record decided, reads 4.6 for it.)
  EXPECT_STREQ(mismatch_symptom("[rank 0] collective mismatch on group 'dp': rank 1 called "
                                "broadcast(count 16); ranks 0 called all_reduce(count 16); flight "
                                "recorder dumped to /runs/dtype-mismatch-allreduce-s7/fr.json",
                                ""),
               "4.7");
}

}  // namespace
}  // namespace fl::detect::comm
