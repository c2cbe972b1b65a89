// The figures of `tracrctl report`, each comparing every run given: latency
// against split (median, interquartile box, p5-p95 whiskers), stages stacked
// per split, bytes on the wire per split and codec, energy per split with its
// source, accuracy against wire bytes with a chance line, predicted against
// measured latency and its error per split (runs with a validated plan), split
// and link estimate over time (runs whose split was chosen by a command or a
// policy other than the sweep), and a split-training run's loss and accuracy.
//
// Each figure is data (a tidy CSV, one row per drawn value, with the run's
// condition columns) and a short Python script that draws it with matplotlib
// (Debian's python3-matplotlib; seaborn's colour-blind palette when
// python3-seaborn is there): the script is one of the templates in
// analysis/figure_scripts/ (one per figure kind, compiled into tracr) under
// a block of settings (size, log axis, labels, notes). A researcher restyles a
// figure by editing its script and running it again.
//
// Legends name conditions, not runs: the axes the runs differ in (link,
// codec, model, devices, participants), the first mapped to colour, the
// second to line style; a predicted series has its measured series' colour,
// dashed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "protocol/error.hpp"
#include "store/results.hpp"

namespace tracr::analysis {

struct Figure {
  std::string id;     // file stem: "latency", "stages", ... ("train_loss_3" for run 3)
  std::string title;  // caption, says what is measured and by whom
  std::string kind;   // the template that draws it: split | stages | scatter | xy
  // The script's settings block: NAME -> a Python literal (X_LABEL, LOG_Y, ...).
  std::vector<std::pair<std::string, std::string>> params;
  std::vector<std::string> notes;                  // series left out, and why (drawn under the figure)
  std::vector<std::string> csv_header;             // the figure's data, one row per drawn value
  std::vector<std::vector<std::string>> csv_rows;
  // The value of a setting as written in the script ("" when not set).
  std::string param(const std::string& name) const;
};

struct FigureOptions {
  std::string size = "page";       // column (3.3 in, 8 pt) | page (7 in, 9 pt)
  std::optional<bool> log_y;       // --log-y / --linear-y; unset: log when the values span more than 20x
  std::vector<std::string> only;   // figure ids to build (empty: all); "train_loss" matches train_loss_<run>
  std::string python;  // the interpreter; "": $TRACR_PYTHON, else /usr/bin/python3 when present, else python3 on PATH
};

// How far apart the values may be on a linear axis: a larger span (largest
// positive / smallest positive) gets a log axis.
inline constexpr double kLogSpan = 20.0;

// The figures for `runs` (in the order given). A figure with no data in any
// run is left out. Errors from the database pass through (not_found for an
// unknown run); bad_input for an unknown size or a name in `only` that is no
// figure.
Result<std::vector<Figure>> build_figures(store::ResultsDb& db, const std::vector<int64_t>& runs,
                                          const FigureOptions& opt = {});

// Every figure build_figures can make, by id (train_loss and train_accuracy
// take the run's id as a suffix: train_loss_3).
std::vector<std::string> figure_ids();

// The figure's data as CSV text (RFC 4180, header row first).
std::string figure_csv(const Figure& f);

// The figure's Python script: its settings block, then its template.
std::string figure_script(const Figure& f, const FigureOptions& opt);

// A template by kind ("split", ..., and "tracr_figure", the helpers every
// script imports); empty for an unknown kind.
std::string_view figure_template(std::string_view kind);

// Writes DIR/<id>.csv and DIR/<id>.py for every figure and DIR/tracr_figure.py
// (creating DIR), then runs the scripts (one Python process), each writing
// DIR/<id>.pdf, .svg and .png. Error not_found naming the Debian package when
// Python or matplotlib is missing, io naming the file that could not be
// written or the script that failed, with Python's last lines.
Status write_figures(const std::vector<Figure>& figs, const std::string& dir, const FigureOptions& opt = {});

}  // namespace tracr::analysis
