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
//     `,` `{` `}` `[` `]` or the line's end, printed without its quotes.
//   - `{` and `[` open a level (named by the key before them), `}` and `]` close one; an array's
//     elements give no path.
//   - A line that starts with none of `"'{}[]` leaves the config: the levels are dropped. Such a
//     line that ends in `{` (`ds_config = {`, `zero_optimization: {`) opens one again, named by a
//     bare key before `:` or `=`, if any.
//   - A key path's parts are lower-cased; the value keeps its case (`True`).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace fl::triage {

struct ConfigPath {
  size_t line = 0;   // 1-based: the line that holds the value
  std::string text;  // `fp16.enabled: true`
};

// The key paths of `text`'s configs, in line order, at most `max_paths` of them. A 17th level is
// not a config (a config is shallow): the levels are dropped and the rest of its line unread.
std::vector<ConfigPath> config_paths(const std::string& text, size_t max_paths);

}  // namespace fl::triage
