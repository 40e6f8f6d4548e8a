// libFuzzer target for the safetensors decoder (checkpoints and model files may come from a
// peer or a damaged disk): any bytes must give a Status or tensors whose data matches their
// dtype and shape, never a crash, leak or out-of-bounds read.
// Build and run: tests/fuzz/run.sh [seconds].
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "algorithms/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  atl::algorithms::SafetensorsLimits limits;
  limits.max_header_bytes = 1 << 16;
  limits.max_tensors = 4096;
  auto st = atl::algorithms::decode_safetensors(data, size, limits);
  if (!st.ok()) return 0;
  for (const auto& t : st->tensors) {
    if (t.data.size() != t.numel() * atl::algorithms::dtype_size(t.dtype)) std::abort();
  }
  return 0;
}
