// `tracrctl models` and `tracrctl profile`: the model registry and local
// per-layer profiling (LibTorch builds only).
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#if TRACR_WITH_TORCH
#include <torch/torch.h>

#include "experiments/profile.hpp"
#include "experiments/registry.hpp"
#endif

#include "protocol/error.hpp"

namespace tracr::controller {

int cmd_models(const std::vector<std::string>&) {
#if TRACR_WITH_TORCH
  for (const auto& name : experiments::list_models())
    fmt::print("{:<24} {}\n", name, experiments::model_description(name));
  return 0;
#else
  std::fputs("tracrctl models: this build has no LibTorch (TRACR_WITH_TORCH=OFF)\n", stderr);
  return 2;
#endif
}

// tracrctl profile MODEL [--input-shape C,H,W] [--batch B] [--reps N] [--weights F] [--device D]
int cmd_profile(const std::vector<std::string>& args) {
#if TRACR_WITH_TORCH
  if (args.empty() || args[0].empty() || args[0][0] == '-') {
    std::fputs("usage: tracrctl profile MODEL [--input-shape C,H,W] [--batch B] [--reps N] [--weights F] [--device D]\n",
               stderr);
    return 2;
  }
  experiments::ModelConfig cfg;
  int64_t batch = 1;
  int reps = 10;
  for (size_t i = 1; i < args.size(); ++i) {
    auto next = [&]() -> std::string {
      if (i + 1 >= args.size()) throw Fatal(make_error(Errc::invalid_argument, args[i] + " needs a value"));
      return args[++i];
    };
    const std::string a = args[i];
    if (a == "--input-shape") {
      cfg.input_shape.clear();
      std::string s = next();
      size_t pos = 0;
      while (pos <= s.size()) {
        auto c = s.find(',', pos);
        cfg.input_shape.push_back(std::stoll(s.substr(pos, c - pos)));
        if (c == std::string::npos) break;
        pos = c + 1;
      }
    } else if (a == "--batch") batch = std::stoll(next());
    else if (a == "--reps") reps = std::stoi(next());
    else if (a == "--weights") cfg.weights = next();
    else if (a == "--device") cfg.device = next();
    else throw Fatal(make_error(Errc::invalid_argument, "profile: unknown option '" + a + "'"));
  }
  auto model = experiments::create_model(args[0], cfg);
  if (!model) {  // an unknown model or a shape it cannot take: a usage error
    const std::string msg = model.error().str();
    fmt::print(stderr, "tracrctl profile: {}\n", msg.substr(0, msg.find('\n')));
    return 2;
  }
  const auto& s = (*model)->input_shape();
  torch::NoGradGuard ng;
  auto input = torch::rand({batch, s[0], s[1], s[2]}).to((*model)->device());
  experiments::ProfileOptions po;
  po.repetitions = reps;
  auto prof = experiments::profile_layers(**model, input, po);
  if (!prof) {
    fmt::print(stderr, "tracrctl profile: {}\n", prof.error().str());
    return 1;
  }
  fmt::print("{} on {}, input {}x{}x{}x{}, {} repetitions per layer\n\n", (*model)->name(), (*model)->device().str(),
             batch, s[0], s[1], s[2], reps);
  fmt::print("{}\n", experiments::format_layer_profiles(*prof));
  fmt::print("per-split estimate from these profiles (head on this device, tail on an identical one):\n{}\n",
             experiments::format_split_table(experiments::split_table(**model, *prof, batch)));
  return 0;
#else
  std::fputs("tracrctl profile: this build has no LibTorch (TRACR_WITH_TORCH=OFF)\n", stderr);
  return 2;
#endif
}

}  // namespace tracr::controller
