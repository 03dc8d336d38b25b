#include "metrics_exposition.h"

#include <cmath>
#include <cstdio>

namespace tandem::scheduler {

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

namespace {
// HELP text escapes backslash and newline only (a quote is literal there).
std::string escape_help(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

const char* type_name(MetricsWriter::Type t) {
  switch (t) {
    case MetricsWriter::Type::counter: return "counter";
    case MetricsWriter::Type::gauge: return "gauge";
    case MetricsWriter::Type::histogram: return "histogram";
  }
  return "untyped";
}
}  // namespace

std::string format_metric_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  // Counters of bytes and launches are integers well below 2^53: written exactly.
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0)
    std::snprintf(buffer, sizeof buffer, "%.0f", v);
  else
    std::snprintf(buffer, sizeof buffer, "%.9g", v);
  return buffer;
}

void MetricsWriter::family(std::string_view name, Type type, std::string_view help) {
  name_ = name;
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  out_ += escape_help(help);
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += type_name(type);
  out_ += '\n';
}

void MetricsWriter::sample(const MetricLabels& labels, double value, std::string_view suffix) {
  out_ += name_;
  out_ += suffix;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i) out_ += ',';
      out_ += labels[i].first;
      out_ += "=\"";
      out_ += escape_label_value(labels[i].second);
      out_ += '"';
    }
    out_ += '}';
  }
  out_ += ' ';
  out_ += format_metric_value(value);
  out_ += '\n';
}

void DurationHistogram::observe(double seconds) {
  for (size_t i = 0; i < bounds_.size(); ++i)
    if (seconds <= bounds_[i]) {
      ++counts_[i];
      break;
    }
  ++count_;
  sum_ += seconds;
}

void DurationHistogram::write(MetricsWriter& w, const MetricLabels& labels) const {
  MetricLabels with_le = labels;
  with_le.emplace_back("le", "");
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    with_le.back().second = format_metric_value(bounds_[i]);
    w.sample(with_le, static_cast<double>(cumulative), "_bucket");
  }
  with_le.back().second = "+Inf";
  w.sample(with_le, static_cast<double>(count_), "_bucket");
  w.sample(labels, sum_, "_sum");
  w.sample(labels, static_cast<double>(count_), "_count");
}

}  // namespace tandem::scheduler
