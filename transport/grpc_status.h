// Status <-> grpc::Status, so a validation error on one side arrives on the other with the
// same code and message.
#pragma once

#include <grpcpp/support/status.h>

#include "kernels/core/status.h"

namespace atl::transport {

grpc::Status to_grpc(const Status& status);
// Messages pass through unchanged; gRPC-only codes map to the closest Atoll code
// (RESOURCE_EXHAUSTED -> kOutOfRange, CANCELLED -> kUnavailable, ABORTED -> kAborted,
// UNKNOWN/UNIMPLEMENTED -> kInternal).
Status from_grpc(const grpc::Status& status);

}  // namespace atl::transport
