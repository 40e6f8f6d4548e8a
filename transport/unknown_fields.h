// Fields a received message carries that this build's schema does not know: what a newer peer
// added. A node that trained on without them would silently do something else than the
// experiment asks (the way a node built before TrainSpec.optimizer trained AdamW in a Muon
// experiment), so settings messages with unknown fields are refused in one line.
#pragma once

#include <google/protobuf/message.h>

#include <string>
#include <string_view>

#include "kernels/core/status.h"

namespace atl::transport {

// The unknown fields of `m` and of every message inside it, as paths of field names ending in
// the unknown field's number ("train.22", "model.23, 30"), and enum fields holding a value their
// enum does not list ("kind = 9"). At most 8 are listed ("..." after them); "" when there are
// none.
std::string unknown_field_paths(const google::protobuf::Message& m);

// OK when `m` has no unknown fields; otherwise FailedPrecondition naming them: "<what> carries
// settings this atoll does not know (field train.22): <sender> runs a newer atoll; install the
// same version here". `sender`: "the coordinator", "teacher 10.0.0.2:7000".
Status refuse_unknown_fields(const google::protobuf::Message& m, std::string_view what,
                             std::string_view sender);

}  // namespace atl::transport
