// `atoll bench codecs --json` on the real binary: one well-formed JSON object with memcpy and
// per-codec throughput, sizes that match the codec definitions, and no stray output.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cmath>
#include <map>
#include <set>
#include <string>

#include "integration/cli_test_util.h"
#include "integration/json_test_util.h"

namespace atl::testing {
namespace {

TEST(BenchCodecsCli, PrintsOneJsonObjectWithEveryCodec) {
  TempDir dir;
  const RunResult r = run_atoll({"bench", "codecs", "--numel", "65536", "--reps", "1", "--json"},
                                dir / "log.txt", std::chrono::seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  boost::system::error_code ec;
  const boost::json::value doc = boost::json::parse(r.output, ec);  // whole output: JSON only
  ASSERT_FALSE(ec) << ec.message() << "\n" << r.output;
  ASSERT_TRUE(doc.is_object()) << r.output;
  const auto& top = doc.as_object();
  const double memcpy_gbps = number(top, "memcpy_gbps");
  EXPECT_GT(memcpy_gbps, 0.01);
  EXPECT_LT(memcpy_gbps, 10000.0);
  EXPECT_EQ(number(top, "numel"), 65536.0);
  ASSERT_TRUE(top.contains("codecs") && top.at("codecs").is_array()) << r.output;

  // Expected wire bits per value at 65536 values: payload plus header (32 bytes + spec text).
  auto bpv = [](double payload_bytes, const std::string& spec) {
    return 8.0 * (payload_bytes + 32 + static_cast<double>(spec.size())) / 65536.0;
  };
  const double k = std::round(0.02 * 65536);  // 1311 values kept by topk:0.02
  const std::map<std::string, double> expected = {
      {"bf16", bpv(2.0 * 65536, "bf16")},
      {"fp8", bpv(4 + 65536, "fp8")},
      {"int8", bpv(65536 / 32 * 36.0, "int8:32")},
      {"int4", bpv(65536 / 32 * 20.0, "int4:32")},
      {"nvfp4", bpv(4 + 65536 / 16 * 9.0, "nvfp4")},
      {"mxfp4", bpv(65536 / 32 * 17.0, "mxfp4")},
      {"topk:0.02", bpv(std::ceil(k * 16 / 8) + 4 * k, "topk:0.02")},
      {"topk:0.02+int4", bpv(std::ceil(k * 16 / 8) + std::ceil(k / 32) * 20, "topk:0.02+int4:32")},
      {"sign", bpv(65536 / 128 * 18.0, "sign:128")},        // bf16 scale + 128 bits
      {"ternary", bpv(65536 / 128 * 28.0, "ternary:128")},  // bf16 scale + 26 bytes of trits
      // 64 of each 4096 (12-bit local indices), sign values with a scale per 128 kept.
      {"topk-chunked:0.015625:4096+sign",
       bpv(16 * 64 * 12 / 8.0 + 16 * 64 / 128 * 18.0, "topk-chunked:0.015625:4096+sign:128")},
      {"int4:256", bpv(65536 / 256 * 132.0, "int4:256")},
  };
  std::set<std::string> seen;
  std::map<std::string, double> bits_of, rmse_of;
  for (const auto& item : top.at("codecs").as_array()) {
    ASSERT_TRUE(item.is_object());
    const auto& row = item.as_object();
    ASSERT_TRUE(row.contains("codec") && row.at("codec").is_string());
    const std::string codec(row.at("codec").as_string());
    ASSERT_TRUE(row.contains("canonical") && row.at("canonical").is_string());
    seen.insert(codec);
    const double enc = number(row, "encode_gbps"), dec = number(row, "decode_gbps");
    const double bits = number(row, "bits_per_value");
    EXPECT_GT(enc, 0.0) << codec;
    EXPECT_GT(dec, 0.0) << codec;
    EXPECT_LT(enc, 10000.0) << codec;
    EXPECT_LT(dec, 10000.0) << codec;
    EXPECT_GT(bits, 0.0) << codec;
    EXPECT_LT(bits, 32.0) << codec;  // every codec in the set compresses
    bits_of[codec] = bits;
    rmse_of[codec] = number(row, "rel_rmse");
    if (auto it = expected.find(codec); it != expected.end()) {
      EXPECT_NEAR(bits, it->second, 1e-3) << codec;
    }
  }
  for (const char* want : {"bf16", "fp8", "int8", "int4", "nvfp4", "mxfp4", "topk:0.02",
                           "topk:0.02+int4", "topk-chunked:0.02+int4", "sign", "ternary",
                           "topk-chunked:0.015625:4096+sign", "int4:256", "int4:256+zstd",
                           "nvfp4+zstd"}) {
    EXPECT_TRUE(seen.count(want)) << "no row for " << want << " in " << r.output;
  }
  // The entropy stage is lossless and takes the codes' skew: int4's uniform steps leave codes
  // near zero far more frequent than the extremes. (nvfp4's E2M1 steps widen with magnitude,
  // which leaves its codes near uniform: it gains almost nothing, bench/RESULTS.md.)
  EXPECT_LT(bits_of["int4:256+zstd"], 0.9 * bits_of["int4:256"]) << r.output;
  EXPECT_EQ(rmse_of["int4:256+zstd"], rmse_of["int4:256"]) << r.output;
  EXPECT_EQ(rmse_of["nvfp4+zstd"], rmse_of["nvfp4"]) << r.output;
}

TEST(BenchCodecsCli, BadSpecIsOneLineAndExitCode2) {
  TempDir dir;
  const RunResult r = run_atoll({"bench", "codecs", "--numel", "4096", "--codecs", "int9"},
                                dir / "log.txt", std::chrono::seconds(60));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("int9"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace atl::testing
