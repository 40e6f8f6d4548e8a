// The bulk lane's own ceiling (transport/bulk_lane.h): a BulkLaneServer and a BulkLaneClient in
// this process, over TLS 1.3 on loopback with certificates from a throwaway CA, moving one
// payload back and forth with no Atoll engine behind it (the handler serves a fixed payload and
// keeps what is pushed, reusing its buffers as the coordinator does). The same shape as the bare
// gRPC stream of bench/transport/floor, so the two ceilings compare.
#pragma once

#include <cstddef>
#include <vector>

#include "kernels/core/status.h"

namespace atl::measure {

struct LaneSpeed {
  size_t payload_bytes = 0;
  std::vector<double> pull_seconds;  // per transfer: the client's call, connection included
  std::vector<double> push_seconds;  // per transfer: until the payload's last byte is written
};

// `transfers` pulls, then `transfers` pushes, of `payload_bytes` each.
StatusOr<LaneSpeed> measure_lane_speed(size_t payload_bytes, int transfers);

}  // namespace atl::measure
