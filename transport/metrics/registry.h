// Prometheus metrics for the coordinator and the nodes: counters, gauges and histograms with
// fixed buckets, each by label set, rendered in the text exposition format, version 0.0.4
// (what `GET /metrics` answers; docs/dashboard.md lists every metric).
//
//   Registry r;
//   Counter& rounds = r.counter("atoll_rounds_committed_total", "Rounds committed.");
//   Histogram& secs = r.histogram("atoll_round_duration_seconds", "Round start to commit.",
//                                 {0.5, 1, 2, 5, 10, 30, 60});
//   rounds.add();  secs.observe(3.2);
//   std::string text = r.render();   // # HELP / # TYPE lines, then the samples
//
// Names follow Prometheus' rules ([a-zA-Z_:][a-zA-Z0-9_:]*; labels [a-zA-Z_][a-zA-Z0-9_]*, not
// "__..."), counters end in _total; breaking them is a bug in Atoll (ATOLL_CHECK), since every
// name is written in the code. Label values are anything: they are escaped when rendered.
//
// Threads: every method may be called from any thread. Counters and gauges are one atomic each;
// a histogram holds its own mutex for the few instructions of observe(); the registry's mutex
// guards the families and is held while a child is looked up or the text is rendered. The
// references returned stay valid as long as the registry.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace atl::transport::metrics {

// The Content-Type of render()'s text.
inline constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

// Label name → value, in the order they are rendered. Two label sets with the same pairs in
// another order are different children: always pass a family's labels in one order.
using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  // Adds v ≥ 0 (a counter never goes down; a negative or NaN v is ignored).
  void add(double v = 1.0);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  // upper_bounds: finite, strictly increasing, at least one (the +Inf bucket is implicit).
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);  // NaN is ignored

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // observations ≤ upper_bounds[i], one per bound
    uint64_t count = 0;                // all observations (the +Inf bucket)
    double sum = 0.0;
  };
  Snapshot snapshot() const;  // consistent: taken under the histogram's mutex
  const std::vector<double>& upper_bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; bounds_.size() + 1 (+Inf)
  uint64_t count_ = 0;
  double sum_ = 0.0;
};

// {start, start·factor, ..., start·factor^(count−1)}: start > 0, factor > 1, count ≥ 1.
std::vector<double> exponential_buckets(double start, double factor, int count);

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The child of family `name` with `labels`, created (at 0) when new. A family keeps the type,
  // help and buckets of its first registration.
  Counter& counter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge& gauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram& histogram(const std::string& name, const std::string& help,
                       const std::vector<double>& upper_bounds, const Labels& labels = {});
  // An info metric: a gauge family with ONE child of value 1, whose labels replace the previous
  // child's (e.g. atoll_experiment_info{experiment="…",algorithm="…"} 1). Empty labels remove it.
  void set_info(const std::string& name, const std::string& help, const Labels& labels);

  // A gauge without labels whose value may be unknown: nullopt removes the family, so that the
  // series is absent (as Prometheus expects of an unknown value) rather than stale. Like an
  // info metric's, its child is replaced, never handed out by reference.
  void set_optional_gauge(const std::string& name, const std::string& help,
                          std::optional<double> value);

  // Called in order at the start of every render(), outside the registry's mutex: collectors
  // set gauges from live state (current round, nodes, memory) just before they are read.
  void add_collector(std::function<void()> collect);

  // Every family in name order: # HELP, # TYPE, then each child in label order; a histogram
  // as cumulative name_bucket{…,le="…"} lines ending with le="+Inf", then name_sum and
  // name_count.
  std::string render() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Family {
    Type type = Type::kGauge;
    std::string help;
    std::vector<double> bounds;  // histograms
    bool info = false;           // set_info's or set_optional_gauge's: no references handed out
    std::map<Labels, std::unique_ptr<Counter>> counters;
    std::map<Labels, std::unique_ptr<Gauge>> gauges;
    std::map<Labels, std::unique_ptr<Histogram>> histograms;
  };
  Family& family_locked(const std::string& name, Type type, const std::string& help,
                        const std::vector<double>& bounds, const Labels& labels);

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
  mutable std::mutex collectors_mu_;
  std::vector<std::function<void()>> collectors_;
};

// Escapes for the text format: a label value (\ " and newline) and a HELP text (\ and newline).
std::string escape_label_value(std::string_view value);
std::string escape_help(std::string_view help);
// A sample value as the text format writes it: shortest round-trip decimal, NaN, +Inf, -Inf.
std::string format_value(double v);

// This process's resident set size in bytes (/proc/self/statm × the page size); 0 when it
// cannot be read.
uint64_t process_resident_memory_bytes();
// Registers process_resident_memory_bytes (a gauge read at every render) on `registry`.
void add_process_metrics(Registry& registry);

}  // namespace atl::transport::metrics
