// tracr_graph_bench: TorchScript graph models outside the test suite.
//
//   tracr_graph_bench check FILE SIDE [DEVICE]
//     Loads FILE as torchscript:FILE (optimize false) at input [3, SIDE, SIDE]
//     on DEVICE (cpu by default; cuda, cuda:N where LibTorch has CUDA),
//     checks that head-then-tail equals the unsplit module at every cut (the
//     crossing values recorded by chaining segments, then every tail) and
//     prints one tab-separated row: cuts, refused cuts, max abs diff, pass.
//   tracr_graph_bench check-opt FILE SIDE [DEVICE]
//     The same file with optimize true, at the cuts 0, N/4, N/2, 3N/4 and N
//     (a refused cut: the next usable one): head then tail against the
//     unsplit module. Prints: cuts checked, the largest difference relative
//     to the output's largest magnitude, whether every 2-D output's argmax
//     (the class) is equal, pass (relative difference <= 1e-3, argmax equal).
//   tracr_graph_bench speed FILE SIDE [REPS [DEVICE]]
//     Optimized graph (optimize true) at one thread: the unsplit graph, and
//     head + tail at the middle cut; warm-up, then the median of REPS rounds,
//     each running unsplit, head + tail, head and tail once, interleaved
//     (on CUDA, each run ends with a device synchronisation). TRACR_BENCH_CUT=K
//     times cut K instead of the middle; head and tail alone go to stderr.
//     Prints: unsplit_ms, split_ms, middle cut.
#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <vector>

#include "experiments/registry.hpp"

namespace ex = tracr::experiments;

namespace {

std::vector<at::Tensor> leaves(const c10::IValue& v) {
  if (v.isTensor()) return {v.toTensor()};
  std::vector<at::Tensor> out;
  if (v.isTuple())
    for (const auto& e : v.toTupleRef().elements())
      for (auto& t : leaves(e)) out.push_back(t);
  if (v.isList())
    for (const auto& e : v.toListRef())
      for (auto& t : leaves(e)) out.push_back(t);
  return out;
}

double max_diff(const ex::Bundle& got, const std::vector<at::Tensor>& ref) {
  if (got.size() != ref.size()) return INFINITY;
  double d = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (got[i].tensor.sizes() != ref[i].sizes()) return INFINITY;
    d = std::max(d, (got[i].tensor.to(torch::kDouble) - ref[i].to(torch::kDouble)).abs().max().item<double>());
  }
  return d;
}

ex::Bundle clone(const ex::Bundle& b) {
  ex::Bundle out;
  for (const auto& nt : b) out.push_back({nt.name, nt.tensor.clone()});
  return out;
}

// What both checks start from: the seeded input, the unsplit module's
// outputs on it, and the file as tracr's model (or why it could not load).
struct CheckSetup {
  at::Tensor x;
  std::vector<at::Tensor> ref;
  tracr::Result<std::unique_ptr<ex::SplitModel>> model;
};

CheckSetup check_setup(const std::string& file, int64_t side, const std::string& device, bool optimize) {
  torch::manual_seed(1);
  at::Tensor x = torch::rand({1, 3, side, side}).to(c10::Device(device));
  auto mod = torch::jit::load(file, c10::Device(device));
  mod.eval();
  auto ref = leaves(mod.forward({x}));
  ex::ModelConfig cfg;
  cfg.input_shape = {3, side, side};
  cfg.device = device;
  cfg.optimize = optimize;
  return {x, std::move(ref), ex::create_model("torchscript:" + file, cfg)};
}

int check(const std::string& file, int64_t side, const std::string& device) {
  torch::NoGradGuard ng;
  auto [x, ref, m] = check_setup(file, side, device, false);
  if (!m) {
    std::printf("0\t0\tnan\tFAIL (%s)\n", m.error().message.c_str());
    return 1;
  }
  const int n = (*m)->num_layers();
  std::vector<std::optional<ex::Bundle>> at(n + 1);
  at[0] = ex::SplitModel::input_bundle(x);
  int refused = 0;
  for (int k = 0; k < n;) {
    int next = k + 1;
    while (next < n && !(*m)->split_refusal(next).empty()) ++next, ++refused;
    auto r = (*m)->run(k, next, *at[k]);
    if (!r) {
      std::printf("%d\t%d\tnan\tFAIL (%s)\n", n, refused, r.error().message.c_str());
      return 1;
    }
    at[next] = std::move(*r);
    k = next;
  }
  double worst = 0;
  for (int k = 0; k <= n; ++k) {
    if (!at[k]) continue;
    auto tail = (*m)->run(k, n, clone(*at[k]));
    if (!tail) {
      std::printf("%d\t%d\tnan\tFAIL (split %d: %s)\n", n, refused, k, tail.error().message.c_str());
      return 1;
    }
    worst = std::max(worst, max_diff(*tail, ref));
  }
  std::printf("%d\t%d\t%g\t%s\n", n, refused, worst, worst == 0 ? "pass" : "FAIL");
  return worst == 0 ? 0 : 1;
}

