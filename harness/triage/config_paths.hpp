// A configuration printed over several lines, read by its key paths. A DeepSpeed JSON config in
// an issue is pretty-printed, so the line that names a setting does not hold its value:
//
//   "fp16": {
//       "enabled": true          <- config_paths() gives `fp16.enabled: true` at this line
//   },
//   "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}
//                                <- `zero_optimization.stage: 3` and
//                                   `zero_optimization.offload_optimizer.device: cpu`
//
// env.yaml's rules marked `nested: true` read these paths instead of the raw lines (triage.cpp);
// the others keep reading lines. The reader is a tolerant tokenizer of JSON and Python dict
// text, not a parser: a report shows parts of a config, cut and mixed with other lines, so it
// keeps what it can and never fails.
//   - Keys are quoted (`"stage"`, `'stage'`); a value is a quoted string or a bare scalar up to
//     `,` `{` `}` `[` `]`, a comment (` # ...`, ` // ...`) or the line's end, printed without its
//     quotes.
//   - `{` and `[` open a level (named by the key before them), `}` and `]` close one. A value
//     with no key (an array's number or string) gives no path; an object in an array gives its
//     keys under the array's name.
//   - A comment line (`#`, `//`) is skipped. Any other line that starts with none of `"'{}[]`
//     leaves the config: the levels are dropped. Such a line with a `{` (`ds_config = {`,
//     `zero_optimization: {`) opens one again, named by a bare key before `:` or `=`, if any.
//   - A key path's parts are lower-cased; the value keeps its case (`True`).
#pragma once

#include <cstddef>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "harness/triage/triage.hpp"

namespace fl::triage {

struct ConfigPath {
  size_t line = 0;   // 1-based: the line that holds the value
  std::string text;  // `fp16.enabled: true`
};

// Which paths to keep (and count towards the limit); empty: all. A log's dicts (a trainer's
// `{'loss': 2.5, 'grad_norm': ...}` on every step) would otherwise use up the limit before a
// config pasted after them.
using PathFilter = std::function<bool(const std::string& text)>;

// The key paths of `text`'s configs, in line order, at most `max_paths` of those `keep` keeps. A
// 17th level is not a config (a config is shallow): the levels are dropped and the rest of its
// line unread.
std::vector<ConfigPath> config_paths(const std::string& text, size_t max_paths,
                                     const PathFilter& keep = {});

// The configs of a text as triage's `nested: true` rules (env.yaml) read them. Kept are the paths
// a rule's needle is in, or whose setting is a rule's (`offload_param.device`, beside the rule for
// `offload_optimizer.device`), at most Options::max_regex_lines of them: a trainer's logged dicts
// do not use up the limit.
class ConfigRead {
 public:
  ConfigRead(const std::string& text, const Tables& t, const Options& o);

  // Whether line `line` is a path of a setting of `key`'s rules under a parent that none of them
  // reads: the config says it is another setting (`"device": "nvme"` under `offload_param` is not
  // the optimizer's offload; `"stage": 1` under `pipeline` is no ZeRO stage). A rule that reads
  // lines then does not take `key` from it.
  bool says_otherwise(size_t line, const std::string& key) const;

  // The nested rules' facts, into r.env. A path's fact replaces a line's fact of the same key when
  // that line comes later (as among the rules that read lines, the first line that gives a key
  // wins) or is another line that gave a path. On its own line the line's fact stays: its text
  // shows more than the path.
  void add_facts(Result& r) const;

 private:
  const Tables& t_;
  std::vector<ConfigPath> paths_;
  std::set<size_t> lines_;  // the lines that gave a path
};

}  // namespace fl::triage
