#include "transport/metrics/registry.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "kernels/core/check.h"
#include "kernels/core/number_text.h"

namespace atl::transport::metrics {

namespace {

bool name_char(char c, bool first, bool colon) {
  const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return alpha || (colon && c == ':') || (!first && c >= '0' && c <= '9');
}

bool valid_name(std::string_view name, bool colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i)
    if (!name_char(name[i], i == 0, colon)) return false;
  return true;
}

void check_labels(const std::string& metric, const Labels& labels, bool histogram) {
  for (size_t i = 0; i < labels.size(); ++i) {
    const std::string& l = labels[i].first;
    ATOLL_CHECK(valid_name(l, false) && l.rfind("__", 0) != 0,
                "metric " + metric + ": bad label name '" + l + "'");
    ATOLL_CHECK(!(histogram && l == "le"), "metric " + metric + ": 'le' is the bucket label");
    for (size_t j = 0; j < i; ++j)
      ATOLL_CHECK(labels[j].first != l, "metric " + metric + ": label '" + l + "' twice");
  }
}

// {a="x",b="y"} with `extra` (already escaped, e.g. le="0.5") last; "" when there is none.
std::string label_text(const Labels& labels, const std::string& extra = "") {
  if (labels.empty() && extra.empty()) return "";
  std::string out = "{";
  for (const auto& [k, v] : labels) {
    if (out.size() > 1) out += ',';
    out += k + "=\"" + escape_label_value(v) + "\"";
  }
  if (!extra.empty()) {
    if (out.size() > 1) out += ',';
    out += extra;
  }
  return out + "}";
}

void sample(std::string& out, const std::string& name, const std::string& labels, double v) {
  out += name;
  out += labels;
  out += ' ';
  out += format_value(v);
  out += '\n';
}

}  // namespace

void Counter::add(double v) {
  if (!(v >= 0)) return;  // negative or NaN
  value_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {
  ATOLL_CHECK(!bounds_.empty(), "a histogram needs at least one bucket bound");
  for (size_t i = 0; i < bounds_.size(); ++i) {
    ATOLL_CHECK(std::isfinite(bounds_[i]), "histogram bucket bounds must be finite");
    ATOLL_CHECK(i == 0 || bounds_[i] > bounds_[i - 1],
                "histogram bucket bounds must increase strictly");
  }
}

void Histogram::observe(double v) {
  if (std::isnan(v)) return;
  // The first bucket whose upper bound is ≥ v (le = "less or equal"); past the last: +Inf.
  const size_t b = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  std::lock_guard<std::mutex> lk(mu_);
  ++counts_[b];
  ++count_;
  sum_ += v;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.cumulative.resize(bounds_.size());
  std::lock_guard<std::mutex> lk(mu_);
  uint64_t running = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) s.cumulative[i] = running += counts_[i];
  s.count = count_;
  s.sum = sum_;
  return s;
}

std::vector<double> exponential_buckets(double start, double factor, int count) {
  ATOLL_CHECK(start > 0 && factor > 1 && count >= 1, "exponential_buckets: bad arguments");
  std::vector<double> out;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) out.push_back(v);
  return out;
}

Registry::Family& Registry::family_locked(const std::string& name, Type type,
                                          const std::string& help,
                                          const std::vector<double>& bounds, const Labels& labels) {
  ATOLL_CHECK(valid_name(name, true), "bad metric name '" + name + "'");
  ATOLL_CHECK(type != Type::kCounter ||
                  (name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0),
              "counter " + name + " must end in _total");
  check_labels(name, labels, type == Type::kHistogram);
  auto it = families_.find(name);
  if (it == families_.end()) {
    Family f;
    f.type = type;
    f.help = help;
    f.bounds = bounds;
    it = families_.emplace(name, std::move(f)).first;
  }
  ATOLL_CHECK(it->second.type == type, "metric " + name + " registered with two types");
  ATOLL_CHECK(it->second.bounds == bounds, "histogram " + name + " registered with two layouts");
  return it->second;
}

