// The Prometheus text exposition format, version 0.0.4: what `GET /metrics` answers
// (docs/metrics.md). A family is announced once with its HELP and TYPE lines, then its
// samples follow, each with its labels. Label values and help text are escaped as the format
// says (backslash, double quote, newline), so a container id or cgroup path a client's
// environment chose cannot break the page. Nothing here knows about tandemd.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::scheduler {

using MetricLabels = std::vector<std::pair<std::string_view, std::string>>;

class MetricsWriter {
 public:
  enum class Type { counter, gauge, histogram };
  // Starts a family. Every family is announced even with no sample, so that what tandemd
  // exports can be read from an idle daemon's page.
  void family(std::string_view name, Type type, std::string_view help);
  // One sample of the current family (`suffix` for a histogram's _bucket, _sum and _count).
  void sample(const MetricLabels& labels, double value, std::string_view suffix = {});
  const std::string& text() const { return out_; }

 private:
  std::string out_;
  std::string name_;
};

// A histogram of durations in seconds with fixed upper bounds (Prometheus `le`), cumulative
// as the format wants when written.
class DurationHistogram {
 public:
  explicit DurationHistogram(std::initializer_list<double> upper_bounds_s) : bounds_(upper_bounds_s), counts_(bounds_.size()) {}
  void observe(double seconds);
  // The family must be of type histogram; `labels` are the series' labels without `le`.
  void write(MetricsWriter& w, const MetricLabels& labels) const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative
  uint64_t count_ = 0;
  double sum_ = 0;
};

// A sample value as the format writes it: integers exactly, NaN and infinities by name.
std::string format_metric_value(double v);
// A label value or help text, escaped.
std::string escape_label_value(std::string_view v);

}  // namespace tandem::scheduler
