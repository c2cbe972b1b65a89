// `tracrctl convert OLD.yaml [-o NEW.yaml] [--force]`: a Python tracr model
// config (config/alexnetsplit.yaml and its siblings: `default`, `logging`,
// `model`, `dataset`, `dataloader`, `compression`) turned into a tracr
// experiment file, each value commented with the key it came from, and every
// key that could not be carried over reported with the reason. No LibTorch:
// model names are matched against the zoo list (experiments/zoo/models.def).
// docs/FROM_PYTHON_TRACR.md has the key-by-key table.
#pragma once

#include <string>
#include <vector>

#include "protocol/error.hpp"

namespace tracr::controller {

// A key of the old file that the experiment does not carry.
struct NotCarried {
  std::string key;     // dotted path, e.g. "dataloader.num_workers"
  std::string value;   // as written in the old file (flow YAML for maps and lists)
  std::string reason;  // why, and what to do instead
};

struct Conversion {
  std::string yaml;                     // the experiment file's text
  std::vector<NotCarried> not_carried;  // in the order of the old file
};

// Converts the text of a Python tracr config. `source_path` names it in
// messages and anchors its relative paths: the Python tracr resolves them
// against the directory it runs in, its project root, taken to be the
// parent of OLD.yaml's directory when that is named `config`, else OLD.yaml's
// own directory. They are written relative to `output_path`'s directory, or
// absolute when `output_path` is empty (text printed, not written).
// Error config naming source:line:col, the key and what was expected, for
// YAML that does not parse, a missing `model.model_name` and values of the
// wrong type or range.
Result<Conversion> convert_python_config(const std::string& text, const std::string& source_path,
                                         const std::string& output_path = "");

// `tracrctl convert` (options from controller/cli/cli.cpp's command tree).
struct ConvertOptions {
  std::string input;   // OLD.yaml
  std::string output;  // NEW.yaml; empty: print on stdout
  bool force = false;  // replace an existing NEW.yaml
};

// Writes NEW.yaml (refusing to replace an existing file without --force),
// else prints the experiment on stdout; the keys not carried over go to
// stderr. Returns 0 when converted, 1 when the output cannot be written, 2
// for unreadable or invalid input.
Status cmd_convert(const ConvertOptions& o);

}  // namespace tracr::controller
