// Tensor streams: a byte payload travels as TensorChunk messages of at most 1 MiB, the first
// carrying the TensorHeader (with the XXH3-128 of the whole payload, transport/payload_digest.h),
// every chunk carrying the CRC-32C of its data. ChunkAssembler is the receiving side and trusts
// nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/core/status.h"
#include "transport/payload_digest.h"
#include "transport/proto/atoll.pb.h"

namespace atl::transport {

// 2: the payload check is XXH3-128 (payload_xxh3); 1 carried a SHA-256 (payload_sha256).
inline constexpr uint32_t kWireVersion = 2;
inline constexpr size_t kMaxChunkBytes = size_t{1} << 20;  // data bytes per TensorChunk
// What gRPC's PullParams / PushUpdate streams send per chunk: small enough that a chunk moves
// within the streams' 60 s stall bound down to 35 kbit/s (a 1 MiB chunk took 84 s at 100 kbit/s,
// so a slow pull was cut as stalled while bytes flowed), and that a revoked caller's transfer
// stops within one of them. Receivers take any size up to kMaxChunkBytes.
inline constexpr size_t kStreamChunkBytes = size_t{256} << 10;

// Calls `sink` once per chunk, in order. Fills header.wire_version, payload_bytes and, unless
// the caller set it, payload_xxh3 (the caller sets the rest). A sender that already knows the
// payload's digest (the coordinator's, cached once per θ or encoding) sets it and saves a pass
// over the payload before the first chunk; the receiver checks it all the same (a wrong one is
// DataLoss). An empty payload is one chunk with no data, so the header always arrives.
// `chunk_bytes` must be in [1, kMaxChunkBytes]. Stops at and returns the first non-OK status of
// `sink` (e.g. a broken stream).
Status for_each_chunk(atoll_pb::v1::TensorHeader header, std::string_view payload,
                      const std::function<Status(const atoll_pb::v1::TensorChunk&)>& sink,
                      size_t chunk_bytes = kMaxChunkBytes);

// Convenience: all chunks at once (copies the payload; fine for tests and small tensors).
StatusOr<std::vector<atoll_pb::v1::TensorChunk>> chunk_payload(atoll_pb::v1::TensorHeader header,
                                                               std::string_view payload,
                                                               size_t chunk_bytes = kMaxChunkBytes);

// The checks a receiver makes of a stream's header before any allocation (`where` starts each
// message): wire_version (InvalidArgument), payload_bytes above `max_payload_bytes`
// (OutOfRange), payload_xxh3 not 16 bytes (when `digest_in_header`; the bulk lane sends it after
// the payload), codec none with numel != payload_bytes / 4 (InvalidArgument).
Status check_stream_header(const atoll_pb::v1::TensorHeader& header, uint64_t max_payload_bytes,
                           const std::string& where, bool digest_in_header = true);

// Gives `buffer` the capacity for `payload_bytes` (keeping it when it has it already; a new one
// is advised into 4 KiB pages, see the definition).
void reserve_receive_buffer(std::string& buffer, uint64_t payload_bytes);

// Receives one stream. Usage: add() each chunk as it arrives, then finish(). The first error
// is sticky: later calls return it again. Errors:
//   InvalidArgument — malformed stream (no header / second header, wrong wire_version, bad
//                     payload_xxh3 not 16 bytes, empty non-first chunk, numel inconsistent
//                     with codec none)
//   OutOfRange      — declared payload above the limit, chunk above 1 MiB, data past the end
//   DataLoss        — CRC-32C mismatch, gap (missing chunk), overlap (reordered/duplicate
//                     chunk), stream ended short, XXH3-128 mismatch
class ChunkAssembler {
 public:
  // max_payload_bytes: the largest payload this receiver accepts; checked against the header's
  // declaration before any allocation. `buffer`: storage to assemble into (its contents are
  // dropped; its capacity is kept when the payload fits): a receiver that hands back the
  // previous take_payload() writes each stream into memory it has touched before instead of
  // faulting in hundreds of MB of fresh pages per stream.
  explicit ChunkAssembler(uint64_t max_payload_bytes, std::string buffer = {});

  Status add(const atoll_pb::v1::TensorChunk& chunk);
  // All bytes received and the XXH3-128 matches. Call once after the last chunk.
  Status finish();

  bool has_header() const { return has_header_; }
  const atoll_pb::v1::TensorHeader& header() const { return header_; }
  uint64_t bytes_received() const { return payload_.size(); }
  size_t chunks_received() const { return chunks_; }
  // The payload; valid after finish() returned OK.
  std::string take_payload() { return std::move(payload_); }

 private:
  Status fail(Status st);

  uint64_t max_payload_bytes_;
  atoll_pb::v1::TensorHeader header_;
  bool has_header_ = false;
  bool finished_ = false;
  size_t chunks_ = 0;
  std::string payload_;
  PayloadHasher digest_;
  Status error_;
};

// fp32 payloads (codec "none"): little-endian IEEE-754 binary32, 4 bytes per element.
std::string floats_to_bytes(std::span<const float> values);
// InvalidArgument when the size is not a multiple of 4.
StatusOr<std::vector<float>> bytes_to_floats(std::string_view bytes);

}  // namespace atl::transport
