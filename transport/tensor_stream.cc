#include "transport/tensor_stream.h"

#include <bit>
#include <cstdint>
#include <cstring>

#include "kernels/core/crc32c.h"
#include "kernels/core/huge_pages.h"
#include "kernels/core/sha256.h"  // to_hex

namespace atl::transport {

using atoll_pb::v1::TensorChunk;
using atoll_pb::v1::TensorHeader;

namespace {

std::string hex(const std::string& digest) {
  return to_hex(reinterpret_cast<const uint8_t*>(digest.data()), digest.size());
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

}  // namespace

Status for_each_chunk(TensorHeader header, std::string_view payload,
                      const std::function<Status(const TensorChunk&)>& sink, size_t chunk_bytes) {
  if (chunk_bytes == 0 || chunk_bytes > kMaxChunkBytes) {
    return InvalidArgument("chunk size " + std::to_string(chunk_bytes) + " is outside [1, " +
                           std::to_string(kMaxChunkBytes) + "]");
  }
  header.set_wire_version(kWireVersion);
  header.set_payload_bytes(payload.size());
  if (header.payload_xxh3().empty()) header.set_payload_xxh3(payload_digest(payload));
  size_t offset = 0;
  bool first = true;
  // One message for every chunk: its data buffer is allocated once, not once per MiB.
  TensorChunk chunk;
  do {
    const size_t n = std::min(chunk_bytes, payload.size() - offset);
    if (first)
      *chunk.mutable_header() = header;
    else
      chunk.clear_header();
    chunk.set_offset(offset);
    chunk.set_data(payload.data() + offset, n);
    chunk.set_crc32c(crc32c(payload.data() + offset, n));
    ATOLL_RETURN_IF_ERROR(sink(chunk));
    offset += n;
    first = false;
  } while (offset < payload.size());
  return Status::Ok();
}

StatusOr<std::vector<TensorChunk>> chunk_payload(TensorHeader header, std::string_view payload,
                                                 size_t chunk_bytes) {
  std::vector<TensorChunk> chunks;
  chunks.reserve(payload.size() / std::max<size_t>(chunk_bytes, 1) + 1);
  ATOLL_RETURN_IF_ERROR(for_each_chunk(
      std::move(header), payload,
      [&](const TensorChunk& c) {
        chunks.push_back(c);
        return Status::Ok();
      },
      chunk_bytes));
  return chunks;
}

Status check_stream_header(const TensorHeader& h, uint64_t max_payload_bytes,
                           const std::string& where, bool digest_in_header) {
    if (h.wire_version() != kWireVersion) {
    return (InvalidArgument(where + ": unsupported wire_version " +
                                std::to_string(h.wire_version()) + " (this build speaks " +
                                std::to_string(kWireVersion) + ")"));
  }
  // Before any allocation: the declaration is untrusted.
  if (h.payload_bytes() > max_payload_bytes) {
    return (OutOfRange(where + ": declared payload of " + std::to_string(h.payload_bytes()) +
                           " bytes exceeds the limit of " + std::to_string(max_payload_bytes) +
                           " bytes"));
  }
  if (digest_in_header && h.payload_xxh3().size() != kPayloadDigestBytes) {
    return (InvalidArgument(where + ": payload_xxh3 has " +
                                std::to_string(h.payload_xxh3().size()) + " bytes, not " +
                                std::to_string(kPayloadDigestBytes) + " (an XXH3-128 digest)"));
  }
  if (h.codec() == "none" && (h.payload_bytes() % sizeof(float) != 0 ||
                              h.numel() != h.payload_bytes() / sizeof(float))) {
    return (InvalidArgument(where + ": codec none needs 4 bytes per element, but numel is " +
                                std::to_string(h.numel()) + " and payload_bytes " +
                                std::to_string(h.payload_bytes())));
  }
  return Status::Ok();
}

void reserve_receive_buffer(std::string& buffer, uint64_t payload_bytes) {
  if (buffer.capacity() >= payload_bytes) return;
  // A buffer too small for this payload is not worth keeping: reserve() would copy it.
  std::string().swap(buffer);
  buffer.reserve(static_cast<size_t>(payload_bytes));
  // 4 KiB pages, not the huge pages `new` advises for large blocks: a receive buffer is made
  // once and reused by every later stream, so only its first touch differs, and on a VM whose
  // host takes back free 2 MiB blocks (free page reporting) a huge page's first touch faults
  // in 512 host pages: 0.3-0.45 s against 0.08-0.1 s for 206 MB here (docs/decisions.md,
  // "Receive buffers in 4 KiB pages").
  advise_small_pages(buffer.data(), buffer.capacity());
}

ChunkAssembler::ChunkAssembler(uint64_t max_payload_bytes, std::string buffer)
    : max_payload_bytes_(max_payload_bytes), payload_(std::move(buffer)) {
  payload_.clear();
}

Status ChunkAssembler::fail(Status st) {
  error_ = st;
  payload_.clear();
  payload_.shrink_to_fit();
  return st;
}

Status ChunkAssembler::add(const TensorChunk& chunk) {
  if (!error_.ok()) return error_;
  if (finished_) return fail(InvalidArgument("tensor stream: chunk received after the end"));
  const size_t index = chunks_;
  const std::string where = "tensor stream chunk " + std::to_string(index);

  if (index == 0) {
    if (!chunk.has_header()) return fail(InvalidArgument(where + ": first chunk has no header"));
    const TensorHeader& h = chunk.header();
    if (Status st = check_stream_header(h, max_payload_bytes_, where); !st.ok()) return fail(st);
    header_ = h;
    has_header_ = true;
    reserve_receive_buffer(payload_, h.payload_bytes());
  } else if (chunk.has_header()) {
    return fail(InvalidArgument(where + ": a second header (only the first chunk carries one)"));
  }

  const std::string& data = chunk.data();
  if (data.size() > kMaxChunkBytes) {
    return fail(OutOfRange(where + ": " + std::to_string(data.size()) +
                           " data bytes exceed the chunk limit of " +
                           std::to_string(kMaxChunkBytes)));
  }
  if (index > 0 && data.empty()) return fail(InvalidArgument(where + ": empty chunk"));
  const uint64_t expected = payload_.size();
  if (chunk.offset() > expected) {
    return fail(DataLoss(where + ": gap at offset " + std::to_string(expected) +
                         " (next chunk starts at " + std::to_string(chunk.offset()) +
                         "): a chunk is missing"));
  }
  if (chunk.offset() < expected) {
    return fail(DataLoss(where + ": offset " + std::to_string(chunk.offset()) +
                         " overlaps bytes already received (expected " + std::to_string(expected) +
                         "): chunks reordered or duplicated"));
  }
  if (data.size() > header_.payload_bytes() - expected) {
    return fail(OutOfRange(where + ": data runs past the declared payload of " +
                           std::to_string(header_.payload_bytes()) + " bytes"));
  }
  const uint32_t crc = crc32c(data);
  if (crc != chunk.crc32c()) {
    return fail(DataLoss(where + " at offset " + std::to_string(expected) +
                         ": CRC-32C mismatch (computed " + hex32(crc) + ", chunk says " +
                         hex32(chunk.crc32c()) + "): data corrupted in transit"));
  }
  payload_.append(data);
  digest_.update(data.data(), data.size());
  ++chunks_;
  return Status::Ok();
}

Status ChunkAssembler::finish() {
  if (!error_.ok()) return error_;
  if (finished_) return Status::Ok();
  if (!has_header_) return fail(InvalidArgument("tensor stream ended before any chunk arrived"));
  if (payload_.size() != header_.payload_bytes()) {
    return fail(DataLoss("tensor stream ended after " + std::to_string(payload_.size()) + " of " +
                         std::to_string(header_.payload_bytes()) + " bytes: chunks are missing"));
  }
  const std::string got = digest_.finish();
  if (got != header_.payload_xxh3()) {
    return fail(DataLoss("tensor stream payload XXH3-128 mismatch (computed " + hex(got) +
                         ", header says " + hex(header_.payload_xxh3()) + ", " +
                         std::to_string(payload_.size()) +
                         " bytes): the payload was corrupted before or in transit"));
  }
  finished_ = true;
  return Status::Ok();
}

std::string floats_to_bytes(std::span<const float> values) {
  std::string out(values.size() * sizeof(float), '\0');
  if constexpr (std::endian::native == std::endian::little) {
    if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  } else {
    for (size_t i = 0; i < values.size(); ++i) {
      uint32_t u = std::bit_cast<uint32_t>(values[i]);
      for (int b = 0; b < 4; ++b) out[4 * i + b] = static_cast<char>((u >> (8 * b)) & 0xFFu);
    }
  }
  return out;
}

StatusOr<std::vector<float>> bytes_to_floats(std::string_view bytes) {
  if (bytes.size() % sizeof(float) != 0) {
    return InvalidArgument("fp32 payload of " + std::to_string(bytes.size()) +
                           " bytes is not a multiple of 4");
  }
  std::vector<float> out(bytes.size() / sizeof(float));
  if constexpr (std::endian::native == std::endian::little) {
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  } else {
    for (size_t i = 0; i < out.size(); ++i) {
      uint32_t u = 0;
      for (int b = 0; b < 4; ++b) u |= uint32_t{static_cast<uint8_t>(bytes[4 * i + b])} << (8 * b);
      out[i] = std::bit_cast<float>(u);
    }
  }
  return out;
}

}  // namespace atl::transport
