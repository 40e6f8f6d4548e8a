// Dashboard/API tokens. A token is "atl_" + 64 hex digits (256 random bits); the store keeps
// only its SHA-256 and a role. Viewers read; admins also change (create, start, stop, ...).
#pragma once

#include <string>
#include <string_view>

#include "coordinator/store.h"
#include "kernels/core/status.h"

namespace atl::coordinator::http {

enum class Role { kViewer, kAdmin };

const char* role_name(Role role);  // "viewer", "admin"
StatusOr<Role> parse_role(std::string_view text);

// SHA-256 hex of the token text (the store key).
std::string hash_token(std::string_view token);

// Creates a token, stores its hash and role, and returns the token itself (shown once).
StatusOr<std::string> create_token(Store& store, Role role, const std::string& label);

// The token whose hash starts with `hash_prefix` (≥ 8 hex digits): INVALID_ARGUMENT for a short
// or non-hex prefix, NOT_FOUND when none matches, FAILED_PRECONDITION when several do.
StatusOr<TokenRecord> find_token(const Store& store, std::string_view hash_prefix);
// Deletes `token`, unless it is the last admin token: FailedPrecondition then (nobody could
// change anything, and a coordinator creates a bootstrap token only for a store without any).
// The API's DELETE /api/tokens and `atoll token revoke` both revoke through it.
Status revoke_token(Store& store, const TokenRecord& token);

// The role of the token in an "Authorization: Bearer <token>" header (the scheme's name in any
// case, as RFC 9110 §11.1 has it: "bearer" too). UNAUTHENTICATED when the header is missing,
// malformed or the token is unknown. `token_hash`, when given, receives the token's hash: a
// request that outlives its answer (an event stream) is ended when that token is revoked.
StatusOr<Role> authenticate(const Store& store, std::string_view authorization,
                            std::string* token_hash = nullptr);

}  // namespace atl::coordinator::http
