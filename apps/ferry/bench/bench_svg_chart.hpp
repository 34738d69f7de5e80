// A minimal SVG chart writer for `ferry bench report` (no dependencies): axes with round ticks,
// lines with points and min-max whiskers, grouped or stacked bars, a legend, a note.
#pragma once

#include <string>
#include <vector>

namespace ferry::bench {

class SvgChart {
 public:
  SvgChart(std::string title, std::string x_label, std::string y_label);

  struct Point {
    double x, y, lo, hi;  // lo/hi: the whisker (min..max); equal to y for none
  };
  void add_line(const std::string& name, std::vector<Point> pts);
  // One bar per label; several values per bar are stacked (names: their legend entries).
  void add_bars(std::vector<std::string> labels, std::vector<std::vector<double>> stacks, std::vector<std::string> names,
                std::vector<double> lo = {}, std::vector<double> hi = {}, std::vector<int> colour = {});
  void add_hline(const std::string& name, double y);
  void note(const std::string& text) { notes_.push_back(text); }
  std::string render() const;

 private:
  struct Line {
    std::string name;
    std::vector<Point> pts;
    bool dashed = false;
  };
  std::string axes(double x0, double x1, double y1, bool categorical) const;
  std::string lines(double x0, double x1, double y1) const;
  std::string bars(double y1) const;
  std::string legend() const;

  std::string title_, xl_, yl_;
  std::vector<Line> lines_;
  std::vector<std::string> labels_, names_;
  std::vector<std::vector<double>> stacks_;
  std::vector<double> lo_, hi_;
  std::vector<int> colour_;
  std::vector<std::string> notes_;
};

std::string svg_escape(const std::string& s);

}  // namespace ferry::bench
