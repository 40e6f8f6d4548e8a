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

std::string describe_status_code(grpc::StatusCode code) {
  using G = grpc::StatusCode;
  switch (code) {
    case G::OK:
      return "OK";
    case G::CANCELLED:
      return "CANCELLED: the call was cancelled";
    case G::UNKNOWN:
      return "UNKNOWN: the server failed without saying why";
    case G::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT: the server refused the request";
    case G::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED: no answer before the deadline";
    case G::NOT_FOUND:
      return "NOT_FOUND: the server does not know what was asked for";
    case G::ALREADY_EXISTS:
      return "ALREADY_EXISTS: the server already holds it";
    case G::PERMISSION_DENIED:
      return "PERMISSION_DENIED: the server does not allow this caller";
    case G::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED: the server is out of a resource";
    case G::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION: the server is not in a state to answer";
    case G::ABORTED:
      return "ABORTED: the server abandoned the call";
    case G::OUT_OF_RANGE:
      return "OUT_OF_RANGE: the request goes past what the server holds";
    case G::UNIMPLEMENTED:
      return "UNIMPLEMENTED: the server does not serve this call";
    case G::INTERNAL:
      return "INTERNAL: the server failed";
    case G::UNAVAILABLE:
      return "UNAVAILABLE: the server cannot be reached";
    case G::DATA_LOSS:
      return "DATA_LOSS: the answer was corrupt";
    case G::UNAUTHENTICATED:
      return "UNAUTHENTICATED: the server did not accept this caller";
    default:
      return "gRPC status " + std::to_string(static_cast<int>(code));
  }
}

}  // namespace atl::transport
