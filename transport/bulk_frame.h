// The bulk lane's frames (transport/bulk_lane.h has the whole wire; docs/protocol.md "The bulk
// lane"): a 12-byte head, then L bytes of body.
//   head: 4-byte magic ("ATLQ" a request, "ATLR" a reply), u8 version (kBulkLaneVersion), u8
//         kind (a request's operation, a reply's atl::StatusCode), two zero bytes, u32 L
//         (little-endian, at most kMaxBulkMessageBytes)
// Pure functions over bytes: the lane's sockets read and write what they make and check
// (transport/bulk_lane.cc), and a fuzz target feeds them anything (tests/fuzz/
// bulk_frame_fuzz.cc). Everything in a head or a request body is the network's: checked here
// before anything is allocated for it or done with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/core/status.h"
#include "transport/proto/atoll.pb.h"

namespace atl::transport {

inline constexpr uint8_t kBulkLaneVersion = 1;
inline constexpr uint32_t kMaxBulkMessageBytes = 64 << 10;
inline constexpr size_t kBulkFrameHeadBytes = 12;
inline constexpr char kBulkRequestMagic[4] = {'A', 'T', 'L', 'Q'};
inline constexpr char kBulkReplyMagic[4] = {'A', 'T', 'L', 'R'};

// A request's operation (the kind byte of an "ATLQ" frame).
enum BulkOp : uint8_t { kBulkPull = 1, kBulkPush = 2 };

// A whole frame: head and body (body.size() ≤ kMaxBulkMessageBytes: the callers' messages are).
std::string bulk_frame(const char (&magic)[4], uint8_t kind, std::string_view body);

// Checks a frame's head: magic, version, reserved bytes and L. Returns its kind and L, or
// InvalidArgument / OutOfRange naming what is wrong (prefixed with `what`).
Status parse_bulk_frame_head(const char (&head)[kBulkFrameHeadBytes], const char (&magic)[4],
                             const std::string& what, uint8_t* kind, uint32_t* body_bytes);

// A request's body, parsed for its operation: a PullParamsRequest (pull) or the TensorHeader of
// a push. InvalidArgument for an unknown operation or a body that does not parse.
struct BulkRequest {
  BulkOp op = kBulkPull;
  atoll_pb::v1::PullParamsRequest pull;
  atoll_pb::v1::TensorHeader push;
};
StatusOr<BulkRequest> decode_bulk_request(uint8_t op, std::string_view body);

}  // namespace atl::transport
