// libFuzzer target for the transport's ChunkAssembler: any sequence of TensorChunk messages must
// end in a Status, never a crash, an allocation above the receiver's limit, or a payload that
// disagrees with its header. Input: 1 flag byte, then chunks as [2-byte length][serialized
// TensorChunk]; an odd flag recomputes each chunk's CRC-32C so mutations reach the stream checks.
// Build and run: tests/fuzz/run.sh [seconds] (needs the generated protobuf code: FUZZ_PROTO_GEN).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "kernels/core/crc32c.h"
#include "transport/tensor_stream.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool fix_crc = data[0] & 1;
  constexpr uint64_t kLimit = 1 << 16;
  atl::transport::ChunkAssembler assembler(kLimit);
  size_t at = 1;
  atl::Status s = atl::Status::Ok();
  while (at + 2 <= size && s.ok()) {
    const size_t len = data[at] | (size_t{data[at + 1]} << 8);
    at += 2;
    if (len > size - at) break;
    atoll_pb::v1::TensorChunk chunk;
    if (!chunk.ParseFromArray(data + at, static_cast<int>(len))) return 0;
    at += len;
    if (fix_crc) chunk.set_crc32c(atl::crc32c(chunk.data()));
    s = assembler.add(chunk);
  }
  if (s.ok() && assembler.finish().ok()) {
    const std::string payload = assembler.take_payload();
    if (payload.size() > kLimit || payload.size() != assembler.header().payload_bytes()) {
      std::abort();
    }
  }
  return 0;
}
