// faultline triage: reads the text of a reported issue (tracebacks, launcher output, NCCL lines,
// environment dumps) and ranks the catalogue's symptoms and root causes by signature tables kept as
// data (harness/triage/signatures/*.yaml). Every answer carries the lines it rests on.
#pragma once

#include <cstddef>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "harness/triage/dialect.hpp"
#include "harness/triage/ranker.hpp"
#include "harness/triage/regex.hpp"

namespace fl::triage {

// A signature or taxonomy file that cannot be used: "file:line:col: key: problem".
class SignatureError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One row of a signature table: a cheap literal prefilter, then a regex on the lines that pass it.
struct Signature {
  std::string id, file, note;
  std::string needle;  // lower-cased: always a case-insensitive prefilter
  bool icase = false;  // the regex ignores case too
  bool env = false;    // a setting/version line: weak context, never an answer on its own
  // A learned word (learn_tokens.py): scored only when the hand-written tables give no answer.
  bool fallback = false;
  // The row keys on a path or a file name (scan.hpp: reads_paths) and reads the raw line; every
  // other row reads the line with its paths masked.
  bool raw_line = false;
  Regex regex;
  std::map<std::string, double> symptoms;     // symptom id -> weight
  std::map<std::string, double> root_causes;  // root-cause id (R4.6) -> weight
  // A context row (context_rows.hpp): the stage-neutral error rows whose line it re-reads.
  std::vector<std::string> context_for;
  // Stop 59: the row names a symptom its text shows in several stages (a hang, an NCCL WARN) and
  // its stage is a default: an answer whose top symptom's score came only from such rows has its
  // stage inferred (cues.yaml reinfer_below).
  bool reinfer = false;
};

// A table row that reads one environment fact ("what it read"): key, and the regex's group 1.
struct EnvRule {
  std::string key, needle, file;
  bool icase = false;
  // Reads the key paths of a config printed over several lines (`fp16.enabled: true`,
  // config_paths.hpp) instead of the raw lines.
  bool nested = false;
  // `count: lines`: the value is how many distinct values the group takes over every matching
  // line (the GPUs a collect_env or nvidia-smi lists), kept only when no other rule of the key
  // matched a line. `count: items`: the number of comma-separated items in the group of the first
  // matching line (CUDA_VISIBLE_DEVICES=0,1,2,3 gives 4).
  enum class Count { kNone, kLines, kItems } count = Count::kNone;
  Regex regex;
};

struct Taxonomy {
  std::map<std::string, int> symptom_stage;               // "4.11" -> 4
  std::map<std::string, std::string> symptom_name;        // "4.11" -> "Hang & stall"
  std::map<std::string, std::string> root_cause_name;     // "R4.6" -> name
  std::map<std::string, std::string> root_cause_by_name;  // name -> "R4.6" (per stage unique)
  std::map<int, std::string> stage_name;
  // Symptom or root-cause id -> the study's share of its stage's issues.
  std::map<std::string, double> share;
};

struct Tables {
  Taxonomy taxonomy;
  std::vector<Signature> signatures;
  std::vector<EnvRule> env_rules;     // rules that read lines
  std::vector<EnvRule> config_rules;  // rules that read a config's key paths (`nested: true`)
  Ranker ranker;                      // harness/triage/ranker: fills what the tables leave thin
};

// The taxonomy file (scenarios/taxonomy.yaml); throws SignatureError.
Taxonomy load_taxonomy(const std::string& path);
// Every *.yaml under `dir`, sorted; unknown keys, bad regexes and unknown ids are errors. The
// ranker's files come from `ranker_dir` ("" or "none": the tables alone).
Tables load_tables(const std::string& dir, const std::string& taxonomy_path,
                   const std::string& ranker_dir = default_ranker_dir());
// Where the tables live: $FAULTLINE_TRIAGE_SIGNATURES, else the source tree's copy.
std::string default_signature_dir();
std::string default_taxonomy_path();

struct EvidenceLine {
  size_t line = 0;  // 1-based
  std::string text, signature;
};
struct Candidate {
  std::string id;  // symptom or root-cause id
  double score = 0;
  std::vector<EvidenceLine> evidence;
  std::string basis;  // empty: the tables' signatures; else the tally the ranker filled it from
  double reinfer_score = 0;  // stop 59: the part of `score` from rows marked `reinfer`
  // A symptom faultline produces: its scenarios and the lines its runs print for the event
  // (dialect::annotate fills it; empty otherwise, and for root causes).
  dialect::Produced faultline = {};
};
struct EnvFact {
  std::string key, value;
  size_t line = 0;
  std::string text;
};

struct Input {
  std::string text;
  bool truncated = false;  // only the last `limit` bytes were kept
  size_t original_bytes = 0;
};
// The last `limit` bytes of a stream (errors sit at the end of a log), cut at a line start.
Input read_input(std::istream& in, size_t limit);

struct Result {
  enum class Kind { kFound, kNone, kBinary, kEmpty } kind = Kind::kNone;
  // What a found answer rests on: an error text of the tables; only context lines of the tables
  // (settings, versions, commands: weak); or, when the tables found nothing, at least two words
  // learned from the corpus's tune split (weak); or, when the tables reached no answer, the stage
  // inferred from stage words and that stage's common symptoms (ranker.hpp, weak).
  enum class Basis { kTables, kContext, kLearned, kInferred } basis = Basis::kTables;
  std::string why;  // kNone/kBinary/kEmpty: a sentence
  std::vector<Candidate> symptoms, root_causes;
  int stage = 0;
  std::vector<EnvFact> env;
  std::vector<SimilarIssue> similar;  // stop 53: the nearest labelled tune issues (evidence)
  // Stop 55, kNone: the symptoms the ranker would name if it is a failure after all (the answer
  // 'none' first, these after it; empty when the ranker is off or read nothing).
  std::vector<Candidate> guesses;
  // Stop 59, kInferred: the tables' answer whose stage the inference overruled (cues.yaml's
  // reinfer_below), as "4.11 at 1.60 (stage 4)"; empty when no table answer was overruled.
  std::string overruled;
  size_t lines = 0;
  bool truncated = false;
};

struct Options {
  double min_score = 1.0;  // below it: no signature found
  int max_hits = 3;        // distinct matched lines that count per signature
  // A row's regex runs on at most this many of the lines holding its needle: a signature's on
  // the last ones (a log's errors are at its tail), an environment rule's on the first ones
  // (versions are printed first). An issue never comes near it; a 16 MiB training log with a
  // `loss` on every line would otherwise run std::regex some 10^6 times (about 10 s).
  size_t max_regex_lines = 4000;
  size_t evidence_per_candidate = 4;
  std::string self_id;  // --eval: the issue's id (it is never its own similar issue)
};

Result triage(const Input& in, const Tables& t, const Options& o = {});

// Text helpers the scan, the ranker and the draft share: ASCII lower case; a letter, digit or `_`;
// whether `word` (lower-case) occurs in `text`, case-insensitively, with no word character on
// either side.
std::string ascii_lower(std::string_view s);
bool word_char(char c);
bool has_whole_word(std::string_view text, const std::string& word);
// The same on text already lower-cased (ascii_lower), to test several words without copying.
bool has_whole_word_lower(std::string_view low, const std::string& word);
// Human-readable report of `r` (what it read, ranked candidates with the lines faultline prints
// for them when dialect::annotate ran, stage).
std::string format_result(const Result& r, const Tables& t);
// Stop 59: the confidence note of an answer whose table stage the words overruled (r.overruled).
std::string overruled_note(const Result& r);

}  // namespace fl::triage
