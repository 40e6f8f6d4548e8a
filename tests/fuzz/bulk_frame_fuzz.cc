// libFuzzer target for the bulk lane's frames (transport/bulk_frame.h), as the lane's server
// reads a request and its client a reply: any bytes must end in a Status, never a crash, a body
// longer than the limit, or a push header whose payload is allowed past the receiver's limit.
// Input: 1 byte choosing the side (even: a request to the server, odd: a reply to a client),
// then a 12-byte frame head and the body it announces.
// Build and run: tests/fuzz/run.sh (needs the generated protobuf code: FUZZ_PROTO_GEN).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "transport/bulk_frame.h"
#include "transport/tensor_stream.h"

namespace tr = atl::transport;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 + tr::kBulkFrameHeadBytes) return 0;
  const bool request = (data[0] & 1) == 0;
  char head[tr::kBulkFrameHeadBytes];
  std::memcpy(head, data + 1, sizeof(head));
  uint8_t kind = 0;
  uint32_t body_bytes = 0;
  const atl::Status st = tr::parse_bulk_frame_head(
      head, request ? tr::kBulkRequestMagic : tr::kBulkReplyMagic, "fuzz", &kind, &body_bytes);
  if (!st.ok()) return 0;
  if (body_bytes > tr::kMaxBulkMessageBytes) std::abort();
  const size_t at = 1 + tr::kBulkFrameHeadBytes;
  if (size - at < body_bytes) return 0;  // the connection would end before the body
  const std::string_view body(reinterpret_cast<const char*>(data + at), body_bytes);
  constexpr uint64_t kLimit = 1 << 20;  // the receiver's limit on a payload
  atoll_pb::v1::TensorHeader header;
  if (request) {
    auto r = tr::decode_bulk_request(kind, body);
    if (!r.ok()) return 0;
    if (r->op != tr::kBulkPull && r->op != tr::kBulkPush) std::abort();
    if (r->op == tr::kBulkPull) return 0;
    header = r->push;  // the server screens a push's header as below
  } else {
    // A client reads an OK reply to a pull as the θ's header.
    if (kind != 0 || !header.ParseFromArray(body.data(), static_cast<int>(body.size()))) return 0;
  }
  if (tr::check_stream_header(header, kLimit, "fuzz", /*digest_in_header=*/false).ok() &&
      header.payload_bytes() > kLimit)
    std::abort();
  // What the lane sends back is a frame its reader accepts, whatever the body was.
  const std::string again = tr::bulk_frame(tr::kBulkReplyMagic, kind, body);
  char again_head[tr::kBulkFrameHeadBytes];
  std::memcpy(again_head, again.data(), sizeof(again_head));
  uint8_t again_kind = 0;
  uint32_t again_bytes = 0;
  if (!tr::parse_bulk_frame_head(again_head, tr::kBulkReplyMagic, "fuzz", &again_kind, &again_bytes)
           .ok() ||
      again_kind != kind || again_bytes != body_bytes ||
      std::string_view(again).substr(tr::kBulkFrameHeadBytes) != body)
    std::abort();
  return 0;
}
