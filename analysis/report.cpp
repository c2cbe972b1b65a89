#include "analysis/report.hpp"


#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "settings/config.hpp"
#include "store/statement.hpp"

namespace tracr::analysis {

using namespace tracr::store;  // the floors below, by their short names

namespace {

std::string html(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// A JSON string that is also safe inside <script> (no "</script>").
std::string js(const std::string& s) {
  std::string q = settings::json_quote(s);
  for (size_t i = 0; (i = q.find("</", i)) != std::string::npos; i += 3) q.replace(i, 2, "<\\/");
  return q;
}

std::string num(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : "null"; }

std::string arr(const std::vector<double>& v) {
  std::string o = "[";
  for (size_t i = 0; i < v.size(); ++i) o += (i ? "," : "") + num(v[i]);
  return o + "]";
}

std::string labels(const std::vector<int>& v) {
  std::string o = "[";
  for (size_t i = 0; i < v.size(); ++i) o += (i ? "," : "") + std::to_string(v[i]);
  return o + "]";
}

struct Chart {
  std::string id, title, type, json;  // json: the Chart.js config
};

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
  Statement plan(h,
                 "SELECT id, COALESCE(link, ''), mape_pct FROM plans WHERE basis_run = ? AND mape_pct IS NOT NULL "
                 "ORDER BY id DESC LIMIT 1");
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

const char* kColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
                         "#9c755f", "#bab0ac"};

std::string dataset(const std::string& label, const std::vector<double>& data, size_t color, const std::string& extra = "") {
  return fmt::format("{{\"label\":{},\"data\":{},\"backgroundColor\":\"{}\",\"borderColor\":\"{}\"{}}}", js(label),
                     arr(data), kColors[color % 10], kColors[color % 10], extra);
}

std::string bar_config(const std::vector<int>& x, const std::vector<std::string>& sets, bool stacked,
                       const std::string& xlabel, const std::string& ylabel) {
  std::string ds;
  for (size_t i = 0; i < sets.size(); ++i) ds += (i ? "," : "") + sets[i];
  return fmt::format(
      "{{\"type\":\"bar\",\"data\":{{\"labels\":{},\"datasets\":[{}]}},\"options\":{{\"animation\":false,"
      "\"responsive\":false,\"scales\":{{\"x\":{{\"stacked\":{},\"title\":{{\"display\":true,\"text\":{}}}}},"
      "\"y\":{{\"stacked\":{},\"title\":{{\"display\":true,\"text\":{}}}}}}}}}}}",
      labels(x), ds, stacked ? "true" : "false", js(xlabel), stacked ? "true" : "false", js(ylabel));
}

}  // namespace

Result<std::string> render_report(ResultsDb& db, const std::vector<int64_t>& runs, const std::string& chartjs_path) {
  std::ifstream cj(chartjs_path, std::ios::binary);
  if (!cj)
    return make_error(Errc::not_found, fmt::format("Chart.js not found at {}: install Debian's libjs-chart.js "
                                                   "(apt-get install libjs-chart.js; scripts/setup.sh does)",
                                                   chartjs_path));
  std::stringstream chartjs;
  chartjs << cj.rdbuf();
  std::string body;
  std::vector<Chart> charts;
  for (int64_t run_id : runs) {
    std::vector<Chart> rc;  // this run's charts
    auto run = db.get_run(run_id);
    if (!run) return std::move(run.error());
    auto sums = db.split_table(run_id);
    if (!sums) return std::move(sums.error());
    body += fmt::format("<section class=\"run\"><h2>Run {}: {}</h2>\n<p>{} &middot; model {} &middot; codec {} "
                        "&middot; cipher {}{} &middot; started {} &middot; {} frames</p>\n",
                        run_id, html(run->name), run_status_name(run->status), html(run->model), html(run->codec),
                        html(run->cipher),
                        run->link.empty() ? "" : " &middot; link " + html(run->link) + " (" + html(run->shaping) + ")",
                        html(run->started_at), run->frame_count);
    // Time per split, stacked by stage.
    std::vector<int> splits;
    for (const auto& s : *sums)
      if (s.frames > 0) splits.push_back(s.split);
    if (!splits.empty()) {
      static const std::pair<const char*, const char*> stages[] = {
          {"head_ns", "head"},   {"encode_ns", "encode"}, {"network_ns", "network"}, {"server_ns", "server"},
          {"queue_ns", "queue"}, {"return_ns", "return"}, {"post_ns", "post"}};
      std::vector<std::string> sets;
      size_t c = 0;
      for (const auto& [field, name] : stages) {
        std::vector<double> v;
        for (const auto& s : *sums)
          if (s.frames > 0) v.push_back(s.stage(field).median_ns / 1e6);
        sets.push_back(dataset(name, v, c++));
      }
      rc.push_back({fmt::format("time{}", run_id), "Median time per split, by stage (ms)", "bar",
                        bar_config(splits, sets, true, "split", "ms")});
      std::vector<double> raw, wire;
      for (const auto& s : *sums)
        if (s.frames > 0) {
          raw.push_back(s.mean_raw_bytes);
          wire.push_back(s.mean_wire_bytes);
        }
      rc.push_back({fmt::format("bytes{}", run_id), "Bytes crossing the cut per split (codec " + run->codec + ")",
                        "bar",
                        bar_config(splits, {dataset("raw bytes", raw, 0), dataset("wire bytes", wire, 1)}, false,
                                   "split", "bytes")});
    }
    // Energy per split: one series per device, stage and source (the label is part of the series name).
    auto es = db.energy_stats(run_id);
    if (es && !es->empty()) {
      std::map<std::string, std::map<int64_t, double>> series;
      std::set<int64_t> esplits;
      for (const auto& e : *es) {
        if (!e.median_j) continue;
        series[fmt::format("{} {} [{}]", e.device, e.stage, e.source)][e.split] = *e.median_j;
        esplits.insert(e.split);
      }
      std::vector<int> x(esplits.begin(), esplits.end());
      std::vector<std::string> sets;
      size_t c = 0;
      for (const auto& [name, m] : series) {
        std::vector<double> v;
        for (int k : x) v.push_back(m.count(k) ? m.at(k) : 0.0);
        sets.push_back(dataset(name, v, c++));
      }
      rc.push_back({fmt::format("energy{}", run_id), "Median energy per frame and split (J), each series with its source",
                        "bar", bar_config(x, sets, false, "split", "J")});
    }
    // Predicted against measured.
    const PlanPoints pp = newest_plan(db, run_id);
    if (pp.id) {
      const std::string cfg = fmt::format(
          "{{\"type\":\"line\",\"data\":{{\"labels\":{},\"datasets\":[{},{}]}},\"options\":{{\"animation\":false,"
          "\"responsive\":false,\"scales\":{{\"x\":{{\"title\":{{\"display\":true,\"text\":\"split\"}}}},\"y\":{{"
          "\"title\":{{\"display\":true,\"text\":\"ms\"}}}}}}}}}}",
          labels(pp.splits), dataset("predicted (plan " + std::to_string(pp.id) + ")", pp.predicted, 2, ",\"fill\":false"),
          dataset("measured median", pp.measured, 0, ",\"fill\":false"));
      rc.push_back({fmt::format("plan{}", run_id),
                        fmt::format("Predicted against measured latency (plan {}, link {}, MAPE {:.1f} %)", pp.id,
                                    pp.link, pp.mape),
                        "line", cfg});
    }
    // Split and link estimate over the run (an adaptive or commanded run shows its switches here).
    auto frames = db.frames(run_id);
    if (frames && !frames->empty()) {
      std::string pts_split, pts_est;
      for (const auto& f : *frames) {
        const double t = static_cast<double>(f.start_ns) / 1e9;
        pts_split += fmt::format("{}{{\"x\":{},\"y\":{}}}", pts_split.empty() ? "" : ",", num(t), f.split);
        if (f.link_est_mbps)
          pts_est += fmt::format("{}{{\"x\":{},\"y\":{}}}", pts_est.empty() ? "" : ",", num(t), num(*f.link_est_mbps));
      }
      const std::string cfg = fmt::format(
          "{{\"type\":\"scatter\",\"data\":{{\"datasets\":[{{\"label\":\"split\",\"data\":[{}],\"yAxisID\":\"y\","
          "\"backgroundColor\":\"{}\",\"showLine\":true,\"stepped\":true}},{{\"label\":\"link estimate (Mbit/s)\","
          "\"data\":[{}],\"yAxisID\":\"y1\",\"backgroundColor\":\"{}\"}}]}},\"options\":{{\"animation\":false,"
          "\"responsive\":false,\"scales\":{{\"x\":{{\"title\":{{\"display\":true,\"text\":\"s since the "
          "participant's run start\"}}}},\"y\":{{\"position\":\"left\",\"title\":{{\"display\":true,\"text\":\"split\"}}}},"
          "\"y1\":{{\"position\":\"right\",\"type\":\"logarithmic\",\"title\":{{\"display\":true,\"text\":\"Mbit/s\"}}}}}}}}}}",
          pts_split, kColors[0], pts_est, kColors[1]);
      rc.push_back({fmt::format("timeline{}", run_id), "Split and running link estimate over the run's frames",
                        "scatter", cfg});
    }
    // Split training: loss per step and test accuracy per epoch, per data owner.
    auto tsteps = db.rows("train_steps", run_id);
    auto tepochs = db.rows("train_epochs", run_id);
    if (tsteps && !tsteps->empty()) {
      std::map<std::string, std::string> pts;  // owner -> points
      for (const auto& r : *tsteps)
        if (r[2] && r[5])
          pts[r[1].value_or("?")] += fmt::format("{}{{\"x\":{},\"y\":{}}}", pts[r[1].value_or("?")].empty() ? "" : ",",
                                                 *r[2], num(std::stod(*r[5])));
      std::string sets;
      size_t c = 0;
      for (const auto& [owner, p] : pts) {
        const char* color = kColors[c++ % std::size(kColors)];
        sets += fmt::format("{}{{\"label\":\"loss, owner {}\",\"data\":[{}],\"showLine\":true,\"pointRadius\":0,"
                            "\"borderColor\":\"{}\",\"backgroundColor\":\"{}\"}}",
                            sets.empty() ? "" : ",", owner, p, color, color);
      }
      rc.push_back({fmt::format("trainloss{}", run_id), "Training loss per step (cross-entropy of each batch, on the data owner)",
                    "scatter",
                    fmt::format("{{\"type\":\"scatter\",\"data\":{{\"datasets\":[{}]}},\"options\":{{\"animation\":false,"
                                "\"responsive\":false,\"scales\":{{\"x\":{{\"title\":{{\"display\":true,\"text\":\"step\"}}}},"
                                "\"y\":{{\"title\":{{\"display\":true,\"text\":\"loss\"}}}}}}}}}}",
                                sets)});
    }
    if (tepochs && !tepochs->empty()) {
      std::vector<int> x;
      std::vector<double> acc, top5;
      for (const auto& r : *tepochs)
        if (r[1].value_or("") == "0") {
          x.push_back(std::stoi(r[2].value_or("0")));
          acc.push_back(r[7] ? std::stod(*r[7]) : NAN);
          top5.push_back(r[8] ? std::stod(*r[8]) : NAN);
        }
      if (!x.empty())
        rc.push_back({fmt::format("trainacc{}", run_id), "Test accuracy after each epoch (owner 0)", "line",
                      fmt::format("{{\"type\":\"line\",\"data\":{{\"labels\":{},\"datasets\":[{},{}]}},\"options\":{{"
                                  "\"animation\":false,\"responsive\":false,\"scales\":{{\"x\":{{\"title\":{{\"display\":"
                                  "true,\"text\":\"epoch\"}}}},\"y\":{{\"title\":{{\"display\":true,\"text\":\"accuracy\"}}}}}}}}}}",
                                  labels(x), dataset("top-1", acc, 0, ",\"fill\":false"),
                                  dataset("top-5", top5, 1, ",\"fill\":false"))});
    }
    for (const auto& c : rc)
      body += fmt::format("<figure><figcaption>{}</figcaption><canvas id=\"{}\" width=\"900\" height=\"320\" "
                          "data-chart-type=\"{}\"></canvas></figure>\n",
                          html(c.title), c.id, c.type);
    charts.insert(charts.end(), rc.begin(), rc.end());
    // Settings and hardware.
    auto devs = db.devices(run_id);
    if (devs && !devs->empty()) {
      body += "<h3>Hardware identities</h3><table><tr><th>device</th><th>role</th><th>identity</th></tr>\n";
      for (const auto& d : *devs) {
        std::string id;
        agent::visit_hw(d, [&](const agent::FieldInfo& f, const auto& v) {
          const std::string t = agent::field_text(v);
          if (!t.empty()) id += fmt::format("{}={} ", f.name, t);
        });
        body += fmt::format("<tr><td>{}</td><td>{}</td><td><code>{}</code></td></tr>\n", html(d.device), html(d.role),
                            html(id));
      }
      body += "</table>\n";
    }
    body += "<h3>Settings</h3><pre>" + html(run->config_yaml) + "</pre></section>\n";
  }
  std::string script = "const charts = [\n";
  for (const auto& c : charts) script += fmt::format("  [{}, {}],\n", js(c.id), c.json);
  script +=
      "];\n"
      "let drawn = 0, nonblank = 0;\n"
      "for (const [id, cfg] of charts) {\n"
      "  const el = document.getElementById(id);\n"
      "  new Chart(el.getContext('2d'), cfg);\n"
      "  drawn++;\n"
      "  const px = el.getContext('2d').getImageData(0, 0, el.width, el.height).data;\n"
      "  let ink = 0;\n"
      "  for (let i = 3; i < px.length; i += 4) if (px[i] !== 0) ink++;\n"
      "  el.dataset.inkPixels = ink;\n"
      "  if (ink > 1000) nonblank++;\n"
      "}\n"
      "const s = document.getElementById('status');\n"
      "s.dataset.charts = charts.length; s.dataset.drawn = drawn; s.dataset.nonblank = nonblank;\n"
      "s.textContent = drawn + ' charts drawn';\n";
  return fmt::format(
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>tracr report</title>\n<style>body{{font-family:sans-"
      "serif;margin:2em;max-width:1000px}}pre{{background:#f4f4f4;padding:1em;overflow:auto}}table{{border-collapse:"
      "collapse}}td,th{{border:1px solid #ccc;padding:4px;font-size:12px;text-align:left}}figure{{margin:1em 0}}"
      "</style>\n<script>\n{}\n</script></head><body>\n<h1>tracr report</h1>\n<p>Runs {} from {}. Every figure is "
      "read from the results database; energy series carry their source (measured:&lt;meter&gt; or "
      "modelled:&lt;model&gt;).</p>\n<p id=\"status\">charts not drawn (JavaScript disabled?)</p>\n{}<script>\n{}"
      "</script>\n</body></html>\n",
      chartjs.str(), fmt::join(runs, ", "), html(db.path()), body, script);
}

int cmd_report(const ReportOptions& opt) {
  const std::vector<std::string>& run_args = opt.runs;
  const std::string& out = opt.out;
  const std::string& db_path = opt.db;
  const std::string& chartjs = opt.chartjs;
  auto db = ResultsDb::open_readonly(db_path);
  if (!db) {
    fmt::print(stderr, "tracrctl report: {}\n", db.error().str());
    return 1;
  }
  std::vector<int64_t> runs;
  for (const auto& a : run_args) {
    auto id = run_id_arg(*db, a);
    if (!id) {
      fmt::print(stderr, "tracrctl report: {}\n", id.error().str());
      return 2;
    }
    runs.push_back(*id);
  }
  auto page = render_report(*db, runs, chartjs);
  if (!page) {
    fmt::print(stderr, "tracrctl report: {}\n", page.error().str());
    return 1;
  }
  std::ofstream f(out, std::ios::binary | std::ios::trunc);
  f << *page;
  f.flush();
  if (!f) {
    fmt::print(stderr, "tracrctl report: cannot write {}\n", out);
    return 1;
  }
  fmt::print("wrote {} ({} runs, {} bytes, opens without a network)\n", out, runs.size(), page->size());
  return 0;
}

}  // namespace tracr::analysis
