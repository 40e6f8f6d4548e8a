// `atoll bench codecs`: encode and decode throughput of the pseudo-gradient codecs against the
// machine's memcpy (measure/codecs.h says what is timed and how). This file turns flags into the
// codec list and prints the report.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/bench_common.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "measure/codecs.h"

namespace atl::cli {

int bench_codecs(const Args& args) {
  Flags flags("bench codecs",
              {{"numel", true, "values in the pseudo-gradient", "16777216"},
               {"threads", true,
                "threads (0 = all cores); with T > 1 memcpy is split in T parts and each codec "
                "splits one message's encode and decode over T threads",
                "1"},
               {"reps", true, "timed repetitions per measurement (best is kept)", "5"},
               {"codecs", true, "comma-separated codec specs (default: the standard set)", ""},
               {"kernels", false, "also time the format kernels alone (single-threaded)", ""},
               {"json", false, "print one JSON object", ""}});
  if (Status s = flags.parse(args); !s.ok()) return fail("bench codecs", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto numel = flags.get_int("numel", int64_t{1} << 24, 1024, int64_t{1} << 30);
  auto threads = flags.get_int("threads", 1, 0, 1024);
  auto reps = flags.get_int("reps", 5, 1, 1000);
  if (!numel.ok()) return fail("bench codecs", numel.status().message(), 2);
  if (!threads.ok()) return fail("bench codecs", threads.status().message(), 2);
  if (!reps.ok()) return fail("bench codecs", reps.status().message(), 2);
  std::vector<std::string> specs;
  if (auto list = flags.get("codecs"); list && !list->empty()) {
    size_t pos = 0;
    while (pos <= list->size()) {
      const size_t comma = std::min(list->find(',', pos), list->size());
      specs.push_back(list->substr(pos, comma - pos));
      pos = comma + 1;
    }
  } else {
    specs = measure::default_codec_specs();
  }
  auto report = measure::measure_codec_speed(specs, static_cast<size_t>(*numel),
                                             static_cast<int>(*threads), static_cast<int>(*reps),
                                             flags.has("kernels"));
  if (!report.ok())
    return fail("bench codecs", report.status().message(),
                report.status().code() == StatusCode::kInvalidArgument ? 2 : 1);
  const auto& rows = report->codecs;
  const auto& kernel_rows = report->kernels;
  const size_t n = report->numel;
  const double memcpy_gbps = report->memcpy_gbps;
  const int used = report->threads;
  if (flags.has("json")) {
    std::printf(
        "{\"bench\":\"codecs\",\"numel\":%zu,\"threads\":%d,\"memcpy_gbps\":%.3f,"
        "\"codecs\":[",
        n, used, memcpy_gbps);
    for (size_t i = 0; i < rows.size(); ++i) {
      const measure::CodecSpeed& w = rows[i];
      std::printf(
          "%s{\"codec\":\"%s\",\"canonical\":\"%s\",\"encode_gbps\":%.3f,\"decode_gbps\":%.3f,"
          "\"bits_per_value\":%.4f,\"encode_vs_memcpy\":%.3f,\"rel_rmse\":%.3e}",
          i ? "," : "", w.codec.c_str(), w.canonical.c_str(), w.encode_gbps, w.decode_gbps,
          w.bits_per_value, w.encode_gbps / memcpy_gbps, w.rel_rmse);
    }
    std::printf("]");
    if (!kernel_rows.empty()) {
      std::printf(",\"kernels\":[");
      for (size_t i = 0; i < kernel_rows.size(); ++i) {
        std::printf("%s{\"name\":\"%s\",\"gbps\":%.3f}", i ? "," : "", kernel_rows[i].name.c_str(),
                    kernel_rows[i].gbps);
      }
      std::printf("]");
    }
    std::printf("}\n");
  } else {
    std::printf("%zu values, %d thread(s), memcpy %.2f GB/s\n", n, used, memcpy_gbps);
    std::printf("%-28s %10s %10s %8s %10s %10s\n", "codec", "enc GB/s", "dec GB/s", "bits/val",
                "enc/memcpy", "rel rmse");
    for (const measure::CodecSpeed& w : rows) {
      std::printf("%-28s %10.2f %10.2f %8.3f %9.0f%% %10.2e\n", w.codec.c_str(), w.encode_gbps,
                  w.decode_gbps, w.bits_per_value, 100.0 * w.encode_gbps / memcpy_gbps, w.rel_rmse);
    }
    for (const measure::FormatKernelSpeed& k : kernel_rows)
      std::printf("kernel %-21s %10.2f\n", k.name.c_str(), k.gbps);
  }
  return 0;
}

}  // namespace atl::cli
