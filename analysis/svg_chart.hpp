// A small SVG chart renderer for the report's figures: the same SVG text is
// inlined in the HTML page and written by `tracrctl report --figures DIR`,
// so the page and the exported files cannot differ, and neither needs a
// browser or a script to draw.
//
// Why not a JavaScript library: Debian's libjs-vega (5.22) ships only the
// per-module UMD files (each replaces window.vega with an empty object and
// expects the d3-* modules from a module loader; there is no vega.min.js
// bundle), Vega-Lite is not packaged, and libjs-d3 is d3 v3 (2016). Drawing
// SVG from the data here keeps one code path for page and export, exact
// control over what is drawn (whiskers, only the stages that occur, byte
// units) and no dependency for the SVG itself; rsvg-convert (librsvg2-bin)
// turns it into PDF.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace tracr::analysis::svg {

enum class Kind {
  line,          // categorical x, one polyline per series, optional whisker [y, hi]
  bars,          // categorical x, one bar per series side by side
  stacked_bars,  // categorical x, one stacked bar per group; series are the stacked parts
  scatter,       // continuous x, points (joined per series when `join`)
  step,          // continuous x, a step line per series
};
enum class Unit { plain, ms, bytes, joules, percent, seconds, mbps };

struct Point {
  double x = 0;               // category index (categorical kinds) or value
  double y = 0;
  std::optional<double> hi;   // whisker end (line: p95)
  size_t group = 0;           // stacked_bars: index into Chart::groups
};
struct Series {
  std::string name;
  std::vector<Point> points;
  bool dashed = false;
};
struct Chart {
  Kind kind = Kind::line;
  std::string x_label, y_label;
  Unit x_unit = Unit::plain, y_unit = Unit::plain;
  bool log_x = false;
  bool join = false;                    // scatter: join each series' points in x order
  std::vector<std::string> categories;  // categorical kinds: tick labels
  std::vector<std::string> groups;      // stacked_bars: the bars within a category (labelled above each bar)
  std::vector<Series> series;
};

// Text escaped for XML and HTML (& < > ").
std::string xml(const std::string& s);

// A value with its unit for an axis tick: bytes as B/kB/MB/GB (powers of
// 1000), others as a short decimal.
std::string format_value(double v, Unit u);

// The chart as a standalone SVG document (viewBox 960 wide; the height grows
// with the legend). Marks carry class="mark", whiskers class="whisker",
// legend entries class="legend-item" with data-name, so tests can count them.
std::string render(const Chart& c);

}  // namespace tracr::analysis::svg
