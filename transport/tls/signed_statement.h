// Statements signed with a participant's mTLS key and checked against the experiment CA, for
// what passes through the coordinator but must come from a node (docs/protocol.md, "Secure
// aggregation": the signed key advertisements). Keys are the CA's P-256 keys (ca.h): ECDSA
// with SHA-256, the signature DER-encoded.
#pragma once

#include <string>
#include <string_view>

#include "kernels/core/status.h"

namespace atl::transport {

// The signature of `message` by the private key `key_pem` (PEM, PKCS#8 or traditional).
StatusOr<std::string> sign_statement(const std::string& key_pem, std::string_view message);

// OK when `certificate_pem` was issued by the CA `ca_pem` for a node (OU "node", usable as a TLS
// client, inside its validity window), its common name is `node_id`, and `signature` is its
// key's signature of `message`. PermissionDenied otherwise, with one line saying which check
// failed.
Status verify_node_statement(const std::string& ca_pem, const std::string& certificate_pem,
                             const std::string& node_id, std::string_view message,
                             std::string_view signature);

}  // namespace atl::transport
