// Prometheus text exposition checked by a real parser: tests/tools/parse_prometheus.py runs
// prometheus_client's parser (Debian: python3-prometheus-client, installed by
// deploy/install-deps.sh) and the histogram checks it does not do, and hands back the samples.
#pragma once

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "node/subprocess.h"

namespace atl::testing {

struct ParsedMetrics {
  bool parser_missing = false;   // prometheus_client is not installed: skip
  bool ok = false;               // parsed and consistent
  std::string log;               // the parser's complaint when !ok
  boost::json::object families;  // family name → type ("counter", "gauge", "histogram", ...)
  boost::json::object samples;   // "name{a=\"x\"}" (labels sorted by name) → value

  bool has(const std::string& sample) const { return samples.contains(sample); }
  // The sample's value; NaN when absent (an assertion on it then fails).
  double value(const std::string& sample) const {
    auto it = samples.find(sample);
    if (it == samples.end() || !it->value().is_number()) return std::nan("");
    return it->value().to_number<double>();
  }
};

// Parses `text` with the real parser; `scratch` is a directory for the files it needs.
inline ParsedMetrics parse_prometheus_text(const std::string& text, const std::string& scratch) {
  namespace fs = std::filesystem;
  ParsedMetrics out;
  const std::string in = (fs::path(scratch) / "metrics.txt").string();
  const std::string json = (fs::path(scratch) / "metrics.json").string();
  const std::string log = (fs::path(scratch) / "parse.log").string();
  { std::ofstream(in, std::ios::binary) << text; }
  fs::remove(log);
  auto p = node::Subprocess::spawn(
      {ATOLL_PYTHON, std::string(ATOLL_SOURCE_DIR) + "/tests/tools/parse_prometheus.py", in, json},
      log);
  if (!p.ok()) {
    out.log = p.status().to_string();
    return out;
  }
  const auto code = p->wait_for(std::chrono::seconds(60));
  std::stringstream ss;
  ss << std::ifstream(log).rdbuf();
  out.log = ss.str();
  if (code && *code == 77) {
    out.parser_missing = true;
    return out;
  }
  if (!code || *code != 0) return out;
  std::stringstream js;
  js << std::ifstream(json).rdbuf();
  boost::system::error_code ec;
  const boost::json::value v = boost::json::parse(js.str(), ec);
  if (ec || !v.is_object()) {
    out.log += "\nparse_prometheus.py wrote no JSON object";
    return out;
  }
  out.families = v.as_object().at("families").as_object();
  out.samples = v.as_object().at("samples").as_object();
  out.ok = true;
  return out;
}

// In a test: parses `text`, skipping the test with the parser's message when it is not
// installed, failing it when the text is refused. Use as
//   ParsedMetrics m;  ASSERT_PROMETHEUS_TEXT(text, dir, m);
#define ASSERT_PROMETHEUS_TEXT(text, scratch, parsed)                                        \
  do {                                                                                       \
    parsed = ::atl::testing::parse_prometheus_text((text), (scratch));                       \
    if (parsed.parser_missing) GTEST_SKIP() << "the parser part is skipped: " << parsed.log; \
    ASSERT_TRUE(parsed.ok) << parsed.log << "\n--- text ---\n" << (text);                    \
  } while (0)

}  // namespace atl::testing
