// `atoll bench lane`: the bulk lane's pull and push rate with no engine behind it
// (measure/lane.h); bench/transport/run.py --floor-lane records it beside the gRPC floor.
#include <cstdio>
#include <string>

#include "cli/bench_common.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "measure/lane.h"

namespace atl::cli {

namespace {

std::string json_list(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%s%.6f", i ? "," : "", v[i]);
    s += buf;
  }
  return s + "]";
}

}  // namespace

int bench_lane(const Args& args) {
  Flags flags("bench lane",
              {{"bytes", true, "payload bytes per transfer", "206606336"},
               {"transfers", true, "pulls, then as many pushes", "8"},
               {"json", false, "print one JSON object", ""}});
  if (Status s = flags.parse(args); !s.ok()) return fail("bench lane", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto bytes = flags.get_int("bytes", 206606336, 1, int64_t{8} << 30);
  auto transfers = flags.get_int("transfers", 8, 1, 1000);
  if (!bytes.ok()) return fail("bench lane", bytes.status().message(), 2);
  if (!transfers.ok()) return fail("bench lane", transfers.status().message(), 2);
  auto r = measure::measure_lane_speed(static_cast<size_t>(*bytes), static_cast<int>(*transfers));
  if (!r.ok()) return fail("bench lane", r.status().message());
  if (flags.has("json")) {
    std::printf("{\"bench\":\"lane\",\"payload_bytes\":%zu,\"pull_stream_seconds\":%s,"
                "\"push_stream_seconds\":%s}\n",
                r->payload_bytes, json_list(r->pull_seconds).c_str(),
                json_list(r->push_seconds).c_str());
    return 0;
  }
  for (size_t i = 0; i < r->pull_seconds.size(); ++i)
    std::printf("pull %zu: %.0f MB/s\n", i, r->payload_bytes / r->pull_seconds[i] / 1e6);
  for (size_t i = 0; i < r->push_seconds.size(); ++i)
    std::printf("push %zu: %.0f MB/s\n", i, r->payload_bytes / r->push_seconds[i] / 1e6);
  return 0;
}

}  // namespace atl::cli
