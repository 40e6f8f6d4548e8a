// Pseudo-gradient codecs: fp32 values -> self-describing bytes -> fp32 values.
//
// Bytes on the wire (little-endian; full layout in docs/formats.md):
//   [0,4)   magic "ATLC"            [4,6)  version (1)      [6,8)  spec length L (1..128)
//   [8,16)  numel                   [16,24) payload length P (with "+zstd": the frame's)
//   [24,28) CRC-32C of every byte of the message except these four
//   [28,32) reserved, zero          [32,32+L) canonical spec text    [32+L, 32+L+P) payload
//
// A "+zstd" spec puts the payload of the stages before it in zstd frames, one per 1 MiB part
// (entropy.h); the decoder expands them into exactly the bytes that spec and numel imply, then
// decodes those.
//
// Decoders trust nothing: lengths, version, checksum, the declared numel against the caller's,
// the payload length against the one the spec implies, index order and range, and finiteness
// of every decoded value are checked, and a failure is a Status, never a crash. Allocation is
// bounded by the caller's numel, never by a field of the message.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "algorithms/compress/spec.h"
#include "kernels/core/status.h"

namespace atl::algorithms::compress {

inline constexpr uint32_t kCodecVersion = 1;
inline constexpr size_t kHeaderBytes = 32;
// Largest tensor a codec message may describe (2^36 values, 256 GiB of fp32).
inline constexpr uint64_t kMaxNumel = uint64_t{1} << 36;

// Spec text of the identity codec (dense fp32). A TensorHeader naming codec "none" carries
// the raw little-endian fp32 values, not a codec message (transport/tensor_stream.h).
inline constexpr std::string_view kNoneSpec = "none";

class Codec {
 public:
  static StatusOr<Codec> create(std::string_view spec_text);
  explicit Codec(const CodecSpec& spec) : spec_(spec) {}
  // The identity codec "none" (also what "fp32" parses to).
  static Codec none() { return Codec(CodecSpec{}); }

  const CodecSpec& spec() const { return spec_; }
  // Threads encode and decode use (OpenMP; at least 1, the default). The work is split in fixed
  // slices of 2^18 values, so a message's bytes, and the values it decodes to, are the same for
  // every thread count: the count is a speed setting, never part of a result.
  Codec& set_threads(int threads) {
    threads_ = threads < 1 ? 1 : threads;
    return *this;
  }
  int threads() const { return threads_; }
  bool is_none() const { return spec_ == CodecSpec{}; }
  // Rejects non-finite input (InvalidArgument) and numel above kMaxNumel; exact top-k needs
  // numel < 2^32.
  StatusOr<std::vector<uint8_t>> encode(std::span<const float> values) const;
  // Same, into out (resized; its capacity is reused across rounds, which avoids page-faulting
  // a fresh buffer every time). Dense codecs validate and checksum chunk by chunk in the same
  // pass that quantizes, so on an error out holds a partial message (never a valid one).
  Status encode_into(std::span<const float> values, std::vector<uint8_t>& out) const;
  // Also checks that the message was made with this codec's spec.
  StatusOr<std::vector<float>> decode(std::span<const uint8_t> bytes, uint64_t numel) const;
  // Decodes into out (size numel) without allocating.
  Status decode_into(std::span<const uint8_t> bytes, std::span<float> out) const;

 private:
  CodecSpec spec_;
  int threads_ = 1;
};

// Decodes any codec message; the spec comes from the message itself. threads as for
// Codec::set_threads.
StatusOr<std::vector<float>> decode(std::span<const uint8_t> bytes, uint64_t numel,
                                    int threads = 1);
Status decode_into(std::span<const uint8_t> bytes, std::span<float> out, int threads = 1);

// Payload bytes for numel values: exact for every spec without "+zstd" (its size is fixed by
// the spec and numel). With "+zstd", the bytes the zstd frame expands to (the stages before it);
// the frame itself is smaller by what the codes' skew allows, and its size depends on the values.
uint64_t payload_bytes(const CodecSpec& spec, uint64_t numel);
// Whole message bytes (header + spec + payload), as payload_bytes: exact without "+zstd", and
// with it the size before the entropy stage.
uint64_t encoded_bytes(const CodecSpec& spec, uint64_t numel);
// The most bytes a message may take (what a receiver may have to accept): encoded_bytes, or with
// "+zstd" zstd's bound on a frame of payload_bytes.
uint64_t max_encoded_bytes(const CodecSpec& spec, uint64_t numel);
// Bits on the wire per input value, header included (with "+zstd": before the entropy stage).
StatusOr<double> bits_per_value(std::string_view spec_text, uint64_t numel);

}  // namespace atl::algorithms::compress
