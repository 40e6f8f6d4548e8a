// The Prometheus registry (transport/metrics/registry.h): the exact text it renders (escaping,
// cumulative histogram buckets ending in +Inf, _sum and _count, label order, info metrics),
// thread safety, and the same text accepted by prometheus_client's parser.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "tests/tools/prometheus_text.h"
#include "transport/metrics/registry.h"
#include "tools/temp_dir.h"

namespace atl::transport::metrics {
namespace {

TEST(MetricsRegistry, RendersCountersAndGaugesWithHelpTypeAndEscapedLabels) {
  Registry r;
  r.counter("t_requests_total", "Requests.\nSecond line with a \\ backslash.",
            {{"path", "/a\"b\\c\nd"}})
      .add(3);
  r.gauge("t_temperature", "Degrees.").set(-1.5);
  EXPECT_EQ(r.render(),
            "# HELP t_requests_total Requests.\\nSecond line with a \\\\ backslash.\n"
            "# TYPE t_requests_total counter\n"
            "t_requests_total{path=\"/a\\\"b\\\\c\\nd\"} 3\n"
            "# HELP t_temperature Degrees.\n"
            "# TYPE t_temperature gauge\n"
            "t_temperature -1.5\n");
}

TEST(MetricsRegistry, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  Registry r;
  Histogram& h = r.histogram("t_seconds", "Durations.", {0.1, 1, 10}, {{"kind", "x"}});
  for (double v : {0.05, 0.1, 0.5, 3.0, 3.0, 100.0}) h.observe(v);
  h.observe(std::nan(""));  // ignored
  EXPECT_EQ(r.render(),
            "# HELP t_seconds Durations.\n"
            "# TYPE t_seconds histogram\n"
            "t_seconds_bucket{kind=\"x\",le=\"0.1\"} 2\n"  // 0.05 and 0.1 (le: less or equal)
            "t_seconds_bucket{kind=\"x\",le=\"1\"} 3\n"
            "t_seconds_bucket{kind=\"x\",le=\"10\"} 5\n"
            "t_seconds_bucket{kind=\"x\",le=\"+Inf\"} 6\n"
            "t_seconds_sum{kind=\"x\"} 106.65\n"
            "t_seconds_count{kind=\"x\"} 6\n");
  const Histogram::Snapshot s = h.snapshot();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{2, 3, 5}));
  EXPECT_EQ(s.count, 6u);
}

TEST(MetricsRegistry, FamiliesAndChildrenRenderInOrderAndCountersOnlyGoUp) {
  Registry r;
  Counter& b = r.counter("t_b_total", "B.", {{"reason", "zeta"}});
  r.counter("t_b_total", "B.", {{"reason", "alpha"}}).add(2);
  r.gauge("t_a", "A.").set(1);
  b.add(1);
  b.add(-5);                                                           // ignored
  b.add(std::numeric_limits<double>::quiet_NaN());                     // ignored
  EXPECT_EQ(&b, &r.counter("t_b_total", "B.", {{"reason", "zeta"}}));  // the same child
  EXPECT_EQ(r.render(),
            "# HELP t_a A.\n# TYPE t_a gauge\nt_a 1\n"
            "# HELP t_b_total B.\n# TYPE t_b_total counter\n"
            "t_b_total{reason=\"alpha\"} 2\nt_b_total{reason=\"zeta\"} 1\n");
}

TEST(MetricsRegistry, InfoMetricKeepsOneChildAndCollectorsRunBeforeRendering) {
  Registry r;
  Gauge& g = r.gauge("t_live", "Live value.");
  int calls = 0;
  r.add_collector([&] { g.set(++calls); });
  r.set_info("t_info", "Info.", {{"experiment", "a"}});
  r.set_info("t_info", "Info.", {{"experiment", "b"}});
  EXPECT_EQ(r.render(),
            "# HELP t_info Info.\n# TYPE t_info gauge\nt_info{experiment=\"b\"} 1\n"
            "# HELP t_live Live value.\n# TYPE t_live gauge\nt_live 1\n");
  r.set_info("t_info", "Info.", {});
  EXPECT_EQ(r.render(),
            "# HELP t_info Info.\n# TYPE t_info gauge\n"
            "# HELP t_live Live value.\n# TYPE t_live gauge\nt_live 2\n");
}

