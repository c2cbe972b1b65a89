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

std::string render(const Chart& c) {
  const bool categorical = c.kind == Kind::line || c.kind == Kind::bars || c.kind == Kind::stacked_bars;
  const double plot_w = kWidth - kLeft - kRight;
  // Category labels are rotated when they do not fit their band.
  const size_t ncat = std::max<size_t>(c.categories.size(), 1);
  const double band = plot_w / static_cast<double>(ncat);
  size_t longest = 0;
  for (const auto& s : c.categories) longest = std::max(longest, std::min<size_t>(s.size(), 28));
  const bool rotate = categorical && text_width(std::string(longest, 'x')) > band - 4;
  const double xlab_h = categorical ? (rotate ? 0.45 * text_width(std::string(longest, 'x')) + 20 : 20) : 20;
  // Legend: entries wrapped into rows under the x-axis title.
  struct Entry {
    std::string name;
    size_t color;
    bool dashed;
  };
  std::vector<Entry> legend;
  for (size_t i = 0; i < c.series.size(); ++i) legend.push_back({c.series[i].name, i, c.series[i].dashed});
  std::vector<std::pair<double, size_t>> legend_pos;  // x offset, row
  {
    double x = 0;
    size_t row = 0;
    for (const auto& e : legend) {
      const double w = 22 + text_width(shorten(e.name, 60)) + 18;
      if (x > 0 && x + w > kWidth - kLeft - kRight) {
        x = 0;
        ++row;
      }
      legend_pos.push_back({x, row});
      x += w;
    }
  }
  const size_t legend_rows = legend.empty() ? 0 : legend_pos.back().second + 1;
  const double plot_bottom = kTop + kPlotHeight;
  const double xtitle_y = plot_bottom + xlab_h + 18;
  const double legend_y = xtitle_y + 14;
  const double height = legend_y + 18.0 * static_cast<double>(legend_rows) + 6;

  // Y range: bars start at zero; whiskers and stacks count.
  double ymin = 0, ymax = 0;
  bool any = false;
  std::map<std::pair<double, size_t>, double> stack_top;
  for (const auto& s : c.series)
    for (const auto& p : s.points) {
      if (!std::isfinite(p.y)) continue;
      double top = p.y;
      if (c.kind == Kind::stacked_bars) top = stack_top[{p.x, p.group}] += p.y;
      if (p.hi && std::isfinite(*p.hi)) top = std::max(top, *p.hi);
      ymax = any ? std::max(ymax, top) : top;
      ymin = any ? std::min(ymin, p.y) : std::min(0.0, p.y);
      any = true;
    }
  if (c.kind == Kind::step || c.kind == Kind::scatter) {  // these need not start at zero
    double lo = 0;
    bool first = true;
    for (const auto& s : c.series)
      for (const auto& p : s.points)
        if (std::isfinite(p.y)) {
          lo = first ? p.y : std::min(lo, p.y);
          first = false;
        }
    if (!first && lo > 0 && lo > 0.5 * ymax) ymin = lo;
  }
  Axis ya;
  ya.px0 = plot_bottom;
  ya.px1 = kTop;
  const std::vector<double> yt = linear_ticks(ymin, any ? ymax * 1.04 : 1, ya.lo, ya.hi);

  Axis xa;
  xa.px0 = kLeft;
  xa.px1 = kLeft + plot_w;
  std::vector<double> xt;
  if (!categorical) {
    double lo = 0, hi = 0;
    bool first = true;
    for (const auto& s : c.series)
      for (const auto& p : s.points)
        if (std::isfinite(p.x) && (!c.log_x || p.x > 0)) {
          lo = first ? p.x : std::min(lo, p.x);
          hi = first ? p.x : std::max(hi, p.x);
          first = false;
        }
    if (first) hi = lo + 1;
    xa.log = c.log_x;
    xt = c.log_x ? log_ticks(lo > 0 ? lo : 1, hi > lo ? hi : lo * 10, xa.lo, xa.hi) : linear_ticks(lo, hi, xa.lo, xa.hi);
  }
  auto cat_center = [&](double i) { return kLeft + band * (i + 0.5); };

  std::string o = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {} {}\" width=\"{}\" height=\"{}\" "
      "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"11\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      n(kWidth), n(height), n(kWidth), n(height));
  // Grid and y ticks.
  o += "<g class=\"y-axis\">\n";
  for (double v : yt) {
    const double y = ya.at(v);
    o += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#e4e4e4\"/>"
                     "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" dy=\"0.35em\">{}</text>\n",
                     n(kLeft), n(kLeft + plot_w), n(y), n(y), n(kLeft - 6), n(y), xml(format_value(v, c.y_unit)));
  }
  o += fmt::format("<text transform=\"translate(14,{}) rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">{}</text>\n",
                   n(kTop + kPlotHeight / 2), xml(c.y_label));
  o += "</g>\n<g class=\"x-axis\">\n";
  if (categorical) {
    for (size_t i = 0; i < c.categories.size(); ++i) {
      const double x = cat_center(static_cast<double>(i));
      const std::string label = xml(shorten(c.categories[i], 28));
      o += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#888\"/>", n(x), n(x), n(plot_bottom),
                       n(plot_bottom + 4));
      if (rotate)
        o += fmt::format("<text transform=\"translate({},{}) rotate(-40)\" text-anchor=\"end\">{}</text>\n", n(x + 3),
                         n(plot_bottom + 12), label);
      else
        o += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", n(x), n(plot_bottom + 16), label);
    }
  } else {
    for (double v : xt) {
      const double x = xa.at(v);
      o += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#e4e4e4\"/>"
                       "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                       n(x), n(x), n(kTop), n(plot_bottom), n(x), n(plot_bottom + 16), xml(format_value(v, c.x_unit)));
    }
  }
  o += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"12\">{}</text>\n", n(kLeft + plot_w / 2),
                   n(xtitle_y), xml(c.x_label));
  o += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#444\"/>"
                   "<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#444\"/>\n</g>\n",
                   n(kLeft), n(kLeft + plot_w), n(plot_bottom), n(plot_bottom), n(kLeft), n(kLeft), n(kTop),
                   n(plot_bottom));

  // Marks.
  const size_t nser = std::max<size_t>(c.series.size(), 1);
  const size_t ngroups = std::max<size_t>(c.groups.size(), 1);
  std::map<std::pair<double, size_t>, double> base;  // stacked: running bottom per (category, group)
  std::string group_labels;
  std::map<std::pair<double, size_t>, double> tops;
  for (size_t si = 0; si < c.series.size(); ++si) {
    const Series& s = c.series[si];
    o += fmt::format("<g class=\"series\" data-name=\"{}\">\n", xml(s.name));
    const std::string dash = s.dashed ? " stroke-dasharray=\"6,4\"" : "";
    std::vector<Point> pts;
    for (const auto& p : s.points)
      if (std::isfinite(p.y) && std::isfinite(p.x) && (categorical || !c.log_x || p.x > 0)) pts.push_back(p);
    auto px = [&](const Point& p) { return categorical ? cat_center(p.x) : xa.at(p.x); };
    if (c.kind == Kind::bars) {
      const double w = band * 0.8 / static_cast<double>(nser);
      for (const auto& p : pts) {
        const double x = kLeft + band * p.x + band * 0.1 + w * static_cast<double>(si);
        const double y0 = ya.at(0), y1 = ya.at(p.y);
        o += fmt::format("<rect class=\"mark\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}: {}</title></rect>\n",
                         n(x), n(std::min(y0, y1)), n(std::max(w - 1, 1.0)), n(std::abs(y0 - y1)), color(si),
                         xml(s.name), xml(format_value(p.y, c.y_unit)));
      }
    } else if (c.kind == Kind::stacked_bars) {
      const double w = band * 0.8 / static_cast<double>(ngroups);
      for (const auto& p : pts) {
        const double x = kLeft + band * p.x + band * 0.1 + w * static_cast<double>(p.group);
        double& b = base[{p.x, p.group}];
        const double y0 = ya.at(b), y1 = ya.at(b + p.y);
        b += p.y;
        tops[{p.x, p.group}] = b;
        o += fmt::format("<rect class=\"mark\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}{}: {}</title></rect>\n",
                         n(x), n(std::min(y0, y1)), n(std::max(w - 1, 1.0)), n(std::abs(y0 - y1)), color(si),
                         p.group < c.groups.size() ? xml(c.groups[p.group]) + " " : "", xml(s.name),
                         xml(format_value(p.y, c.y_unit)));
      }
    } else {
      std::sort(pts.begin(), pts.end(), [](const Point& a, const Point& b) { return a.x < b.x; });
      if (c.kind == Kind::line || c.kind == Kind::step || c.join) {
        std::string d;
        for (size_t i = 0; i < pts.size(); ++i) {
          if (c.kind == Kind::step && i > 0) d += fmt::format(" L{},{}", n(px(pts[i])), n(ya.at(pts[i - 1].y)));
          d += fmt::format("{}{},{}", i ? " L" : "M", n(px(pts[i])), n(ya.at(pts[i].y)));
        }
        if (!d.empty())
          o += fmt::format("<path class=\"line\" d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{}/>\n", d,
                           color(si), dash);
      }
      for (const auto& p : pts) {
        const double x = px(p), y = ya.at(p.y);
        if (p.hi && std::isfinite(*p.hi)) {
          const double yh = ya.at(*p.hi);
          o += fmt::format("<path class=\"whisker\" d=\"M{},{} L{},{} M{},{} L{},{}\" stroke=\"{}\" stroke-width=\"1.5\"/>\n",
                           n(x), n(y), n(x), n(yh), n(x - 4), n(yh), n(x + 4), n(yh), color(si));
        }
        if (c.kind != Kind::step || pts.size() < 60)
          o += fmt::format("<circle class=\"mark\" cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{}\"><title>{}: {}{}</title></circle>\n",
                           n(x), n(y), c.kind == Kind::step ? "2" : "3.5", color(si), xml(s.name),
                           xml(format_value(p.y, c.y_unit)),
                           p.hi ? " (p95 " + xml(format_value(*p.hi, c.y_unit)) + ")" : "");
      }
    }
    o += "</g>\n";
  }
  if (c.kind == Kind::stacked_bars && c.groups.size() > 1) {
    const double w = band * 0.8 / static_cast<double>(ngroups);
    for (const auto& [k, top] : tops) {
      const double x = kLeft + band * k.first + band * 0.1 + w * (static_cast<double>(k.second) + 0.5);
      group_labels += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"9\">{}</text>\n", n(x),
                                  n(ya.at(top) - 3), xml(shorten(c.groups[k.second], 8)));
    }
    o += "<g class=\"group-labels\">\n" + group_labels + "</g>\n";
  }
  // Legend.
  o += "<g class=\"legend\">\n";
  for (size_t i = 0; i < legend.size(); ++i) {
    const double x = kLeft + legend_pos[i].first, y = legend_y + 18.0 * static_cast<double>(legend_pos[i].second);
    const bool line_mark = c.kind == Kind::line || c.kind == Kind::step || c.join;
    o += fmt::format("<g class=\"legend-item\" data-name=\"{}\">", xml(legend[i].name));
    if (line_mark)
      o += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2\"{}/>", n(x),
                       n(x + 16), n(y), n(y), color(legend[i].color), legend[i].dashed ? " stroke-dasharray=\"4,3\"" : "");
    else
      o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/>", n(x + 2), n(y - 6),
                       color(legend[i].color));
    o += fmt::format("<text x=\"{}\" y=\"{}\" dy=\"0.35em\">{}</text></g>\n", n(x + 22), n(y),
                     xml(shorten(legend[i].name, 60)));
  }
  o += "</g>\n</svg>\n";
  return o;
}

}  // namespace tracr::analysis::svg
