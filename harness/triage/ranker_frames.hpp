// Traceback frames as learned evidence of `faultline triage` (stop 53): the functions a stack
// passes through tell the stage a failure happened in (`from_pretrained`, `train_batch`,
// `generate`, `init_process_group`). Frames are read from Python tracebacks, DeepSpeed's log
// prefix, C/C++ and NCCL source references and C++ stack frames, and normalised to tokens
// (`deepspeed.runtime.engine:backward`, `backward`, `processgroupnccl:`, `deepspeed.runtime.*`)
// exactly as harness/triage/learn_frames.py reads them (tests/triage/data/frames_fixture.txt).
// learn_ranker.py counts them per stage on the tune split (harness/triage/ranker/frames.yaml);
// the ranker adds cues.yaml frames_stage_weight times P(stage | frames) to an inferred stage.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fl::triage {

struct Taxonomy;
struct Ranker;
struct EvidenceLine;

// frames.yaml: stage -> failures with any frame token, token -> stage -> failures holding it.
struct FrameModel {
  bool loaded = false;
  int issues = 0;
  std::map<std::string, double> stages;
  std::unordered_map<std::string, std::map<std::string, double>> rows;
  std::map<std::string, double> sums;  // per stage: the sum over tokens
};

// Reads `file` into `m` (a missing file leaves m.loaded false); throws SignatureError
// ("file:line:col: key: problem").
void load_frame_model(const std::string& file, const Taxonomy& t, FrameModel& m);

// The distinct frame tokens of one line, sorted (learn_frames.py line_tokens).
std::vector<std::string> frame_line_tokens(std::string_view line);

// A frame token of the input: its first line and that line's text.
struct FrameHit {
  std::string token;
  size_t line = 0;  // 1-based
  std::string text;
};

// The distinct frame tokens of the last `max_bytes` of `text` (a traceback ends a log), in order
// of first line; only tokens of `m` when it is loaded, every token otherwise.
std::vector<FrameHit> input_frames(std::string_view text, const FrameModel& m, size_t max_bytes);

// P(stage | frames): a naive Bayes with add-`alpha` smoothing over the model's tokens, with the
// stages' shares as its prior when `prior`, else a flat one; empty when no frame of `hits` is in
// the model.
std::map<std::string, double> frame_posterior(const FrameModel& m,
                                              const std::vector<FrameHit>& hits, double alpha,
                                              bool prior);

// The frames of `hits` that point at `stage` most (P(token | stage) over P(token) of all
// failures with frames, above 1), strongest first, at most `n`.
std::vector<const FrameHit*> carrying_frames(const FrameModel& m, const std::string& stage,
                                             const std::vector<FrameHit>& hits, double alpha,
                                             size_t n);

// The ranker's reading (frames_stage_weight > 0 and frames.yaml loaded; else empty): the input's
// frames into `hits` and P(stage | frames).
std::map<std::string, double> read_frames(std::string_view text, const Ranker& k,
                                          std::vector<FrameHit>& hits);

// The lines of the frames that lean `stage` (at most 3 frames), each naming its frames.
std::vector<EvidenceLine> frame_evidence(const std::vector<FrameHit>& hits, const Ranker& k,
                                         int stage);

}  // namespace fl::triage