TEST(MetricsRegistry, FormatsSpecialValuesAndBuildsBuckets) {
  EXPECT_EQ(format_value(std::nan("")), "NaN");
  EXPECT_EQ(format_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(format_value(0.25), "0.25");
  EXPECT_EQ(format_value(1234567), "1234567");
  EXPECT_EQ(exponential_buckets(0.5, 2, 4), (std::vector<double>{0.5, 1, 2, 4}));
  EXPECT_GT(process_resident_memory_bytes(), 1u << 20);  // this test binary holds > 1 MiB
}

TEST(MetricsRegistry, BadNamesAreBugs) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Registry r;
  EXPECT_DEATH(r.counter("t_requests", "no _total"), "must end in _total");
  EXPECT_DEATH(r.gauge("0bad", "starts with a digit"), "bad metric name");
  EXPECT_DEATH(r.gauge("t_ok", "reserved label", {{"__x", "v"}}), "bad label name");
  EXPECT_DEATH(r.histogram("t_h", "le is the bucket label", {1}, {{"le", "v"}}), "bucket label");
  r.gauge("t_g", "a gauge");
  EXPECT_DEATH(r.counter("t_g", "now a counter"), "");
}

TEST(MetricsRegistry, ConcurrentUpdatesAreAllCounted) {
  Registry r;
  Counter& c = r.counter("t_total", "T.");
  Histogram& h = r.histogram("t_seconds", "S.", {1});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.add();
        h.observe(0.5);
        if (i % 1000 == 0) (void)r.render();
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), 40000);
  EXPECT_EQ(h.snapshot().count, 40000u);
  EXPECT_EQ(h.snapshot().cumulative[0], 40000u);
}

// The same renderer's text through prometheus_client's parser: names, labels with every escape,
// counters, gauges, an info metric and a histogram.
TEST(MetricsRegistry, RealParserAcceptsTheText) {
  Registry r;
  r.counter("t_updates_rejected_total", "Refused, by reason.", {{"reason", "a \"quoted\"\\n"}})
      .add(2);
  r.counter("t_updates_rejected_total", "Refused, by reason.", {{"reason", "line\nbreak"}});
  r.gauge("t_bpb", "Bits per byte.").set(4.25);
  r.gauge("t_nan", "Not a number.").set(std::nan(""));
  r.set_info("t_info", "Info \\ help.", {{"experiment", "x"}, {"algorithm", "diloco"}});
  Histogram& h = r.histogram("t_round_duration_seconds", "Durations.", {0.5, 1, 2.5});
  for (double v : {0.1, 0.7, 2.0, 9.0}) h.observe(v);
  add_process_metrics(r);
  const std::string text = r.render();

  testing::TempDir dir;
  testing::ParsedMetrics m;
  ASSERT_PROMETHEUS_TEXT(text, dir.path(), m);
  EXPECT_EQ(m.families.at("t_updates_rejected").as_string(), "counter");
  EXPECT_EQ(m.families.at("t_round_duration_seconds").as_string(), "histogram");
  EXPECT_EQ(m.value("t_updates_rejected_total{reason=\"a \"quoted\"\\n\"}"), 2);
  EXPECT_EQ(m.value("t_updates_rejected_total{reason=\"line\nbreak\"}"), 0);
  EXPECT_EQ(m.value("t_bpb"), 4.25);
  EXPECT_EQ(m.samples.at("t_nan").as_string(), "NaN");
  EXPECT_EQ(m.value("t_info{algorithm=\"diloco\",experiment=\"x\"}"), 1);
  EXPECT_EQ(m.value("t_round_duration_seconds_bucket{le=\"1\"}"), 2);
  EXPECT_EQ(m.value("t_round_duration_seconds_bucket{le=\"+Inf\"}"), 4);
  EXPECT_EQ(m.value("t_round_duration_seconds_count"), 4);
  EXPECT_DOUBLE_EQ(m.value("t_round_duration_seconds_sum"), 11.8);
  EXPECT_GT(m.value("process_resident_memory_bytes"), 1 << 20);
}

}  // namespace
}  // namespace atl::transport::metrics
