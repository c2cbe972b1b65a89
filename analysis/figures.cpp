#include "analysis/figures.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "core/atomic_file.hpp"
#include "core/text.hpp"
#include "store/export.hpp"
#include "store/statement.hpp"
#include "wire/placement.hpp"

extern char** environ;

namespace tracr::analysis {

using namespace tracr::core;  // the floors below, by their short names
using namespace tracr::store;

namespace {

// The stages a frame's total time is made of (record_fields.def's timing identity).
const std::pair<const char*, const char*> kStages[] = {
    {"head_ns", "head"},   {"encode_ns", "encode"}, {"network_ns", "network"}, {"server_ns", "server"},
    {"queue_ns", "queue"}, {"return_ns", "return"}, {"post_ns", "post"}};

std::string num(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : ""; }
std::string ms(double ns) { return num(ns / 1e6); }

// The newest validated plan of a run: per split, predicted and measured ms.
struct PlanPoints {
  int64_t id = 0;
  std::string link;
  double mape = 0;
  std::vector<int> splits;
  std::vector<double> predicted, measured;
};
PlanPoints newest_plan(ResultsDb& db, int64_t run) {
  PlanPoints p;
  sqlite3* h = db.handle();
  // Validated against this run's measurements: on its own basis, or held out
  // from another run (plans.validation_run, schema 11; NULL: the basis). A
  // database from before schema 11, read without migrating, has the basis only.
  const bool has_validation_run = Statement(h, "SELECT validation_run FROM plans LIMIT 0").prepared();
  Statement plan(h, has_validation_run
                        ? "SELECT id, COALESCE(link, ''), mape_pct FROM plans WHERE COALESCE(validation_run, "
                          "basis_run) = ? AND mape_pct IS NOT NULL ORDER BY id DESC LIMIT 1"
                        : "SELECT id, COALESCE(link, ''), mape_pct FROM plans WHERE basis_run = ? AND mape_pct IS "
                          "NOT NULL ORDER BY id DESC LIMIT 1");
  if (!plan.prepared()) return p;  // a database from before plans existed
  plan.bind(1, run);
  if (plan.next_row()) {
    p.id = plan.i64(0);
    p.link = plan.text(1);
    p.mape = plan.dbl(2);
  }
  if (!p.id) return p;
  Statement rows(h,
                 "SELECT split, latency_ms, measured_ms FROM plan_rows WHERE plan_id = ? AND measured_ms IS NOT NULL "
                 "ORDER BY split");
  rows.bind(1, p.id);
  while (rows.next_row()) {
    p.splits.push_back(static_cast<int>(rows.i64(0)));
    p.predicted.push_back(rows.dbl(1));
    p.measured.push_back(rows.dbl(2));
  }
  return p;
}

struct RunData {
  RunRow run;
  std::string label;  // legend label
  std::vector<SplitSummary> sums;
  std::map<int, std::string> cuts;  // split -> name of the last participant layer
  std::vector<EnergyStat> energy;
  std::vector<FrameRecord> frames;
  PlanPoints plan;
  std::vector<std::vector<std::optional<std::string>>> train_steps, train_epochs;
};

// Legend labels: "#id name" plus the attributes that differ between the runs.
void label_runs(std::vector<RunData>& runs) {
  auto differs = [&](auto get) {
    for (const auto& r : runs)
      if (get(r.run) != get(runs.front().run)) return true;
    return false;
  };
  const bool model = differs([](const RunRow& r) { return r.model; });
  const bool link = differs([](const RunRow& r) { return r.link; });
  const bool codec = differs([](const RunRow& r) { return r.codec; });
  for (auto& r : runs) {
    r.label = fmt::format("#{} {}", r.run.id, r.run.name);
    std::vector<std::string> extra;
    if (model) extra.push_back(r.run.model);
    if (link) extra.push_back(r.run.link.empty() ? "link as is" : r.run.link);
    if (codec) extra.push_back(r.run.codec);
    if (!extra.empty()) r.label += fmt::format(" ({})", fmt::join(extra, ", "));
  }
}

// A placement's cut points (a two-tier run's: {split}); the figures' x axis
// is placements, each a split on a two-tier run.
using Cuts = std::vector<int>;
std::string cuts_text(const Cuts& k) {
  std::string out;
  for (int c : k) out += (out.empty() ? "" : "|") + std::to_string(c);
  return out;
}
Cuts cuts_of(const std::string& placement, int64_t split) {
  auto p = wire::parse_placement(placement);
  return p && !p->cuts.empty() ? p->cuts : Cuts{static_cast<int>(split)};
}

// The placement axis shared by the figures: every placement (split) any run
// measured, each cut named by the layer it cuts after when the runs agree on
// that name.
struct SplitAxis {
  std::vector<Cuts> splits;
  std::vector<std::string> labels;
  std::map<Cuts, size_t> index;
  static std::string layer_of(const std::vector<RunData>& runs, int split) {
    if (split == 0) return "(input)";
    for (const auto& r : runs)
      if (auto it = r.cuts.find(split); it != r.cuts.end()) return it->second;
    return {};
  }
  std::string layer(const std::vector<RunData>& runs, const Cuts& k) const {
    std::string out;
    for (int c : k) out += (out.empty() ? "" : " | ") + layer_of(runs, c);
    return out;
  }
};
SplitAxis split_axis(const std::vector<RunData>& runs, const std::set<Cuts>& splits) {
  SplitAxis a;
  a.splits.assign(splits.begin(), splits.end());
  for (size_t i = 0; i < a.splits.size(); ++i) {
    const Cuts& k = a.splits[i];
    a.index[k] = i;
    if (k.size() > 1) {  // a chain's placement: its cut points (the layer names would not fit a tick)
      a.labels.push_back(cuts_text(k));
      continue;
    }
    std::set<std::string> names;
    for (const auto& r : runs)
      if (auto it = r.cuts.find(k.front()); it != r.cuts.end()) names.insert(it->second);
    if (k.front() == 0)
      a.labels.push_back("0 (input)");
    else if (names.size() == 1)
      a.labels.push_back(fmt::format("{} {}", k.front(), *names.begin()));
    else
      a.labels.push_back(std::to_string(k.front()));
  }
  return a;
}

std::set<Cuts> measured_splits(const std::vector<RunData>& runs) {
  std::set<Cuts> s;
  for (const auto& r : runs)
    for (const auto& x : r.sums)
      if (x.frames > 0) s.insert(x.key());
  return s;
}

std::string run_cells(const RunRow& r) { return fmt::format("{}", r.id); }

Figure latency_figure(const std::vector<RunData>& runs, const SplitAxis& ax) {
  Figure f{"latency", "End-to-end latency per split: median with a whisker to the 95th percentile (ms, participant's "
                      "monotonic clock, timed frames)", {}, {}, {}};
  f.chart.kind = svg::Kind::line;
  f.chart.x_label = "split (cut after layer)";
  f.chart.y_label = "latency per frame";
  f.chart.y_unit = svg::Unit::ms;
  f.chart.categories = ax.labels;
  f.csv_header = {"run", "name", "model", "link", "codec", "split", "layer", "frames", "median_ms", "p95_ms"};
  for (const auto& r : runs) {
    svg::Series s{r.label, {}, false};
    for (const auto& x : r.sums) {
      if (x.frames <= 0) continue;
      const auto& t = x.stage("total_ns");
      s.points.push_back({static_cast<double>(ax.index.at(x.key())), t.median_ns / 1e6, t.p95_ns / 1e6, 0});
      f.csv_rows.push_back({run_cells(r.run), r.run.name, r.run.model, r.run.link, r.run.codec,
                            cuts_text(x.key()), ax.layer(runs, x.key()), std::to_string(x.frames), ms(t.median_ns),
                            ms(t.p95_ns)});
    }
    f.chart.series.push_back(std::move(s));
  }
  return f;
}

Figure stages_figure(const std::vector<RunData>& runs, const SplitAxis& ax) {
  Figure f{"stages", "Median time of each stage per split, stacked, one bar per run (ms; stages with no time in any run "
                     "are left out)", {}, {}, {}};
  f.chart.kind = svg::Kind::stacked_bars;
  f.chart.x_label = "split (cut after layer)";
  f.chart.y_label = "median time per frame";
  f.chart.y_unit = svg::Unit::ms;
  f.chart.categories = ax.labels;
  for (const auto& r : runs) f.chart.groups.push_back(fmt::format("#{}", r.run.id));
  f.csv_header = {"run", "split", "layer", "stage", "median_ms", "p95_ms"};
  for (const auto& [field, name] : kStages) {
    svg::Series s{name, {}, false};
    bool occurs = false;
    for (size_t ri = 0; ri < runs.size(); ++ri)
      for (const auto& x : runs[ri].sums) {
        if (x.frames <= 0 || !x.stages.count(field)) continue;
        const auto& st = x.stage(field);
        occurs = occurs || st.median_ns > 0;
        s.points.push_back({static_cast<double>(ax.index.at(x.key())), st.median_ns / 1e6, std::nullopt, ri});
        f.csv_rows.push_back({run_cells(runs[ri].run), cuts_text(x.key()), ax.layer(runs, x.key()), name,
                              ms(st.median_ns), ms(st.p95_ns)});
      }
    if (occurs) f.chart.series.push_back(std::move(s));
  }
  return f;
}

Figure bytes_figure(const std::vector<RunData>& runs, const SplitAxis& ax) {
  Figure f{"bytes", "Bytes crossing the cut per frame: the request on the wire per run and codec, and the raw tensors "
                    "before the codec per model (mean over timed frames, measured by the participant)", {}, {}, {}};
  f.chart.kind = svg::Kind::bars;
  f.chart.x_label = "split (cut after layer)";
  f.chart.y_label = "bytes per frame";
  f.chart.y_unit = svg::Unit::bytes;
  f.chart.categories = ax.labels;
  f.csv_header = {"run", "model", "codec", "split", "layer", "mean_raw_bytes", "mean_wire_bytes", "ratio"};
  std::set<std::string> raw_done;
  for (const auto& r : runs) {
    // The codec is named once: in the label when the runs differ in it, else here.
    const bool named = r.label.find(r.run.codec) != std::string::npos;
    svg::Series wire{named ? "wire " + r.label : fmt::format("wire {} [{}]", r.label, r.run.codec), {}, false};
    svg::Series raw{fmt::format("raw ({})", r.run.model), {}, false};
    for (const auto& x : r.sums) {
      if (x.frames <= 0) continue;
      const double i = static_cast<double>(ax.index.at(x.key()));
      wire.points.push_back({i, x.mean_wire_bytes, std::nullopt, 0});
      raw.points.push_back({i, x.mean_raw_bytes, std::nullopt, 0});
      f.csv_rows.push_back({run_cells(r.run), r.run.model, r.run.codec, cuts_text(x.key()), ax.layer(runs, x.key()),
                            num(x.mean_raw_bytes), num(x.mean_wire_bytes),
                            x.mean_wire_bytes > 0 ? num(x.mean_raw_bytes / x.mean_wire_bytes) : ""});
    }
    if (raw_done.insert(r.run.model).second) f.chart.series.push_back(std::move(raw));
    f.chart.series.push_back(std::move(wire));
  }
  return f;
}

Figure energy_figure(const std::vector<RunData>& runs, const SplitAxis& ax) {
  Figure f{"energy", "Median energy per frame and split, per device and stage; each series names its source "
                     "(measured:<meter> or modelled:<model>)", {}, {}, {}};
  f.chart.kind = svg::Kind::bars;
  f.chart.x_label = "split (cut after layer)";
  f.chart.y_label = "energy per frame";
  f.chart.y_unit = svg::Unit::joules;
  f.chart.categories = ax.labels;
  f.csv_header = {"run", "split", "layer", "device", "stage", "source", "frames", "median_j", "p95_j"};
  for (const auto& r : runs) {
    std::map<std::string, svg::Series> series;
    for (const auto& e : r.energy) {
      const Cuts k = cuts_of(e.placement, e.split);
      if (!e.median_j || !ax.index.count(k)) continue;
      const std::string name = fmt::format("#{} {} {} [{}]", r.run.id, e.device, e.stage, e.source);
      auto& s = series[name];
      s.name = name;
      s.points.push_back({static_cast<double>(ax.index.at(k)), *e.median_j, std::nullopt, 0});
      f.csv_rows.push_back({run_cells(r.run), cuts_text(k), ax.layer(runs, k),
                            e.device, e.stage, e.source, std::to_string(e.n), num(*e.median_j),
                            e.p95_j ? num(*e.p95_j) : ""});
    }
    for (auto& [name, s] : series) f.chart.series.push_back(std::move(s));
  }
  return f;
}

Figure accuracy_figure(const std::vector<RunData>& runs) {
  Figure f{"accuracy", "Top-1 accuracy against bytes on the wire, one point per run and split, one series per codec "
                       "(timed frames with a label; bytes: mean request size of those frames)", {}, {}, {}};
  f.chart.kind = svg::Kind::scatter;
  f.chart.log_x = true;
  f.chart.x_label = "request bytes on the wire per frame (log scale)";
  f.chart.x_unit = svg::Unit::bytes;
  f.chart.y_label = "top-1 accuracy";
  f.chart.y_unit = svg::Unit::percent;
  f.csv_header = {"run", "split", "codec", "samples", "top1_correct", "top1_pct", "top5_correct", "mean_wire_bytes"};
  std::map<std::string, svg::Series> by_codec;
  for (const auto& r : runs) {
    struct Acc {
      int64_t samples = 0, top1 = 0, top5 = 0, frames = 0;
      double bytes = 0;
    };
    std::map<std::pair<int64_t, std::string>, Acc> acc;
    for (const auto& fr : r.frames) {
      if (!fr.ok || fr.warmup || fr.correct < 0) continue;
      auto& a = acc[{fr.split, fr.codec}];
      a.samples += fr.batch;
      a.top1 += fr.correct;
      a.top5 += std::max<int64_t>(fr.top5_correct, 0);
      a.frames += 1;
      a.bytes += static_cast<double>(fr.wire_bytes);
    }
    for (const auto& [k, a] : acc) {
      if (a.samples <= 0) continue;
      const double bytes = a.bytes / static_cast<double>(a.frames);
      const double pct = 100.0 * static_cast<double>(a.top1) / static_cast<double>(a.samples);
      auto& s = by_codec[k.second];
      s.name = k.second;
      s.points.push_back({bytes, pct, std::nullopt, 0});
      f.csv_rows.push_back({run_cells(r.run), std::to_string(k.first), k.second, std::to_string(a.samples),
                            std::to_string(a.top1), num(pct), std::to_string(a.top5), num(bytes)});
    }
  }
  for (auto& [c, s] : by_codec) f.chart.series.push_back(std::move(s));
  return f;
}

void plan_figures(const std::vector<RunData>& runs, std::vector<Figure>& out) {
  std::set<Cuts> splits;
  for (const auto& r : runs)
    for (int k : r.plan.splits) splits.insert(Cuts{k});
  if (splits.empty()) return;
  const SplitAxis ax = split_axis(runs, splits);
  Figure f{"plan", "Predicted (dashed: the run's newest validated plan) against measured median latency per split (ms)",
           {}, {}, {}};
  f.chart.kind = svg::Kind::line;
  f.chart.x_label = "split (cut after layer)";
  f.chart.y_label = "latency per frame";
  f.chart.y_unit = svg::Unit::ms;
  f.chart.categories = ax.labels;
  f.csv_header = {"run", "plan", "link", "split", "layer", "predicted_ms", "measured_ms", "error_pct"};
  Figure e{"plan_error", "Plan error per split: (predicted - measured) / measured, in % of the measured median", {}, {},
           {}};
  e.chart.kind = svg::Kind::bars;
  e.chart.x_label = f.chart.x_label;
  e.chart.y_label = "prediction error";
  e.chart.y_unit = svg::Unit::percent;
  e.chart.categories = ax.labels;
  for (const auto& r : runs) {
    if (!r.plan.id) continue;
    const std::string tag = fmt::format("{} plan {} ({}, MAPE {:.1f} %)", r.label, r.plan.id,
                                        r.plan.link.empty() ? "link as is" : r.plan.link, r.plan.mape);
    svg::Series pred{"predicted " + tag, {}, true}, meas{"measured " + r.label, {}, false}, err{tag, {}, false};
    for (size_t i = 0; i < r.plan.splits.size(); ++i) {
      const double x = static_cast<double>(ax.index.at(Cuts{r.plan.splits[i]}));
      const double p = r.plan.predicted[i], m = r.plan.measured[i];
      const double pct = m > 0 ? 100.0 * (p - m) / m : NAN;
      pred.points.push_back({x, p, std::nullopt, 0});
      meas.points.push_back({x, m, std::nullopt, 0});
      err.points.push_back({x, pct, std::nullopt, 0});
      f.csv_rows.push_back({run_cells(r.run), std::to_string(r.plan.id), r.plan.link, std::to_string(r.plan.splits[i]),
                            ax.layer(runs, Cuts{r.plan.splits[i]}), num(p), num(m), num(pct)});
    }
    f.chart.series.push_back(std::move(pred));
    f.chart.series.push_back(std::move(meas));
    e.chart.series.push_back(std::move(err));
  }
  e.csv_header = f.csv_header;
  e.csv_rows = f.csv_rows;
  out.push_back(std::move(f));
  out.push_back(std::move(e));
}

// Runs whose split was not only swept: commands, the adaptive policy.
void timeline_figures(const std::vector<RunData>& runs, std::vector<Figure>& out) {
  Figure s{"timeline_split", "Split in use over the run (runs whose split was set by a command or a policy; time since "
                             "the participant's first frame, its monotonic clock)", {}, {}, {}};
  s.chart.kind = svg::Kind::step;
  s.chart.x_label = "time since the first frame";
  s.chart.x_unit = svg::Unit::seconds;
  s.chart.y_label = "split";
  s.csv_header = {"run", "participant", "frame", "t_s", "split", "policy", "codec", "link_est_mbps"};
  Figure l{"timeline_link", "Running link estimate of those runs (request and reply wire bytes over network time, "
                            "participant)", {}, {}, {}};
  l.chart.kind = svg::Kind::step;
  l.chart.x_label = s.chart.x_label;
  l.chart.x_unit = svg::Unit::seconds;
  l.chart.y_label = "link estimate";
  l.chart.y_unit = svg::Unit::mbps;
  for (const auto& r : runs) {
    bool adaptive = false;
    for (const auto& fr : r.frames) adaptive = adaptive || fr.policy != "sweep";
    if (!adaptive) continue;
    std::map<std::string, int64_t> t0;
    for (const auto& fr : r.frames) {
      auto [it, fresh] = t0.emplace(fr.participant, fr.start_ns);
      if (!fresh) it->second = std::min(it->second, fr.start_ns);
    }
    std::map<std::string, svg::Series> sp, lk;
    for (const auto& fr : r.frames) {
      const double t = static_cast<double>(fr.start_ns - t0[fr.participant]) / 1e9;
      const std::string name = t0.size() > 1 ? fmt::format("{} {}", r.label, fr.participant) : r.label;
      sp[name].name = name;
      sp[name].points.push_back({t, static_cast<double>(fr.split), std::nullopt, 0});
      if (fr.link_est_mbps) {
        lk[name].name = name;
        lk[name].points.push_back({t, *fr.link_est_mbps, std::nullopt, 0});
      }
      s.csv_rows.push_back({run_cells(r.run), fr.participant, std::to_string(fr.frame), num(t), std::to_string(fr.split),
                            fr.policy, fr.codec, fr.link_est_mbps ? num(*fr.link_est_mbps) : ""});
    }
    for (auto& [n, x] : sp) s.chart.series.push_back(std::move(x));
    for (auto& [n, x] : lk) l.chart.series.push_back(std::move(x));
  }
  if (s.chart.series.empty()) return;
  const bool link = !l.chart.series.empty();
  l.csv_header = s.csv_header;
  l.csv_rows = s.csv_rows;
  out.push_back(std::move(s));
  if (link) out.push_back(std::move(l));
}

// Split training: loss per step and test accuracy per epoch, per data owner.
void train_figures(const RunData& r, std::vector<Figure>& out) {
  if (!r.train_steps.empty()) {
    Figure f{fmt::format("train_loss_{}", r.run.id),
             fmt::format("Run {}: training loss per step (cross-entropy of each batch, on the data owner)", r.run.id),
             {}, {}, {}};
    f.chart.kind = svg::Kind::scatter;
    f.chart.join = true;
    f.chart.x_label = "step";
    f.chart.y_label = "loss";
    f.csv_header = {"run", "owner", "step", "loss"};
    std::map<std::string, svg::Series> by_owner;
    static const size_t kOwner = column_of("train_steps", "owner"), kStep = column_of("train_steps", "step"),
                        kLoss = column_of("train_steps", "loss");
    for (const auto& row : r.train_steps)
      if (row[kStep] && row[kLoss]) {
        const std::string owner = row[kOwner].value_or("?");
        by_owner[owner].name = "loss, owner " + owner;
        by_owner[owner].points.push_back({std::stod(*row[kStep]), std::stod(*row[kLoss]), std::nullopt, 0});
        f.csv_rows.push_back({run_cells(r.run), owner, *row[kStep], *row[kLoss]});
      }
    for (auto& [o, s] : by_owner) f.chart.series.push_back(std::move(s));
    if (!f.csv_rows.empty()) out.push_back(std::move(f));
  }
  if (!r.train_epochs.empty()) {
    Figure f{fmt::format("train_accuracy_{}", r.run.id),
             fmt::format("Run {}: test accuracy after each epoch (owner 0)", r.run.id), {}, {}, {}};
    f.chart.kind = svg::Kind::scatter;
    f.chart.join = true;
    f.chart.x_label = "epoch";
    f.chart.y_label = "accuracy";
    f.chart.y_unit = svg::Unit::percent;
    f.csv_header = {"run", "epoch", "top1", "top5"};
    svg::Series t1{"top-1", {}, false}, t5{"top-5", {}, false};
    static const size_t kOwner = column_of("train_epochs", "owner"), kEpoch = column_of("train_epochs", "epoch"),
                        kTop1 = column_of("train_epochs", "test_acc"), kTop5 = column_of("train_epochs", "test_top5");
    for (const auto& row : r.train_epochs)
      if (row[kOwner].value_or("") == "0" && row[kEpoch]) {
        const double ep = std::stod(*row[kEpoch]);
        if (row[kTop1]) t1.points.push_back({ep, 100 * std::stod(*row[kTop1]), std::nullopt, 0});
        if (row[kTop5]) t5.points.push_back({ep, 100 * std::stod(*row[kTop5]), std::nullopt, 0});
        f.csv_rows.push_back({run_cells(r.run), *row[kEpoch], row[kTop1].value_or(""), row[kTop5].value_or("")});
      }
    f.chart.series.push_back(std::move(t1));
    if (!t5.points.empty()) f.chart.series.push_back(std::move(t5));
    if (!f.csv_rows.empty()) out.push_back(std::move(f));
  }
}

bool has_points(const Figure& f) {
  for (const auto& s : f.chart.series)
    if (!s.points.empty()) return true;
  return false;
}

}  // namespace

Result<std::vector<Figure>> build_figures(ResultsDb& db, const std::vector<int64_t>& ids) {
  std::vector<RunData> runs;
  for (int64_t id : ids) {
    RunData d;
    auto run = db.get_run(id);
    if (!run) return std::move(run.error());
    d.run = std::move(*run);
    auto sums = db.split_table(id);
    if (!sums) return std::move(sums.error());
    d.sums = std::move(*sums);
    auto cuts = cut_names(db, id);
    if (!cuts) return std::move(cuts.error());
    d.cuts = std::move(*cuts);
    auto es = db.energy_stats(id);
    if (es) d.energy = std::move(*es);
    auto fr = db.frames(id);
    if (!fr) return std::move(fr.error());
    d.frames = std::move(*fr);
    d.plan = newest_plan(db, id);
    if (auto ts = db.rows("train_steps", id)) d.train_steps = std::move(*ts);
    if (auto te = db.rows("train_epochs", id)) d.train_epochs = std::move(*te);
    runs.push_back(std::move(d));
  }
  label_runs(runs);
  std::vector<Figure> figs;
  const std::set<Cuts> splits = measured_splits(runs);
  if (!splits.empty()) {
    const SplitAxis ax = split_axis(runs, splits);
    figs.push_back(latency_figure(runs, ax));
    figs.push_back(stages_figure(runs, ax));
    figs.push_back(bytes_figure(runs, ax));
    figs.push_back(energy_figure(runs, ax));
  }
  figs.push_back(accuracy_figure(runs));
  plan_figures(runs, figs);
  timeline_figures(runs, figs);
  for (const auto& r : runs) train_figures(r, figs);
  std::vector<Figure> out;
  for (auto& f : figs)
    if (has_points(f)) out.push_back(std::move(f));
  return out;
}

std::string figure_csv(const Figure& f) {
  std::string o;
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) o += (i ? "," : "") + csv_field(cells[i]);
    o += "\r\n";  // RFC 4180
  };
  line(f.csv_header);
  for (const auto& r : f.csv_rows) line(r);
  return o;
}

