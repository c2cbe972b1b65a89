// tracrctl plan: the planner (analysis/plan.hpp) from a stored run or an
// experiment's newest profiled run, for a link, device or held-out run, printed,
// validated and stored.
#include "controller/commands/plan.hpp"
#include "controller/commands/results_exits.hpp"

#include "analysis/chain_plan.hpp"
#include "analysis/joint.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "wire/agent_role.hpp"
#include "agent/energy.hpp"
#include "core/text.hpp"
#include "core/token_bucket.hpp"
#include "core/user_error.hpp"
#include "protocol/codec.hpp"
#include "protocol/stats.hpp"
#include "settings/config.hpp"
#include "store/default_db.hpp"

namespace tracr::controller {

using namespace tracr::core;  // the floors below, by their short names
using namespace tracr::store;
using namespace tracr::analysis;

namespace {
constexpr std::string_view kServer = wire::role_name(wire::AgentRole::server);
constexpr std::string_view kParticipant = wire::role_name(wire::AgentRole::participant);
}  // namespace

namespace {

// The held-out run's devices must be the ones the basis run's profiles
// describe (same machine kind, CPU limits and GPU): a plan never applies one
// device's layer times to another without saying so. Runs stored without
// device rows are not compared.
Status check_same_devices(ResultsDb& db, int64_t basis, int64_t other, int64_t part_basis) {
  auto a = db.devices(basis);
  if (!a) return std::move(a.error());
  auto pa = part_basis == basis ? a : db.devices(part_basis);
  if (!pa) return std::move(pa.error());
  auto b = db.devices(other);
  if (!b) return std::move(b.error());
  for (std::string_view role : {kParticipant, kServer}) {
    const DeviceRecord* ref = nullptr;
    const int64_t from = role == kParticipant ? part_basis : basis;
    for (const auto& d : role == kParticipant ? *pa : *a)
      if (d.role == role && !ref) ref = &d;
    if (!ref) continue;
    for (const auto& d : *b)
      if (d.role == role && !same_device(*ref, d))
        return make_error(Errc::invalid_argument,
                          fmt::format("--validate-on {}: run {}'s {} is another device than the one run {}'s profiles "
                                      "describe ({}). The plan would apply run {}'s layer times to it; plan from a run "
                                      "made on that device (record.layers: true, the default) instead{}",
                                      other, other, device_text(d), from, device_text(*ref), from,
                                      role == kParticipant ? fmt::format(", or take its PARTICIPANT profiles from one "
                                                                         "(--participant-from RUN)")
                                                           : std::string()));
  }
  return {};
}

// `plan --validate-on RUN` with RUN other than the basis: RUN must be of the same
// model and input; its codec is planned too; unless a link was given, the
// plan is made for RUN's link (its profile as tracr emulates it, resolved with
// RUN's own `links`, else its probe), never from RUN's frames or profiles.
Status prepare_held_out(ResultsDb& db, int64_t basis, int64_t other, bool link_given, PlanOptions& opt,
                        std::string& link_name, std::optional<settings::ExperimentConfig>& link_defs) {
  auto a = db.get_run(basis);
  if (!a) return std::move(a.error());
  auto b = db.get_run(other);
  if (!b) return std::move(b.error());
  if (!same_model(db, *b, *a))
    return make_error(Errc::invalid_argument,
                      fmt::format("--validate-on {}: run {} ran {}, the basis run {} ran {}; validate against a run of "
                                  "the same model",
                                  other, other, b->model, basis, a->model));
  auto bcfg = settings::parse_experiment(b->config_yaml, fmt::format("run {}'s stored experiment", other), false);
  auto lp = db.layer_profiles(basis);
  if (bcfg && lp && !lp->empty() && !bcfg->input_size.empty()) {
    const std::string shape = fmt::format("{}", fmt::join(bcfg->input_size, ","));
    if (shape != lp->front().input_shape)
      return make_error(Errc::invalid_argument,
                        fmt::format("--validate-on {}: run {} ran at input {}, the basis run {} was profiled at {}",
                                    other, other, shape, basis, lp->front().input_shape));
  }
  TRACR_TRY(check_same_devices(db, basis, other, opt.participant_run > 0 ? opt.participant_run : basis));
  for (const int64_t r : opt.participant_more) TRACR_TRY(check_same_devices(db, basis, other, r));
  if (opt.codecs.empty()) opt.codecs.push_back(a->codec);
  if (std::find(opt.codecs.begin(), opt.codecs.end(), b->codec) == opt.codecs.end()) opt.codecs.push_back(b->codec);
  if (opt.participants == 0) {  // planned for as many participants as RUN had
    auto np = run_participants(db, other);
    if (!np) return std::move(np.error());
    opt.participants = *np;
    opt.participants_source = fmt::format("as many as held-out run {} had", other);
    // Without lockstep each participant swept at its own pace: at a split, the others may have been at others.
    if (*np > 1 && bcfg && !bcfg->lockstep)
      opt.participants_source +=
          ", each sweeping at its own pace (lockstep: false), so at a given split fewer may "
          "have shared it";
  }
  if (link_given) return {};
  if (!b->link.empty() && b->link != "devices-file") {
    link_name = b->link;
    if (bcfg) link_defs = *bcfg;
    return {};
  }
  auto probes = db.probes(other);
  if (!probes) return std::move(probes.error());
  auto l = probe_link(*b, probes->empty() ? nullptr : &probes->front());
  if (!l) return std::move(l.error());
  opt.link = *l;
  return {};
}

// The run `--validate-on ARG` names (invalid_argument when there is none),
// prepared as held out when it is not the basis.
// The stored run `--validate-on` names (invalid_argument when there is none).
Result<int64_t> validation_run_id(ResultsDb& db, const std::string& arg) {
  auto id = run_id_arg(db, arg);
  if (id)
    if (auto r = db.get_run(*id); !r) id = std::move(r.error());
  if (!id) return make_error(Errc::invalid_argument, "--validate-on: " + id.error().message);
  return id;
}

Result<int64_t> resolve_validation_run(ResultsDb& db, const std::string& arg, int64_t basis, bool link_given,
                                       PlanOptions& opt, std::string& link_name,
                                       std::optional<settings::ExperimentConfig>& link_defs) {
  auto id = validation_run_id(db, arg);
  if (!id) return id;
  if (*id != basis) TRACR_TRY(prepare_held_out(db, basis, *id, link_given, opt, link_name, link_defs));
  return *id;
}

}  // namespace

namespace {

// What ends `tracrctl plan`: a usage error (status 2) or a failure (1).
Error plan_failure(int status, const std::string& text) {
  return status == 2 ? core::bad_input(text) : core::command_failed(text);
}

// --validate-on RUN1,RUN2,...: each run found (a run id, `last`, ...); empty without it.
Result<std::vector<int64_t>> validate_on_runs(ResultsDb& db, const PlanCommand& cmd) {
  std::vector<int64_t> out;
  if (cmd.validate_run.empty()) return out;
  std::istringstream in(cmd.validate_run);
  for (std::string r; std::getline(in, r, ',');) {
    if (r.empty() || cmd.validate_run.back() == ',')
      return plan_failure(2, fmt::format("--validate-on: expected runs RUN1,RUN2,..., got '{}'", cmd.validate_run));
    auto id = validation_run_id(db, r);
    if (!id) return plan_failure(2, user_text(id.error()));
    out.push_back(*id);
  }
  return out;
}

// --radio and --codecs checked, each codec in its canonical spelling.
Status check_plan_options(PlanOptions& opt) {
  if (!opt.radio.empty() && !agent::find_radio(opt.radio))
    return plan_failure(2, fmt::format("--radio expects 3g, lte or wifi, got '{}'", opt.radio));
  for (auto& c : opt.codecs) {
    auto spec = protocol::CodecSpec::parse(c);
    if (!spec) return plan_failure(2, "--codecs: " + user_text(spec.error()));
    c = spec->name();
  }
  return {};
}

bool is_yaml_path(const std::string& target) {
  return target.size() > 5 &&
         (target.substr(target.size() - 5) == ".yaml" || target.substr(target.size() - 4) == ".yml");
}

// An EXPERIMENT.yaml basis: its database and its first link.
Status load_plan_experiment(const PlanCommand& cmd, std::optional<settings::ExperimentConfig>& exp,
                            std::string& db_path, std::string& link_name) {
  auto e = settings::load_experiment(cmd.target, cmd.sets);
  if (!e) return plan_failure(2, user_text(e.error()));
  if (!e->model_list.empty())
    return plan_failure(2, fmt::format("{}: model: a list of {} models; plan one of its runs (tracrctl plan RUN)",
                                       cmd.target, e->model_list.size()));
  exp = *e;
  db_path = exp->output;
  if (link_name.empty() && !exp->link.empty()) link_name = exp->link[0];
  return {};
}

// The newest completed run of the experiment's model with layer profiles of
// both devices at its input shape and batch; 0 when there is none.
Result<int64_t> newest_profiled_run(ResultsDb& db, const settings::ExperimentConfig& exp) {
  auto runs = db.list_runs(0);
  if (!runs) return std::move(runs.error());
  for (const auto& r : *runs) {
    if (r.model != exp.model || r.status != RunStatus::completed) continue;
    auto lp = db.layer_profiles(r.id);
    if (!lp || lp->empty()) continue;
    bool srv = false, part = false;
    for (const auto& l : *lp) (l.device_role == kServer ? srv : part) = true;
    const std::string shape =
        exp.input_size.empty() ? lp->front().input_shape : fmt::format("{}", fmt::join(exp.input_size, ","));
    if (srv && part && lp->front().input_shape == shape && lp->front().batch == exp.batch_size) return r.id;
  }
  return int64_t{0};
}

// The basis run: a stored run, or the newest run of an experiment's model with profiles.
Status find_basis_run(ResultsDb& db, const PlanCommand& cmd, const std::optional<settings::ExperimentConfig>& exp,
                      const std::string& db_path, int64_t& run_id) {
  if (!exp) {
    auto id = run_id_arg(db, cmd.target);
    if (!id) return plan_failure(2, user_text(id.error()));
    run_id = *id;
    return {};
  }
  auto id = newest_profiled_run(db, *exp);
  if (!id) return plan_failure(1, user_text(id.error()));
  if (!*id)
    return plan_failure(1, fmt::format("{} holds no completed run of {} with layer profiles of both devices at this "
                                       "input shape and batch; run `tracrctl run {}` (record.layers: true, the "
                                       "default) first",
                                       db_path, exp->model, cmd.target));
  run_id = *id;
  return {};
}

// What tracr's emulation of link profile `ls` delivered: the probe of the
// newest run (`prefer` first) that ran under a profile of that name with the
// same rates and delay, shaped by tracr.
struct DeliveredLink {
  int64_t run = 0;
  double up_mbps = 0, down_mbps = 0, rtt_ms = 0;
};

std::optional<DeliveredLink> delivered_link(ResultsDb& db, const settings::LinkSpec& ls, int64_t prefer) {
  auto runs = db.list_runs(0);
  if (!runs) return std::nullopt;
  std::stable_partition(runs->begin(), runs->end(), [&](const RunRow& r) { return r.id == prefer; });
  for (const auto& r : *runs) {
    if (r.link != ls.name || r.shaping.empty() || r.shaping == "none") continue;
    auto cfg = settings::parse_experiment(r.config_yaml, "stored experiment", false);
    if (!cfg) continue;
    auto ran = settings::resolve_link(*cfg, ls.name);
    if (!ran || ran->up_mbit != ls.up_mbit || ran->down_mbit != ls.down_mbit || ran->delay_ms != ls.delay_ms) continue;
    auto probes = db.probes(r.id);
    if (!probes) continue;
    for (const auto& pr : *probes)
      if (pr.up_mbps && pr.down_mbps)
        return DeliveredLink{r.id, *pr.up_mbps, *pr.down_mbps, static_cast<double>(pr.rtt_min_ns) / 1e6};
  }
  return std::nullopt;
}

// A link profile as tracr emulates it (tbf's bucket included): the rates a
// run's probe measured through that emulation when one did ("as delivered",
// the nominal figures beside them), else its nominal rates and delay over
// the basis run's loopback rtt.
PlanLink profile_link(ResultsDb& db, const settings::LinkSpec& ls, int64_t run_id, double base_rtt,
                      const ProbeRow* probe, int64_t prefer) {
  PlanLink l;
  l.name = ls.name;
  if (ls.up_mbit > 0) l.up_burst = static_cast<double>(tbf_burst_bytes(ls.up_mbit));
  if (ls.down_mbit > 0) l.down_burst = static_cast<double>(tbf_burst_bytes(ls.down_mbit));
  const std::string nominal = fmt::format("nominal {} / {} Mbit/s, {} ms delay: {}", ls.up_mbit, ls.down_mbit,
                                          ls.delay_ms, ls.source.empty() ? "as defined" : ls.source);
  // A direction the profile leaves unlimited runs at the basis run's probed rate.
  const double probe_up = probe && probe->up_mbps ? *probe->up_mbps : 0.0;
  const double probe_down = probe && probe->down_mbps ? *probe->down_mbps : 0.0;
  if (auto d = ls.shaped() ? delivered_link(db, ls, prefer) : std::nullopt) {
    l.up_mbps = ls.up_mbit > 0 ? d->up_mbps : probe_up;
    l.down_mbps = ls.down_mbit > 0 ? d->down_mbps : probe_down;
    l.rtt_ms = d->rtt_ms;
    l.source = fmt::format(
        "link profile {} as delivered: run {}'s probe through tracr's emulation measured {:.3f} up "
        "/ {:.3f} down Mbit/s, rtt {:.3f} ms ({}); tbf bursts {:.0f} / {:.0f} B",
        ls.name, d->run, d->up_mbps, d->down_mbps, d->rtt_ms, nominal, l.up_burst, l.down_burst);
    return l;
  }
  l.up_mbps = ls.up_mbit > 0 ? ls.up_mbit : probe_up;
  l.down_mbps = ls.down_mbit > 0 ? ls.down_mbit : probe_down;
  l.rtt_ms = base_rtt + 2 * ls.delay_ms;
  l.source = fmt::format(
      "link profile {} at its nominal rates ({}; no stored run measured what tracr's emulation "
      "delivers) as tracr emulates it (tbf bursts {:.0f} / {:.0f} B); rtt: run {}'s probe {:.3f} ms "
      "+ 2 x {} ms delay",
      ls.name, nominal, l.up_burst, l.down_burst, run_id, base_rtt, ls.delay_ms);
  return l;
}

// The link planned for: a profile (profile_link) or explicit figures; `prefer`: the run whose delivered link
// comes first (the held-out run).
Result<PlanLink> planned_link(ResultsDb& db, int64_t run_id, const PlanCommand& cmd, const std::string& link_name,
                              const std::optional<settings::ExperimentConfig>& exp, int64_t prefer) {
  auto probes = db.probes(run_id);
  const ProbeRow* probe = probes && !probes->empty() ? &probes->front() : nullptr;
  const double base_rtt = probe ? static_cast<double>(probe->rtt_min_ns) / 1e6 : 0.0;
  if (link_name.empty()) {
    PlanLink l;
    l.name = "given";
    l.up_mbps = *cmd.up_mbit;
    l.down_mbps = cmd.down_mbit.value_or(*cmd.up_mbit);
    l.rtt_ms = cmd.rtt_ms.value_or(base_rtt);
    // Each figure labelled by where it came from: an option, or what stands in for one not given.
    std::string rtt = "from --rtt-ms";
    if (!cmd.rtt_ms)
      rtt = probe ? fmt::format("from run {}'s link probe (no --rtt-ms given)", run_id)
                  : fmt::format("0 (no --rtt-ms given, and run {} has no link probe)", run_id);
    l.source = fmt::format("up from --up-mbit; down {}; rtt {}",
                           cmd.down_mbit ? "from --down-mbit" : "= up (no --down-mbit given)", rtt);
    return l;
  }
  settings::ExperimentConfig ec = exp ? *exp : settings::ExperimentConfig{};
  auto ls = settings::resolve_link(ec, link_name, "--link");
  if (!ls) return std::move(ls.error());
  return profile_link(db, *ls, run_id, base_rtt, probe, prefer);
}

}  // namespace

namespace {

// One plan from the basis run, validated on `check_arg` (a run, or "" for the basis itself with --validate),
// printed (the whole table when `table`, else its validation line) and stored.
struct PlanOutcome {
  Status status;
  std::optional<double> mape_pct, miss_pct;
};
PlanOutcome failed_with(Error e) {
  PlanOutcome o;
  o.status = std::move(e);
  return o;
}
PlanOutcome plan_and_validate(ResultsDb& db, const std::string& db_path, const PlanCommand& cmd, int64_t run_id,
                              const std::string& check_arg, PlanOptions opt, std::string link_name,
                              std::optional<settings::ExperimentConfig> exp, bool table) {
  int64_t check_run = 0;  // --validate-on RUN: plans for that run's link unless one is given
  if (!check_arg.empty()) {
    auto v = resolve_validation_run(db, check_arg, run_id, !link_name.empty() || cmd.up_mbit, opt, link_name, exp);
    if (!v) return failed_with(plan_failure(v.error().code == Errc::invalid_argument ? 2 : 1, user_text(v.error())));
    check_run = *v;
  }
  if (!link_name.empty() || cmd.up_mbit) {
    auto l = planned_link(db, run_id, cmd, link_name, exp, check_run);
    if (!l) return failed_with(plan_failure(2, user_text(l.error())));
    opt.link = *l;
  }
  auto p = plan_from_run(db, run_id, opt);
  if (!p) return failed_with(plan_failure(p.error().code == Errc::invalid_argument ? 2 : 1, user_text(p.error())));
  std::optional<JointPlan> joint;
  if (cmd.joint) {
    // The assignment that is best for the objective, or (validated) the one the run made.
    const int64_t on = check_run ? check_run : cmd.validate ? run_id : 0;
    auto j = on ? validate_joint(db, *p, on) : plan_jointly(*p, p->participants, opt);
    if (!j) return failed_with(plan_failure(j.error().code == Errc::invalid_argument ? 2 : 1, user_text(j.error())));
    joint = std::move(*j);
  } else if (cmd.validate || check_run) {
    validate_against(db, *p, check_run);
  }
  std::string text = format_plan(*p, cmd.width);
  if (joint) text += format_joint(*p, *joint);
  const bool exits = has_exits(db, run_id);
  if (cmd.min_accuracy && !exits)
    return failed_with(plan_failure(2, fmt::format("--min-accuracy: run {} has no exits; the accuracy floor chooses a "
                                                   "(split, exit threshold) pair",
                                                   run_id)));
  const char* const own_line = joint ? "\nmeasured: " : "\nvalidation";
  if (table)
    std::fputs(text.c_str(), stdout);
  else if (const size_t at = text.find(own_line); at != std::string::npos)
    std::fputs(text.substr(at + 1).c_str(), stdout);
  if (exits && table) {
    // Judged on the basis itself (--validate) or on every held-out run (--validate-on R1,R2,...: checked above).
    std::vector<int64_t> check;
    if (cmd.validate) check.push_back(run_id);
    if (auto on = validate_on_runs(db, cmd)) check.insert(check.end(), on->begin(), on->end());
    std::fflush(stdout);
    if (auto st = print_exit_plan(db, run_id, *p, opt.max_latency_ms, cmd.min_accuracy, check); !st)
      return failed_with(plan_failure(st.error().code == Errc::invalid_argument ? 2 : 1, user_text(st.error())));
  }
  if (joint && joint->validation_run) {  // stored as the plan's validation: its error over the assignment's splits
    p->validation_run = joint->validation_run;
    p->mape_pct = joint->mape_pct;
  }
  if (cmd.store) {
    auto id = store_plan(db, *p, joint ? &*joint : nullptr);
    if (!id) return failed_with(plan_failure(1, user_text(id.error())));
    fmt::print("stored as plan {} in {}\n", *id, db_path);
  }
  return {Status{}, p->mape_pct, p->miss_pct};
}

// --validate-on A,B,...: one plan per held-out run (a repeated series' runs), the first printed whole, then
// the error over them: median MAPE with its range, and how often the chosen split was the measured best.
Status plan_on_series(ResultsDb& db, const std::string& db_path, const PlanCommand& cmd, int64_t run_id,
                      const PlanOptions& opt, const std::string& link_name,
                      const std::optional<settings::ExperimentConfig>& exp) {
  std::vector<std::string> runs;
  std::istringstream in(cmd.validate_run);
  for (std::string r; std::getline(in, r, ',');) runs.push_back(r);
  // Every run checked before anything is planned, printed or stored.
  std::vector<int64_t> ids;
  for (const std::string& r : runs) {
    if (r.empty() || cmd.validate_run.back() == ',')
      return plan_failure(2, fmt::format("--validate-on: expected runs RUN1,RUN2,..., got '{}'", cmd.validate_run));
    auto id = validation_run_id(db, r);
    if (!id) return plan_failure(2, user_text(id.error()));
    ids.push_back(*id);
  }
  std::vector<double> mape;
  int best = 0, judged = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const PlanOutcome o = plan_and_validate(db, db_path, cmd, run_id, runs[i], opt, link_name, exp, i == 0);
    TRACR_TRY(o.status);
    if (o.mape_pct) mape.push_back(*o.mape_pct);
    if (o.miss_pct) judged += 1, best += *o.miss_pct <= 0 ? 1 : 0;
  }
  if (mape.empty()) return {};
  const double median = protocol::median_of(mape);  // sorts mape
  if (cmd.joint)
    fmt::print("over {} held-out runs: joint latency MAPE median {:.1f} % (lowest {:.1f} %, highest {:.1f} %)\n",
               mape.size(), median, mape.front(), mape.back());
  else
    fmt::print(
        "over {} held-out runs: latency MAPE median {:.1f} % (lowest {:.1f} %, highest {:.1f} %); the chosen "
        "split was the measured best in {} of {}\n",
        mape.size(), median, mape.front(), mape.back(), best, judged);
  // The floor: how far the held-out runs are from one another.
  if (auto rep = repeatability(db, ids)) {
    std::vector<double> m = rep->mape_pct;
    const double rep_median = protocol::median_of(m);
    fmt::print(
        "the held-out runs among themselves (each against the median of the others, {} splits): MAPE median {:.1f} % "
        "(lowest {:.1f} %, highest {:.1f} %); their measured best split agrees in {} of {}\n",
        rep->splits, rep_median, m.front(), m.back(), rep->best_agrees, m.size());
  }
  return {};
}

// Options the chain planners do not take, named ("" when none is given).
std::string chain_refused_option(const PlanCommand& cmd) {
  if (cmd.joint) return "--joint";
  if (cmd.plan.participant_run) return "--participant-from";
  if (cmd.plan.objective != "latency") return "--objective " + cmd.plan.objective;
  if (!cmd.plan.codecs.empty()) return "--codecs";
  if (cmd.plan.participants > 0) return "--participants";
  if (cmd.min_accuracy) return "--min-accuracy";
  return {};
}

// Stores a plan over placements unless --no-store, and says where.
Status store_chain(ResultsDb& db, const PlanCommand& cmd, const ChainPlan& p) {
  if (!cmd.store) return {};
  auto id = store_chain_plan(db, p);
  if (!id) return plan_failure(1, user_text(id.error()));
  fmt::print("stored as plan {} in {}\n", *id, db.path());
  return {};
}

// A chain run (#43): every placement predicted from its own profiles and
// frame_hops, checked against the placements it measured. What the two-tier
// planner takes beyond that is not built for chains yet, and is refused.
Status plan_chain(ResultsDb& db, const PlanCommand& cmd, int64_t run_id) {
  std::string given = !cmd.link.empty() || cmd.up_mbit ? "--link / --up-mbit" : chain_refused_option(cmd);
  if (!given.empty())
    return plan_failure(2, fmt::format("run {} ran a chain: its plan predicts every placement's latency from its own "
                                       "profiles and per-hop frames, for its own links and codecs; {} is not built for "
                                       "chains yet (#43)",
                                       run_id, given));
  // --validate-on RUN1,RUN2,...: held out (analysis/chain_plan.hpp), each run checked first.
  auto held_out = validate_on_runs(db, cmd);
  if (!held_out) return std::move(held_out.error());
  for (const int64_t id : *held_out)
    if (auto hops = db.hop_summaries(id); !hops || hops->empty())
      return plan_failure(2, fmt::format("--validate-on: run {} has no chain frames; expected a run of the same "
                                         "chain (its placements' medians are the check)",
                                         id));
  auto p = plan_chain_run(db, run_id, *held_out);
  if (!p) return plan_failure(p.error().code == Errc::invalid_argument ? 2 : 1, user_text(p.error()));
  std::fputs(format_chain_plan(*p, 10, cmd.width).c_str(), stdout);
  return store_chain(db, cmd, *p);
}

// --link for `plan --chain`: one profile for every hop or one per hop, each as
// tracr emulates it (profile_link); "probe": the hop's stored probe.
Result<std::vector<std::optional<HopLink>>> chain_links(ResultsDb& db, const PlanCommand& cmd, int64_t run_id,
                                                        const std::optional<settings::ExperimentConfig>& exp) {
  std::vector<std::optional<HopLink>> out;
  if (cmd.link.empty()) return out;
  std::vector<std::string> names;
  std::istringstream in(cmd.link);
  for (std::string l; std::getline(in, l, ',');) names.push_back(l);
  const size_t hops = cmd.chain.size();
  if (cmd.link.back() == ',' || std::find(names.begin(), names.end(), "") != names.end())
    return plan_failure(2, fmt::format("--link {}: expected link profiles P or P1,P2,... (one per hop), no empty "
                                       "entry",
                                       cmd.link));
  if (names.size() != 1 && names.size() != hops)
    return plan_failure(2, fmt::format("--link {}: {} profiles for a chain of {} hops; give one for every hop or one "
                                       "per hop",
                                       cmd.link, names.size(), hops));
  auto probes = db.probes(run_id);
  const ProbeRow* probe = probes && !probes->empty() ? &probes->front() : nullptr;
  const double base_rtt = probe ? static_cast<double>(probe->rtt_min_ns) / 1e6 : 0.0;
  const settings::ExperimentConfig ec = exp ? *exp : settings::ExperimentConfig{};
  for (size_t h = 0; h < hops; ++h) {
    const std::string& name = names[names.size() == 1 ? 0 : h];
    if (name == "probe") {
      out.emplace_back();
      continue;
    }
    auto ls = settings::resolve_link(ec, name, "--link");
    if (!ls) return plan_failure(2, user_text(ls.error()));
    const PlanLink l = profile_link(db, *ls, run_id, base_rtt, probe, 0);
    if (l.up_mbps <= 0)
      return plan_failure(2, fmt::format("--link {}: the profile leaves the rate up unlimited and run {} has no link "
                                         "probe to stand in for it; name a profile with a rate",
                                         name, run_id));
    out.push_back(HopLink{l.rtt_ms, 8.0 / (l.up_mbps * 1e3), l.source, name});
  }
  return out;
}

// plan --chain DEV,... (#43): a chain planned from two-tier runs of the same
// devices (analysis/chain_plan.hpp), checked on chain runs with --validate-on.
Status plan_new_chain(ResultsDb& db, const PlanCommand& cmd, int64_t run_id,
                      const std::optional<settings::ExperimentConfig>& exp) {
  std::string given = chain_refused_option(cmd);
  if (given.empty() && (cmd.up_mbit || cmd.down_mbit || cmd.rtt_ms))
    given = "--up-mbit / --down-mbit / --rtt-ms (name a link profile per hop: --link wifi,wan)";
  if (given.empty() && (cmd.plan.max_latency_ms || cmd.plan.max_energy_j))
    given = "--max-latency-ms / --max-energy-j (it chooses the lowest predicted latency)";
  if (given.empty() && !cmd.plan.splits.empty() && cmd.plan.splits != "all") given = "--splits";
  if (given.empty() && cmd.validate) given = "--validate (the basis ran no chain: check on a chain run, --validate-on RUN)";
  if (!given.empty())
    return plan_failure(2, fmt::format("--chain plans every placement's latency over the chain from two-tier "
                                       "profiles and links; {} is not built for it", given));
  for (const auto& d : cmd.chain)
    if (d.empty())
      return plan_failure(2, fmt::format("--chain {}: expected device names DEV1,DEV2,... (as the devices file "
                                         "names them)",
                                         fmt::join(cmd.chain, ",")));
  ChainFromRuns c;
  c.chain = cmd.chain;
  auto links = chain_links(db, cmd, run_id, exp);
  if (!links) return std::move(links.error());
  c.links = std::move(*links);
  auto check = validate_on_runs(db, cmd);
  if (!check) return std::move(check.error());
  c.check = std::move(*check);
  auto p = plan_chain_from_runs(db, run_id, c);
  if (!p) return plan_failure(p.error().code == Errc::invalid_argument ? 2 : 1, user_text(p.error()));
  std::fputs(format_chain_plan(*p, 10, cmd.width).c_str(), stdout);
  return store_chain(db, cmd, *p);
}

}  // namespace

