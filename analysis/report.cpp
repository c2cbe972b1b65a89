#include "analysis/report.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "analysis/figures.hpp"
#include "core/text.hpp"

namespace tracr::analysis {

using namespace tracr::core;  // the floors below, by their short names
using namespace tracr::store;

namespace {

std::string html(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// A drawn SVG without its XML prologue, to sit inside the page.
Result<std::string> inline_svg(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(Errc::io, fmt::format("cannot read the figure {}", path));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const size_t at = text.find("<svg");
  if (at == std::string::npos) return make_error(Errc::io, fmt::format("{} holds no <svg> element", path));
  return text.substr(at);
}

// The settings as shown: an inference run's dump leaves out the top-level
// `train:` block (its defaults say nothing about the run).
std::string shown_settings(const std::string& yaml, bool training) {
  if (training) return yaml;
  std::string out;
  bool skipping = false;
  size_t pos = 0;
  while (pos < yaml.size()) {
    size_t nl = yaml.find('\n', pos);
    if (nl == std::string::npos) nl = yaml.size();
    const std::string line = yaml.substr(pos, nl - pos);
    pos = nl + 1;
    const bool top = !line.empty() && line[0] != ' ' && line[0] != '#' && line[0] != '-';
    if (top) skipping = line.rfind("train:", 0) == 0;
    if (!skipping) out += line + "\n";
  }
  return out;
}

}  // namespace

Result<std::string> render_report(ResultsDb& db, const std::vector<int64_t>& runs, const std::vector<Figure>& figs,
                                  const std::string& figures_dir) {
  std::string body = "<section class=\"figures\">\n";
  for (const auto& f : figs) {
    auto svg = inline_svg((std::filesystem::path(figures_dir) / (f.id + ".svg")).string());
    if (!svg) return std::move(svg.error());
    std::string notes;
    for (const auto& n : f.notes) notes += "<p class=\"note\">" + html(n) + "</p>";
    body += fmt::format("<figure id=\"fig-{}\" data-figure=\"{}\"><figcaption>{}</figcaption>\n{}{}</figure>\n", f.id,
                        f.id, html(f.title), *svg, notes);
  }
  body += "</section>\n";
  for (int64_t run_id : runs) {
    auto run = db.get_run(run_id);
    if (!run) return std::move(run.error());
    body += fmt::format("<section class=\"run\"><h2>Run {}: {}</h2>\n<p>{} &middot; model {} &middot; codec {} "
                        "&middot; cipher {}{} &middot; started {} &middot; {} frames</p>\n",
                        run_id, html(run->name), run_status_name(run->status), html(run->model), html(run->codec),
                        html(run->cipher),
                        run->link.empty() ? "" : " &middot; link " + html(run->link) + " (" + html(run->shaping) + ")",
                        html(run->started_at), run->frame_count);
    auto devs = db.devices(run_id);
    if (devs && !devs->empty()) {
      body += "<h3>Hardware identities</h3><table><tr><th>device</th><th>role</th><th>identity</th></tr>\n";
      for (const auto& d : *devs) {
        std::string id;
        wire::visit_hw(d, [&](const wire::FieldInfo& f, const auto& v) {
          const std::string t = wire::field_text(v);
          if (!t.empty()) id += fmt::format("{}={} ", f.name, t);
        });
        body += fmt::format("<tr><td>{}</td><td>{}</td><td><code>{}</code></td></tr>\n", html(d.device), html(d.role),
                            html(id));
      }
      body += "</table>\n";
    }
    auto steps = db.rows("train_steps", run_id);
    const bool training = steps && !steps->empty();
    body += "<details><summary>Settings</summary><pre class=\"settings\">" +
            html(shown_settings(run->config_yaml, training)) + "</pre></details></section>\n";
  }
  return fmt::format(
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>tracr report</title>\n<style>body{{font-family:sans-"
      "serif;margin:1.5em}}pre{{background:#f4f4f4;padding:1em;overflow:auto}}table{{border-collapse:collapse}}"
      "td,th{{border:1px solid #ccc;padding:4px;font-size:12px;text-align:left}}figure{{margin:1.5em 0}}"
      "figure svg{{max-width:100%;height:auto;display:block}}figcaption{{font-weight:bold;margin-bottom:.4em}}"
      ".note{{font-style:italic;color:#555}}"
      "</style></head><body>\n<h1>tracr report</h1>\n<p>Runs {} from {}: {} figures. Every figure is read from "
      "the results database and drawn by matplotlib (inlined SVG: no script, no network); "
      "<code>tracrctl report ... --figures DIR</code> writes each as PDF, SVG and PNG with the CSV of its data and "
      "the Python script that draws it. Energy series carry their source (measured:&lt;meter&gt; or "
      "modelled:&lt;model&gt;).</p>\n{}</body></html>\n",
      fmt::join(runs, ", "), html(db.path()), figs.size(), body);
}

}  // namespace tracr::analysis