namespace {

// Whether `prog` names an executable: a path, or a name found on $PATH.
bool on_path(const std::string& prog) {
  if (prog.find('/') != std::string::npos) return ::access(prog.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  size_t pos = 0;
  while (pos <= dirs.size()) {
    size_t colon = dirs.find(':', pos);
    if (colon == std::string::npos) colon = dirs.size();
    const std::string dir = colon > pos ? dirs.substr(pos, colon - pos) : ".";
    if (::access((dir + "/" + prog).c_str(), X_OK) == 0) return true;
    pos = colon + 1;
  }
  return false;
}

// Runs argv (no shell), its stdout and stderr read into `out`; the exit
// status, or -1 when it could not start (`out` then says why).
int run_program(const std::vector<std::string>& argv, std::string& out) {
  int fds[2];
  if (::pipe(fds) != 0) {
    out = std::strerror(errno);
    return -1;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  posix_spawn_file_actions_addclose(&fa, fds[1]);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    out = std::strerror(rc);
    return -1;
  }
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  out += fmt::format(" (killed by signal {})", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

}  // namespace

Status write_figures(const std::vector<Figure>& figs, const std::string& dir, const std::string& rsvg) {
  if (!on_path(rsvg))
    return make_error(Errc::not_found,
                      fmt::format("{} is not installed, and it turns the figures' SVG into PDF: install Debian's "
                                  "librsvg2-bin (apt-get install librsvg2-bin; scripts/setup.sh does)",
                                  rsvg));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return make_error(Errc::io, fmt::format("cannot create the figures folder {}: {}", dir, ec.message()));
  for (const auto& f : figs) {
    const std::string stem = (std::filesystem::path(dir) / f.id).string();
    if (auto st = write_file(stem + ".svg", svg::render(f.chart)); !st) return st;
    if (auto st = write_file(stem + ".csv", figure_csv(f)); !st) return st;
    std::string text;
    if (run_program({rsvg, "-f", "pdf", "-o", stem + ".pdf", stem + ".svg"}, text) != 0)
      return make_error(Errc::io, fmt::format("could not convert {}.svg to PDF with {}: {}", stem, rsvg, text));
  }
  return {};
}

}  // namespace tracr::analysis
