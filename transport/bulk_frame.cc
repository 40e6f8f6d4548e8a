#include "transport/bulk_frame.h"

#include <cstring>

namespace atl::transport {

namespace {

void put_u32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

}  // namespace

std::string bulk_frame(const char (&magic)[4], uint8_t kind, std::string_view body) {
  std::string out(kBulkFrameHeadBytes + body.size(), '\0');
  std::memcpy(out.data(), magic, 4);
  out[4] = static_cast<char>(kBulkLaneVersion);
  out[5] = static_cast<char>(kind);
  put_u32(out.data() + 8, static_cast<uint32_t>(body.size()));
  if (!body.empty()) std::memcpy(out.data() + kBulkFrameHeadBytes, body.data(), body.size());
  return out;
}

Status parse_bulk_frame_head(const char (&head)[kBulkFrameHeadBytes], const char (&magic)[4],
                             const std::string& what, uint8_t* kind, uint32_t* body_bytes) {
  if (std::memcmp(head, magic, 4) != 0)
    return InvalidArgument(what + ": not a bulk lane frame (it starts with other bytes than '" +
                           std::string(magic, 4) + "')");
  if (static_cast<uint8_t>(head[4]) != kBulkLaneVersion)
    return InvalidArgument(what + ": bulk lane version " +
                           std::to_string(static_cast<uint8_t>(head[4])) + " (this build speaks " +
                           std::to_string(kBulkLaneVersion) + "); run the same atoll version");
  if (head[6] != 0 || head[7] != 0)
    return InvalidArgument(what + ": the frame's reserved bytes are not zero");
  const uint32_t length = get_u32(head + 8);
  if (length > kMaxBulkMessageBytes)
    return OutOfRange(what + ": a frame of " + std::to_string(length) +
                      " bytes exceeds the limit of " + std::to_string(kMaxBulkMessageBytes));
  *kind = static_cast<uint8_t>(head[5]);
  *body_bytes = length;
  return Status::Ok();
}

StatusOr<BulkRequest> decode_bulk_request(uint8_t op, std::string_view body) {
  BulkRequest r;
  if (op == kBulkPull) {
    r.op = kBulkPull;
    if (!r.pull.ParseFromArray(body.data(), static_cast<int>(body.size())))
      return InvalidArgument("bulk lane: the pull request is not a PullParamsRequest");
    return r;
  }
  if (op == kBulkPush) {
    r.op = kBulkPush;
    if (!r.push.ParseFromArray(body.data(), static_cast<int>(body.size())))
      return InvalidArgument("bulk lane: the push request is not a TensorHeader");
    return r;
  }
  return InvalidArgument("bulk lane: unknown operation " + std::to_string(op));
}

}  // namespace atl::transport