Counter& Registry::counter(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> lk(mu_);
  auto& child = family_locked(name, Type::kCounter, help, {}, labels).counters[labels];
  if (!child) child = std::make_unique<Counter>();
  return *child;
}

Gauge& Registry::gauge(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> lk(mu_);
  Family& f = family_locked(name, Type::kGauge, help, {}, labels);
  ATOLL_CHECK(!f.info, "metric " + name + " is an info metric (set_info)");
  auto& child = f.gauges[labels];
  if (!child) child = std::make_unique<Gauge>();
  return *child;
}

Histogram& Registry::histogram(const std::string& name, const std::string& help,
                               const std::vector<double>& upper_bounds, const Labels& labels) {
  std::lock_guard<std::mutex> lk(mu_);
  auto& child =
      family_locked(name, Type::kHistogram, help, upper_bounds, labels).histograms[labels];
  if (!child) child = std::make_unique<Histogram>(upper_bounds);
  return *child;
}

void Registry::set_info(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> lk(mu_);
  Family& f = family_locked(name, Type::kGauge, help, {}, labels);
  ATOLL_CHECK(f.info || f.gauges.empty(), "metric " + name + " is a plain gauge");
  f.info = true;
  // No reference to an info child is ever handed out, so replacing it is safe.
  f.gauges.clear();
  if (labels.empty()) return;
  auto g = std::make_unique<Gauge>();
  g->set(1.0);
  f.gauges.emplace(labels, std::move(g));
}

void Registry::set_optional_gauge(const std::string& name, const std::string& help,
                                  std::optional<double> value) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!value) {
    auto it = families_.find(name);
    if (it == families_.end()) return;
    ATOLL_CHECK(it->second.info, "metric " + name + " is a plain gauge");
    families_.erase(it);
    return;
  }
  Family& f = family_locked(name, Type::kGauge, help, {}, {});
  ATOLL_CHECK(f.info || f.gauges.empty(), "metric " + name + " is a plain gauge");
  f.info = true;
  auto& child = f.gauges[Labels{}];
  if (!child) child = std::make_unique<Gauge>();
  child->set(*value);
}

void Registry::add_collector(std::function<void()> collect) {
  std::lock_guard<std::mutex> lk(collectors_mu_);
  collectors_.push_back(std::move(collect));
}

std::string Registry::render() const {
  {
    std::lock_guard<std::mutex> lk(collectors_mu_);
    for (const auto& c : collectors_) c();
  }
  std::string out;
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& [name, f] : families_) {
    out += "# HELP " + name + " " + escape_help(f.help) + "\n";
    out += "# TYPE " + name + " " +
           (f.type == Type::kCounter ? "counter"
            : f.type == Type::kGauge ? "gauge"
                                     : "histogram") +
           "\n";
    for (const auto& [labels, c] : f.counters) sample(out, name, label_text(labels), c->value());
    for (const auto& [labels, g] : f.gauges) sample(out, name, label_text(labels), g->value());
    for (const auto& [labels, h] : f.histograms) {
      const Histogram::Snapshot s = h->snapshot();
      for (size_t i = 0; i < f.bounds.size(); ++i)
        sample(out, name + "_bucket",
               label_text(labels, "le=\"" + format_value(f.bounds[i]) + "\""),
               static_cast<double>(s.cumulative[i]));
      sample(out, name + "_bucket", label_text(labels, "le=\"+Inf\""),
             static_cast<double>(s.count));
      sample(out, name + "_sum", label_text(labels), s.sum);
      sample(out, name + "_count", label_text(labels), static_cast<double>(s.count));
    }
  }
  return out;
}

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string escape_help(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return shortest_decimal(v);
}

uint64_t process_resident_memory_bytes() {
  // statm: size resident shared text lib data dt, in pages.
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (n != 2 || page <= 0) return 0;
  return static_cast<uint64_t>(resident) * static_cast<uint64_t>(page);
}

void add_process_metrics(Registry& registry) {
  Gauge& rss = registry.gauge("process_resident_memory_bytes", "Resident memory size in bytes.");
  registry.add_collector([&rss] { rss.set(static_cast<double>(process_resident_memory_bytes())); });
}

}  // namespace atl::transport::metrics
