#include "transport/grpc_status.h"

namespace atl::transport {

grpc::Status to_grpc(const Status& status) {
  using G = grpc::StatusCode;
  G code = G::UNKNOWN;
  switch (status.code()) {
    case StatusCode::kOk:
      return grpc::Status::OK;
    case StatusCode::kInvalidArgument:
      code = G::INVALID_ARGUMENT;
      break;
    case StatusCode::kNotFound:
      code = G::NOT_FOUND;
      break;
    case StatusCode::kAlreadyExists:
      code = G::ALREADY_EXISTS;
      break;
    case StatusCode::kFailedPrecondition:
      code = G::FAILED_PRECONDITION;
      break;
    case StatusCode::kOutOfRange:
      code = G::OUT_OF_RANGE;
      break;
    case StatusCode::kPermissionDenied:
      code = G::PERMISSION_DENIED;
      break;
    case StatusCode::kUnauthenticated:
      code = G::UNAUTHENTICATED;
      break;
    case StatusCode::kUnavailable:
      code = G::UNAVAILABLE;
      break;
    case StatusCode::kDeadlineExceeded:
      code = G::DEADLINE_EXCEEDED;
      break;
    case StatusCode::kDataLoss:
      code = G::DATA_LOSS;
      break;
    case StatusCode::kInternal:
    case StatusCode::kIoError:
      code = G::INTERNAL;
      break;
    case StatusCode::kAborted:
      code = G::ABORTED;
      break;
  }
  return grpc::Status(code, status.message());
}

Status from_grpc(const grpc::Status& status) {
  using G = grpc::StatusCode;
  StatusCode code = StatusCode::kInternal;
  switch (status.error_code()) {
    case G::OK:
      return Status::Ok();
    case G::INVALID_ARGUMENT:
      code = StatusCode::kInvalidArgument;
      break;
    case G::NOT_FOUND:
      code = StatusCode::kNotFound;
      break;
    case G::ALREADY_EXISTS:
      code = StatusCode::kAlreadyExists;
      break;
    case G::FAILED_PRECONDITION:
      code = StatusCode::kFailedPrecondition;
      break;
    case G::ABORTED:
      code = StatusCode::kAborted;
      break;
    case G::OUT_OF_RANGE:
    case G::RESOURCE_EXHAUSTED:
      code = StatusCode::kOutOfRange;
      break;
    case G::PERMISSION_DENIED:
      code = StatusCode::kPermissionDenied;
      break;
    case G::UNAUTHENTICATED:
      code = StatusCode::kUnauthenticated;
      break;
    case G::UNAVAILABLE:
    case G::CANCELLED:
      code = StatusCode::kUnavailable;
      break;
    case G::DEADLINE_EXCEEDED:
      code = StatusCode::kDeadlineExceeded;
      break;
    case G::DATA_LOSS:
      code = StatusCode::kDataLoss;
      break;
    default:
      code = StatusCode::kInternal;
      break;
  }
  return Status(code, status.error_message());
}

}  // namespace atl::transport