int check_optimized(const std::string& file, int64_t side, const std::string& device) {
  torch::NoGradGuard ng;
  auto [x, ref, m] = check_setup(file, side, device, true);
  if (!m) {
    std::printf("0\tnan\t-\tFAIL (%s)\n", m.error().message.c_str());
    return 1;
  }
  const int n = (*m)->num_layers();
  std::vector<int> cuts;
  for (int k : {0, n / 4, n / 2, 3 * n / 4, n}) {
    while (k < n && !(*m)->split_refusal(k).empty()) ++k;
    if (cuts.empty() || cuts.back() != k) cuts.push_back(k);
  }
  double worst = 0;
  bool argmax_equal = true;
  for (int k : cuts) {
    auto head = (*m)->run(0, k, ex::SplitModel::input_bundle(x));
    auto tail = head ? (*m)->run(k, n, *head) : head;
    if (!tail) {
      std::printf("%zu\tnan\t-\tFAIL (split %d: %s)\n", cuts.size(), k, tail.error().message.c_str());
      return 1;
    }
    if (tail->size() != ref.size()) {
      std::printf("%zu\tnan\t-\tFAIL (split %d: %zu outputs, expected %zu)\n", cuts.size(), k, tail->size(),
                  ref.size());
      return 1;
    }
    for (size_t i = 0; i < ref.size(); ++i) {
      const at::Tensor got = (*tail)[i].tensor.to(torch::kDouble), want = ref[i].to(torch::kDouble);
      const double scale = want.abs().max().item<double>() + 1e-12;
      worst = std::max(worst, (got - want).abs().max().item<double>() / scale);
      if (want.dim() == 2) argmax_equal = argmax_equal && torch::equal(got.argmax(1), want.argmax(1));
    }
  }
  const bool pass = worst <= 1e-3 && argmax_equal;
  std::printf("%zu\t%.2g\t%s\t%s\n", cuts.size(), worst, argmax_equal ? "equal" : "DIFFERS", pass ? "pass" : "FAIL");
  return pass ? 0 : 1;
}

template <class F>
double time_ms(F&& f) {
  const auto a = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
}

double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int speed(const std::string& file, int64_t side, int reps, const std::string& device) {
  at::set_num_threads(1);
  torch::NoGradGuard ng;
  const c10::Device dev(device);
  const at::Tensor x = torch::rand({1, 3, side, side}).to(dev);
  ex::ModelConfig cfg;
  cfg.input_shape = {3, side, side};
  cfg.device = device;
  cfg.optimize = true;
  auto m = ex::create_model("torchscript:" + file, cfg);
  if (!m) {
    std::fprintf(stderr, "%s\n", m.error().message.c_str());
    return 1;
  }
  const int n = (*m)->num_layers();
  int mid = n / 2;
  if (const char* c = std::getenv("TRACR_BENCH_CUT"); c && *c) mid = std::atoi(c);  // another cut than the middle
  while (mid < n && !(*m)->split_refusal(mid).empty()) ++mid;
  auto sync = [&] {
    if (dev.is_cuda()) torch::cuda::synchronize(dev.index() < 0 ? 0 : dev.index());
  };
  auto full = [&] {
    (void)(*m)->run(0, n, ex::SplitModel::input_bundle(x));
    sync();
  };
  auto split = [&] {
    auto h = (*m)->run(0, mid, ex::SplitModel::input_bundle(x));
    (void)(*m)->run(mid, n, std::move(*h));
    sync();
  };
  for (int i = 0; i < 3; ++i) full(), split();  // the profiling executor optimises on first runs
  const auto cut = (*m)->run(0, mid, ex::SplitModel::input_bundle(x));
  auto head = [&] {
    (void)(*m)->run(0, mid, ex::SplitModel::input_bundle(x));
    sync();
  };
  auto tail = [&] {
    (void)(*m)->run(mid, n, clone(*cut));
    sync();
  };
  for (int i = 0; i < 3; ++i) head(), tail();
  // Interleaved, one of each per round: a machine whose speed drifts (a neighbour's load, the clock) moves all
  // four alike, so that their ratios hold even where their absolute values do not.
  std::vector<double> ta, tb, th, tt;
  for (int i = 0; i < reps; ++i) {
    ta.push_back(time_ms(full));
    tb.push_back(time_ms(split));
    th.push_back(time_ms(head));
    tt.push_back(time_ms(tail));
  }
  const double a = median(ta), b = median(tb), h = median(th), t = median(tt);
  // unsplit, head + tail, the cut, its last layer; then head alone and tail alone (stderr: the table's columns stay)
  std::printf("%.3f\t%.3f\t%d\t%s\n", a, b, mid, (*m)->layers()[mid - 1].name.c_str());
  std::fprintf(stderr, "head %.3f ms, tail %.3f ms\n", h, t);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: tracr_graph_bench check|check-opt FILE SIDE [DEVICE] | speed FILE SIDE [REPS [DEVICE]]\n");
    return 2;
  }
  const std::string mode = argv[1];
  const int64_t side = std::stoll(argv[3]);
  if (mode == "check") return check(argv[2], side, argc > 4 ? argv[4] : "cpu");
  if (mode == "check-opt") return check_optimized(argv[2], side, argc > 4 ? argv[4] : "cpu");
  if (mode == "speed") return speed(argv[2], side, argc > 4 ? std::stoi(argv[4]) : 20, argc > 5 ? argv[5] : "cpu");
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
