#include "workloads/train/tokenizer.hpp"

#include <sys/stat.h>

#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.hpp"

namespace fl::train {

namespace {

constexpr const char* kEndOfText = "<|endoftext|>";

std::string resolve(const TokenizerOptions& o, const std::string& name) {
  if (name.empty() || name.front() == '/' || o.dir.empty()) return name;
  return o.dir + "/" + name;
}

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The file's text; Python's open() error when it is not there.
std::string read_file(const std::string& path, const std::string& arg) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    raise(
        "FileNotFoundError: [Errno 2] No such file or directory: '{}' (the tokenizer's {}; "
        "relative names are looked up in the job's tokenizer folder)",
        path, arg);
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The Python type json.load gives a JSON value.
const char* python_type(const nlohmann::json& j) {
  if (j.is_array()) return "list";
  if (j.is_string()) return "str";
  if (j.is_boolean()) return "bool";
  if (j.is_number_integer()) return "int";
  if (j.is_number()) return "float";
  return j.is_null() ? "NoneType" : "dict";
}

nlohmann::json read_json(const std::string& path, const std::string& arg) {
  const std::string text = read_file(path, arg);
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    raise("json.decoder.JSONDecodeError: {} ({}) is not JSON ({} bytes)", path, arg, text.size());
  }
  return j;
}

// _GPT2BPETokenizer: the encoder is vocab.json's object as it is (GPT2Tokenizer loads it with
// json.load), the merges are merges.txt's lines after its '#version' header, and the
// end-of-document id is the encoder's '<|endoftext|>' entry.
Tokenizer gpt2_bpe(const TokenizerOptions& o) {
  if (o.vocab_file.empty()) {
    raise<ConfigError>(
        "AssertionError: assert args.vocab_file is not None (build_tokenizer: GPT2BPETokenizer "
        "reads a vocab.json and a merges.txt; the job passed no --vocab-file{})",
        o.tokenizer_model.empty()
            ? std::string()
            : ", and --tokenizer-model " + o.tokenizer_model + " is not read by this type");
  }
  if (o.merge_file.empty()) {
    raise<ConfigError>(
        "AssertionError: assert args.merge_file is not None (build_tokenizer: GPT2BPETokenizer "
        "reads a merges.txt beside --vocab-file {}; the job passed no --merge-file)",
        o.vocab_file);
  }
  const std::string vpath = resolve(o, o.vocab_file);
  const nlohmann::json encoder = read_json(vpath, "--vocab-file");
  if (!encoder.is_object()) {
    raise(
        "AttributeError: '{}' object has no attribute 'items' (GPT2Tokenizer: --vocab-file {} "
        "holds a JSON {}, not the token-to-id object of a vocab.json)",
        python_type(encoder), vpath, encoder.type_name());
  }
  std::istringstream merges(read_file(resolve(o, o.merge_file), "--merge-file"));
  std::string line;
  std::getline(merges, line);  // the '#version: 0.2' header
  int merge_rules = 0;
  while (std::getline(merges, line)) merge_rules += line.empty() ? 0 : 1;
  const auto eod = encoder.find(kEndOfText);
  if (eod == encoder.end() || !eod->is_number_integer()) {
    raise(
        "KeyError: '{}' (_GPT2BPETokenizer looks up its end-of-document token in the encoder "
        "--vocab-file {} loaded; its {} top-level keys are not a GPT-2 vocabulary{})",
        kEndOfText, vpath, encoder.size(),
        encoder.contains("model") ? ": it is a Hugging Face tokenizer.json" : "");
  }
  return {"GPT2BPETokenizer", static_cast<int>(encoder.size()), eod->get<int>(), vpath,
          merge_rules};
}

// _HuggingFaceTokenizer: AutoTokenizer.from_pretrained(tokenizer_model) on a folder holding a
// tokenizer.json (or the file itself); the vocabulary is the model's tokens and the added ones.
Tokenizer hugging_face(const TokenizerOptions& o) {
  if (o.tokenizer_model.empty()) {
    raise<ConfigError>(
        "HuggingFaceTokenizer: --tokenizer-model is None (AutoTokenizer.from_pretrained needs the "
        "folder that holds tokenizer.json, or a hub name)");
  }
  std::string path = resolve(o, o.tokenizer_model);
  if (is_dir(path)) path += "/tokenizer.json";
  std::ifstream probe(path);
  if (!probe) {
    raise(
        "OSError: Can't load tokenizer for '{}'. Make sure '{}' is the correct path to a "
        "directory containing all relevant files for a PreTrainedTokenizerFast tokenizer.",
        o.tokenizer_model, o.tokenizer_model);
  }
  const nlohmann::json j = read_json(path, "--tokenizer-model");
  const auto model = j.is_object() ? j.find("model") : j.end();
  if (model == j.end() || !model->is_object() || !model->contains("vocab") ||
      !(*model)["vocab"].is_object()) {
    raise(
        "Exception: data did not match any variant of untagged enum ModelWrapper ({} has no "
        "model.vocab object: not a tokenizers tokenizer.json)",
        path);
  }
  std::set<int64_t> ids;
  int eod = -1;
  for (const auto& [token, id] : (*model)["vocab"].items()) {
    if (!id.is_number_integer()) continue;
    ids.insert(id.get<int64_t>());
    if (token == kEndOfText) eod = id.get<int>();
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const auto& t : j["added_tokens"]) {
      if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer()) continue;
      ids.insert(t["id"].get<int64_t>());
      if (t.value("content", std::string()) == kEndOfText) eod = t["id"].get<int>();
    }
  }
  if (ids.empty()) {
    raise("{}: the tokenizer's vocabulary is empty (model.vocab and added_tokens hold no id)",
          path);
  }
  return {"HuggingFaceTokenizer", static_cast<int>(ids.size()), eod, path};
}

}  // namespace

Tokenizer build_tokenizer(const TokenizerOptions& o) {
  if (o.type == "none") return {"none", 0, -1, ""};
  if (o.type == "GPT2BPETokenizer") return gpt2_bpe(o);
  if (o.type == "HuggingFaceTokenizer") return hugging_face(o);
  if (o.type == "NullTokenizer") {
    if (o.vocab_size <= 0) {
      raise<ConfigError>(
          "AssertionError: assert args.vocab_size is not None (build_tokenizer: NullTokenizer "
          "takes its vocabulary from --vocab-size; the job passed none)");
    }
    // _NullTokenizer: ids 0..vocab_size-1 and the end-of-document id after them.
    return {"NullTokenizer", o.vocab_size + 1, o.vocab_size, ""};
  }
  raise<ConfigError>("NotImplementedError: {} tokenizer is not implemented.", o.type);
}

}  // namespace fl::train
