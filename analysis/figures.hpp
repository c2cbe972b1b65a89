// The figures of `tracrctl report`, each comparing every run given: latency
// against split (median, p95 whisker), stages stacked per split, bytes on the
// wire per split and codec, energy per split with its source, accuracy
// against wire bytes per codec, predicted against measured latency and its
// error per split (runs with a validated plan), split and link estimate over
// time (runs whose split was chosen by a command or a policy other than the
// sweep), and a split-training run's loss and accuracy. Each figure is drawn
// as SVG (analysis/svg_chart.hpp) from the data it also carries as CSV, so
// `--figures DIR` writes exactly what the page shows.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "analysis/svg_chart.hpp"
#include "protocol/error.hpp"
#include "store/results.hpp"

namespace tracr::analysis {

struct Figure {
  std::string id;     // file stem: "latency", "stages", ... ("train_loss_3" for run 3)
  std::string title;  // caption, says what is measured and by whom
  svg::Chart chart;
  std::vector<std::string> csv_header;             // the figure's data, one row per drawn value
  std::vector<std::vector<std::string>> csv_rows;
};

// The figures for `runs` (in the order given); each run's legend label is
// "#id name" with model, link and codec where the runs differ in them. A
// figure with no data in any run is left out. Errors from the database pass through (not_found for an
// unknown run).
Result<std::vector<Figure>> build_figures(store::ResultsDb& db, const std::vector<int64_t>& runs);

// The figure's data as CSV text (RFC 4180, header row first).
std::string figure_csv(const Figure& f);

// Writes DIR/<id>.svg, DIR/<id>.csv and DIR/<id>.pdf for every figure
// (creating DIR). The PDF is converted from the SVG by rsvg-convert
// (Debian's librsvg2-bin), vector throughout; `rsvg` names another
// converter binary (tests). Error not_found naming the package when the
// converter is missing, io naming the file that could not be written.
Status write_figures(const std::vector<Figure>& figs, const std::string& dir,
                     const std::string& rsvg = "rsvg-convert");

}  // namespace tracr::analysis
