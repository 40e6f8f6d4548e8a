// Encode and decode throughput of the pseudo-gradient codecs against the machine's memcpy,
// measured in the same run on the same input: what `atoll bench codecs` reports. GB/s are of
// fp32 input (4 bytes per value) for both directions, so they compare directly with memcpy's.
// Encode includes validation, the header and the CRC-32C; decode includes every check.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kernels/core/status.h"

namespace atl::measure {

struct CodecSpeed {
  std::string codec;      // the spec as given
  std::string canonical;  // the spec with every default spelled out
  double encode_gbps = 0, decode_gbps = 0;
  double bits_per_value = 0;  // whole message (header included) per value
  double rel_rmse = 0;        // ‖decode(encode(x)) − x‖ / ‖x‖: what the bytes saved cost
};

// A number-format kernel alone (no header, checksum or validation), single-threaded.
struct FormatKernelSpeed {
  std::string name;
  double gbps = 0;
};

struct CodecSpeedReport {
  size_t numel = 0;
  int threads = 0;  // kernel threads: memcpy and each codec's encode/decode split over them
  double memcpy_gbps = 0;
  std::vector<CodecSpeed> codecs;          // in the order of the specs
  std::vector<FormatKernelSpeed> kernels;  // with_kernels only
};

// The codecs `atoll bench codecs` measures by default.
std::vector<std::string> default_codec_specs();

// Times each codec on one message of `numel` pseudo-gradient-like values (standard normals
// scaled per 4096-value run by a log-uniform factor in [1e-5, 1e-2], one value in 1024 ten
// times larger), with `threads` kernel threads (0 = all cores): the best of `reps` runs (and at
// least 0.2 s) of memcpy, each encode and each decode. with_kernels: also the format kernels
// alone. InvalidArgument for a spec that is not a codec; Internal when a codec fails.
StatusOr<CodecSpeedReport> measure_codec_speed(const std::vector<std::string>& specs,
                                               size_t numel, int threads, int reps,
                                               bool with_kernels);

}  // namespace atl::measure
