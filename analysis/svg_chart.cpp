#include "analysis/svg_chart.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

namespace tracr::analysis::svg {

namespace {

const char* kColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
                         "#9c755f", "#bab0ac"};
const char* color(size_t i) { return kColors[i % std::size(kColors)]; }

constexpr double kWidth = 960, kPlotHeight = 300, kLeft = 78, kRight = 24, kTop = 16;

std::string n(double v) { return fmt::format("{:.2f}", v); }

// Approximate width of a label in the 11 px sans font.
double text_width(const std::string& s, double px = 11) { return 0.58 * px * static_cast<double>(s.size()); }

std::string shorten(const std::string& s, size_t max) {
  return s.size() <= max ? s : s.substr(0, max / 2 - 1) + ".." + s.substr(s.size() - (max - max / 2 - 1));
}

// "Nice" linear ticks covering [lo, hi].
std::vector<double> linear_ticks(double lo, double hi, double& out_lo, double& out_hi) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / 5;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  out_lo = std::floor(lo / step) * step;
  out_hi = std::ceil(hi / step) * step;
  std::vector<double> t;
  for (double v = out_lo; v <= out_hi + step * 1e-9; v += step) t.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  return t;
}

// Byte axes tick at 1000-based units' nice values, so labels read "200 kB" rather than "195.3 KiB".
std::vector<double> log_ticks(double lo, double hi, double& out_lo, double& out_hi) {
  out_lo = std::pow(10, std::floor(std::log10(lo)));
  out_hi = std::pow(10, std::ceil(std::log10(hi)));
  if (out_hi <= out_lo) out_hi = out_lo * 10;
  std::vector<double> t;
  for (double v = out_lo; v <= out_hi * 1.0001; v *= 10) t.push_back(v);
  return t;
}

struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  double px0 = 0, px1 = 1;  // pixel range
  double at(double v) const {
    const double f = log ? (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)) : (v - lo) / (hi - lo);
    return px0 + f * (px1 - px0);
  }
};

}  // namespace

