// Shared helpers for the experiments tests: a temporary directory fixture
// and running the reference script with Debian's python3-torchvision.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <sys/wait.h>
#include <filesystem>
#include <map>
#include <string>
#include <utility>

#include "experiments/weights.hpp"

namespace tracr::experiments::test {

// Creates a fresh directory under $TMPDIR, removes it on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tracr-exp-XXXXXX").string();
    char* p = mkdtemp(tmpl.data());
    if (!p) throw std::runtime_error("mkdtemp failed");
    path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string script(const std::string& name) {
  return std::string(TRACR_SOURCE_DIR) + "/scripts/" + name;
}

// Runs `/usr/bin/python3 scripts/<args>`; returns the exit status (0 = ok).
inline int run_python(const std::string& args) {
  const std::string cmd = std::string(TRACR_PYTHON) + " " + args + " > /dev/null 2>&1";
  return std::system(cmd.c_str());
}

// Runs `/usr/bin/python3 scripts/<args>` in `cwd`; returns the exit status
// and what it wrote to stdout and stderr.
inline std::pair<int, std::string> run_python_output(const std::string& args, const std::string& cwd = ".") {
  const std::string cmd = "cd '" + cwd + "' && " + std::string(TRACR_PYTHON) + " " + args + " 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed"};
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// Tensors of a plain-dict file written by scripts/tracr_reference.py.
inline std::map<std::string, at::Tensor> read_ref(const std::string& path) {
  auto sd = read_state_dict(path);
  if (!sd) throw std::runtime_error(sd.error().str());
  std::map<std::string, at::Tensor> out;
  for (auto& nt : *sd) out[nt.name] = nt.tensor;
  return out;
}

}  // namespace tracr::experiments::test

namespace tracr::experiments::test {
// Values of a 1-D integer tensor.
inline std::vector<int64_t> to_vec(const at::Tensor& t) {
  auto c = t.to(torch::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}
}  // namespace tracr::experiments::test
