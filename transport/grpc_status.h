// Status <-> grpc::Status, so a validation error on one side arrives on the other with the
// same code and message.
#pragma once

#include <grpcpp/support/status.h>

#include <string>

#include "kernels/core/status.h"

namespace atl::transport {

grpc::Status to_grpc(const Status& status);
// Messages pass through unchanged; gRPC-only codes map to the closest Atoll code
// (RESOURCE_EXHAUSTED -> kOutOfRange, CANCELLED -> kUnavailable, ABORTED -> kAborted,
// UNKNOWN/UNIMPLEMENTED -> kInternal).
Status from_grpc(const grpc::Status& status);

// What a status code says when its message is empty (gRPC's own answers often are: a method
// the server does not serve is UNIMPLEMENTED with no text), e.g. "UNIMPLEMENTED: the server does
// not serve this call".
std::string describe_status_code(grpc::StatusCode code);

}  // namespace atl::transport