std::string xml(const std::string& s) {
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

std::string format_value(double v, Unit u) {
  auto dec = [](double x) {
    const double a = std::abs(x);
    if (a == 0) return std::string("0");
    if (a >= 100) return fmt::format("{:.0f}", x);
    if (a >= 10) return fmt::format("{:.3g}", x);
    return fmt::format("{:.3g}", x);
  };
  switch (u) {
    case Unit::bytes: {
      const char* units[] = {"B", "kB", "MB", "GB", "TB"};
      size_t i = 0;
      double x = v;
      while (std::abs(x) >= 1000 && i + 1 < std::size(units)) {
        x /= 1000;
        ++i;
      }
      return dec(x) + " " + units[i];
    }
    case Unit::ms: return dec(v) + " ms";
    case Unit::joules: return dec(v) + " J";
    case Unit::percent: return dec(v) + " %";
    case Unit::seconds: return dec(v) + " s";
    case Unit::mbps: return dec(v) + " Mbit/s";
    case Unit::plain: break;
  }
  return dec(v);
}

namespace {

// Draws one chart: the layout first (label rotation, legend rows, height),
// then the axes from the data's range, then the marks, group labels and legend.
class Renderer {
 public:
  explicit Renderer(const Chart& c)
      : c_(c),
        categorical_(c.kind == Kind::line || c.kind == Kind::bars || c.kind == Kind::stacked_bars),
        band_(kPlotW / static_cast<double>(std::max<size_t>(c.categories.size(), 1))) {
    layout();
    y_axis_range();
    if (!categorical_) x_axis_range();
  }

  std::string svg() {
    o_ = fmt::format(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {} {}\" width=\"{}\" height=\"{}\" "
        "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"11\">\n"
        "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
        n(kWidth), n(height_), n(kWidth), n(height_));
    draw_y_axis();
    draw_x_axis();
    for (size_t si = 0; si < c_.series.size(); ++si) draw_series(si);
    draw_group_labels();
    draw_legend();
    o_ += "</g>\n</svg>\n";
    return std::move(o_);
  }

 private:
  static constexpr double kPlotW = kWidth - kLeft - kRight;
  static constexpr double kPlotBottom = kTop + kPlotHeight;

  // Category labels are rotated when they do not fit their band; legend
  // entries wrap into rows under the x-axis title.
  void layout() {
    size_t longest = 0;
    for (const auto& s : c_.categories) longest = std::max(longest, std::min<size_t>(s.size(), 28));
    rotate_ = categorical_ && text_width(std::string(longest, 'x')) > band_ - 4;
    const double xlab_h = categorical_ ? (rotate_ ? 0.45 * text_width(std::string(longest, 'x')) + 20 : 20) : 20;
    double x = 0;
    size_t row = 0;
    for (const auto& s : c_.series) {
      const double w = 22 + text_width(shorten(s.name, 60)) + 18;
      if (x > 0 && x + w > kWidth - kLeft - kRight) {
        x = 0;
        ++row;
      }
      legend_pos_.push_back({x, row});
      x += w;
    }
    const size_t legend_rows = legend_pos_.empty() ? 0 : legend_pos_.back().second + 1;
    xtitle_y_ = kPlotBottom + xlab_h + 18;
    legend_y_ = xtitle_y_ + 14;
    height_ = legend_y_ + 18.0 * static_cast<double>(legend_rows) + 6;
  }

  // Y range: bars start at zero; whiskers and stacks count; steps and
  // scatters need not start at zero.
  void y_axis_range() {
    double ymin = 0, ymax = 0;
    bool any = false;
    std::map<std::pair<double, size_t>, double> stack_top;
    for (const auto& s : c_.series)
      for (const auto& p : s.points) {
        if (!std::isfinite(p.y)) continue;
        double top = p.y;
        if (c_.kind == Kind::stacked_bars) top = stack_top[{p.x, p.group}] += p.y;
        if (p.hi && std::isfinite(*p.hi)) top = std::max(top, *p.hi);
        ymax = any ? std::max(ymax, top) : top;
        ymin = any ? std::min(ymin, p.y) : std::min(0.0, p.y);
        any = true;
      }
    if (c_.kind == Kind::step || c_.kind == Kind::scatter) {
      double lo = 0;
      bool first = true;
      for (const auto& s : c_.series)
        for (const auto& p : s.points)
          if (std::isfinite(p.y)) {
            lo = first ? p.y : std::min(lo, p.y);
            first = false;
          }
      if (!first && lo > 0 && lo > 0.5 * ymax) ymin = lo;
    }
    ya_.px0 = kPlotBottom;
    ya_.px1 = kTop;
    yt_ = linear_ticks(ymin, any ? ymax * 1.04 : 1, ya_.lo, ya_.hi);
  }

  void x_axis_range() {
    double lo = 0, hi = 0;
    bool first = true;
    for (const auto& s : c_.series)
      for (const auto& p : s.points)
        if (std::isfinite(p.x) && (!c_.log_x || p.x > 0)) {
          lo = first ? p.x : std::min(lo, p.x);
          hi = first ? p.x : std::max(hi, p.x);
          first = false;
        }
    if (first) hi = lo + 1;
    xa_.px0 = kLeft;
    xa_.px1 = kLeft + kPlotW;
    xa_.log = c_.log_x;
    xt_ = c_.log_x ? log_ticks(lo > 0 ? lo : 1, hi > lo ? hi : lo * 10, xa_.lo, xa_.hi)
                   : linear_ticks(lo, hi, xa_.lo, xa_.hi);
  }

  double cat_center(double i) const { return kLeft + band_ * (i + 0.5); }
  double px(const Point& p) const { return categorical_ ? cat_center(p.x) : xa_.at(p.x); }
  bool line_marks() const { return c_.kind == Kind::line || c_.kind == Kind::step || c_.join; }

  void draw_y_axis() {
    o_ += "<g class=\"y-axis\">\n";
    for (double v : yt_) {
      const double y = ya_.at(v);
      o_ += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#e4e4e4\"/>"
                        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" dy=\"0.35em\">{}</text>\n",
                        n(kLeft), n(kLeft + kPlotW), n(y), n(y), n(kLeft - 6), n(y), xml(format_value(v, c_.y_unit)));
    }
    o_ += fmt::format(
        "<text transform=\"translate(14,{}) rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">{}</text>\n",
        n(kTop + kPlotHeight / 2), xml(c_.y_label));
    o_ += "</g>\n";
  }

  void draw_category_ticks() {
    for (size_t i = 0; i < c_.categories.size(); ++i) {
      const double x = cat_center(static_cast<double>(i));
      // A shortened name keeps the whole one as its tooltip (a traced model's module paths are long).
      const std::string& full = c_.categories[i];
      const std::string shown = shorten(full, 28);
      const std::string label = shown == full ? xml(full) : xml(shown) + "<title>" + xml(full) + "</title>";
      o_ += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#888\"/>", n(x), n(x), n(kPlotBottom),
                        n(kPlotBottom + 4));
      if (rotate_)
        o_ += fmt::format("<text transform=\"translate({},{}) rotate(-40)\" text-anchor=\"end\">{}</text>\n", n(x + 3),
                          n(kPlotBottom + 12), label);
      else
        o_ += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", n(x), n(kPlotBottom + 16),
                          label);
    }
  }

  void draw_x_axis() {
    o_ += "<g class=\"x-axis\">\n";
    if (categorical_)
      draw_category_ticks();
    else
      for (double v : xt_) {
        const double x = xa_.at(v);
        o_ += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#e4e4e4\"/>"
                          "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                          n(x), n(x), n(kTop), n(kPlotBottom), n(x), n(kPlotBottom + 16),
                          xml(format_value(v, c_.x_unit)));
      }
    o_ += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"12\">{}</text>\n",
                      n(kLeft + kPlotW / 2), n(xtitle_y_), xml(c_.x_label));
    o_ += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#444\"/>"
                      "<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#444\"/>\n</g>\n",
                      n(kLeft), n(kLeft + kPlotW), n(kPlotBottom), n(kPlotBottom), n(kLeft), n(kLeft), n(kTop),
                      n(kPlotBottom));
  }

  void draw_series(size_t si) {
    const Series& s = c_.series[si];
    o_ += fmt::format("<g class=\"series\" data-name=\"{}\">\n", xml(s.name));
    std::vector<Point> pts;
    for (const auto& p : s.points)
      if (std::isfinite(p.y) && std::isfinite(p.x) && (categorical_ || !c_.log_x || p.x > 0)) pts.push_back(p);
    if (c_.kind == Kind::bars)
      draw_bars(si, pts);
    else if (c_.kind == Kind::stacked_bars)
      draw_stacked(si, pts);
    else
      draw_points(si, pts);
    o_ += "</g>\n";
  }

  void draw_bars(size_t si, const std::vector<Point>& pts) {
    const Series& s = c_.series[si];
    const double w = band_ * 0.8 / static_cast<double>(std::max<size_t>(c_.series.size(), 1));
    for (const auto& p : pts) {
      const double x = kLeft + band_ * p.x + band_ * 0.1 + w * static_cast<double>(si);
      const double y0 = ya_.at(0), y1 = ya_.at(p.y);
      o_ += fmt::format(
          "<rect class=\"mark\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}: {}</title></rect>\n",
          n(x), n(std::min(y0, y1)), n(std::max(w - 1, 1.0)), n(std::abs(y0 - y1)), color(si), xml(s.name),
          xml(format_value(p.y, c_.y_unit)));
    }
  }

  double group_width() const { return band_ * 0.8 / static_cast<double>(std::max<size_t>(c_.groups.size(), 1)); }

  void draw_stacked(size_t si, const std::vector<Point>& pts) {
    const Series& s = c_.series[si];
    const double w = group_width();
    for (const auto& p : pts) {
      const double x = kLeft + band_ * p.x + band_ * 0.1 + w * static_cast<double>(p.group);
      double& b = stack_base_[{p.x, p.group}];
      const double y0 = ya_.at(b), y1 = ya_.at(b + p.y);
      b += p.y;
      stack_tops_[{p.x, p.group}] = b;
      o_ += fmt::format(
          "<rect class=\"mark\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}{}: {}</title></rect>\n",
          n(x), n(std::min(y0, y1)), n(std::max(w - 1, 1.0)), n(std::abs(y0 - y1)), color(si),
          p.group < c_.groups.size() ? xml(c_.groups[p.group]) + " " : "", xml(s.name),
          xml(format_value(p.y, c_.y_unit)));
    }
  }

  // Lines, steps and scatters: a path (when joined), whiskers and point marks.
  void draw_points(size_t si, std::vector<Point>& pts) {
    const Series& s = c_.series[si];
    std::sort(pts.begin(), pts.end(), [](const Point& a, const Point& b) { return a.x < b.x; });
    if (line_marks()) {
      std::string d;
      for (size_t i = 0; i < pts.size(); ++i) {
        if (c_.kind == Kind::step && i > 0) d += fmt::format(" L{},{}", n(px(pts[i])), n(ya_.at(pts[i - 1].y)));
        d += fmt::format("{}{},{}", i ? " L" : "M", n(px(pts[i])), n(ya_.at(pts[i].y)));
      }
      if (!d.empty())
        o_ += fmt::format("<path class=\"line\" d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{}/>\n", d,
                          color(si), s.dashed ? " stroke-dasharray=\"6,4\"" : "");
    }
    for (const auto& p : pts) {
      const double x = px(p), y = ya_.at(p.y);
      if (p.hi && std::isfinite(*p.hi)) {
        const double yh = ya_.at(*p.hi);
        o_ += fmt::format(
            "<path class=\"whisker\" d=\"M{},{} L{},{} M{},{} L{},{}\" stroke=\"{}\" stroke-width=\"1.5\"/>\n", n(x),
            n(y), n(x), n(yh), n(x - 4), n(yh), n(x + 4), n(yh), color(si));
      }
      if (c_.kind != Kind::step || pts.size() < 60)
        o_ += fmt::format(
            "<circle class=\"mark\" cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{}\"><title>{}: {}{}</title></circle>\n", n(x),
            n(y), c_.kind == Kind::step ? "2" : "3.5", color(si), xml(s.name), xml(format_value(p.y, c_.y_unit)),
            p.hi ? " (p95 " + xml(format_value(*p.hi, c_.y_unit)) + ")" : "");
    }
  }

  void draw_group_labels() {
    if (c_.kind != Kind::stacked_bars || c_.groups.size() <= 1) return;
    const double w = group_width();
    std::string labels;
    for (const auto& [k, top] : stack_tops_) {
      const double x = kLeft + band_ * k.first + band_ * 0.1 + w * (static_cast<double>(k.second) + 0.5);
      labels += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"9\">{}</text>\n", n(x),
                            n(ya_.at(top) - 3), xml(shorten(c_.groups[k.second], 8)));
    }
    o_ += "<g class=\"group-labels\">\n" + labels + "</g>\n";
  }

  void draw_legend() {
    o_ += "<g class=\"legend\">\n";
    for (size_t i = 0; i < c_.series.size(); ++i) {
      const Series& s = c_.series[i];
      const double x = kLeft + legend_pos_[i].first, y = legend_y_ + 18.0 * static_cast<double>(legend_pos_[i].second);
      o_ += fmt::format("<g class=\"legend-item\" data-name=\"{}\">", xml(s.name));
      if (line_marks())
        o_ += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2\"{}/>", n(x),
                          n(x + 16), n(y), n(y), color(i), s.dashed ? " stroke-dasharray=\"4,3\"" : "");
      else
        o_ += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/>", n(x + 2), n(y - 6),
                          color(i));
      o_ += fmt::format("<text x=\"{}\" y=\"{}\" dy=\"0.35em\">{}</text></g>\n", n(x + 22), n(y),
                        xml(shorten(s.name, 60)));
    }
  }

  const Chart& c_;
  const bool categorical_;
  const double band_;
  bool rotate_ = false;
  std::vector<std::pair<double, size_t>> legend_pos_;  // x offset, row
  double xtitle_y_ = 0, legend_y_ = 0, height_ = 0;
  Axis ya_, xa_;
  std::vector<double> yt_, xt_;
  std::map<std::pair<double, size_t>, double> stack_base_;  // stacked: running bottom per (category, group)
  std::map<std::pair<double, size_t>, double> stack_tops_;
  std::string o_;
};

}  // namespace

std::string render(const Chart& c) { return Renderer(c).svg(); }

}  // namespace tracr::analysis::svg