Status cmd_plan(const PlanCommand& cmd) {
  std::string db_path = cmd.db.empty() ? default_results_db() : cmd.db, link_name = cmd.link;
  PlanOptions opt = cmd.plan;
  TRACR_TRY(check_plan_options(opt));
  std::optional<settings::ExperimentConfig> exp;
  const bool is_yaml = is_yaml_path(cmd.target);
  if (!is_yaml && !cmd.sets.empty())
    return plan_failure(2, fmt::format("--set {}: --set applies to an EXPERIMENT.yaml basis, got run '{}'",
                                       cmd.sets.front(), cmd.target));
  if (is_yaml) TRACR_TRY(load_plan_experiment(cmd, exp, db_path, link_name));
  auto db = ResultsDb::open(db_path);
  if (!db) return plan_failure(1, user_text(db.error()));
  int64_t run_id = 0;
  TRACR_TRY(find_basis_run(*db, cmd, exp, db_path, run_id));
  if (!cmd.chain.empty()) return plan_new_chain(*db, cmd, run_id, exp);
  if (auto hops = db->hop_summaries(run_id); hops && !hops->empty()) return plan_chain(*db, cmd, run_id);
  if (cmd.validate_run.find(',') == std::string::npos)
    return plan_and_validate(*db, db_path, cmd, run_id, cmd.validate_run, opt, link_name, exp, true).status;
  return plan_on_series(*db, db_path, cmd, run_id, opt, link_name, exp);
}

}  // namespace tracr::controller
