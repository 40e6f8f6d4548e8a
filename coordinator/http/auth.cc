#include "coordinator/http/auth.h"

#include <openssl/rand.h>

#include <algorithm>
#include <cctype>
#include <chrono>

#include "kernels/core/sha256.h"

namespace atl::coordinator::http {

namespace {
constexpr std::string_view kPrefix = "atl_";
constexpr size_t kTokenBytes = 32;

bool plausible_token(std::string_view t) {
  if (t.size() != kPrefix.size() + 2 * kTokenBytes || t.substr(0, kPrefix.size()) != kPrefix)
    return false;
  for (char c : t.substr(kPrefix.size()))
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}
}  // namespace

const char* role_name(Role role) {
  return role == Role::kAdmin ? "admin" : "viewer";
}

StatusOr<Role> parse_role(std::string_view text) {
  if (text == "viewer") return Role::kViewer;
  if (text == "admin") return Role::kAdmin;
  return InvalidArgument("role must be \"viewer\" or \"admin\", not \"" + std::string(text) + "\"");
}

std::string hash_token(std::string_view token) {
  return sha256_hex(token.data(), token.size());
}

StatusOr<std::string> create_token(Store& store, Role role, const std::string& label) {
  if (label.size() > 200) return InvalidArgument("token label is longer than 200 characters");
  // A label is printed by `atoll token list` and the dashboard: no terminal escapes in it.
  for (const char c : label)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      return InvalidArgument("token label holds a control character; give printable text");
  unsigned char raw[kTokenBytes];
  if (RAND_bytes(raw, sizeof(raw)) != 1) return Internal("OpenSSL RAND_bytes failed");
  static const char* hex = "0123456789abcdef";
  std::string token(kPrefix);
  for (unsigned char b : raw) {
    token += hex[b >> 4];
    token += hex[b & 15];
  }
  TokenRecord rec;
  rec.hash = hash_token(token);
  rec.role = role_name(role);
  rec.label = label;
  rec.created_unix_ms =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  ATOLL_RETURN_IF_ERROR(store.put_token(rec));
  return token;
}

Status revoke_token(Store& store, const TokenRecord& token) {
  if (token.role == role_name(Role::kAdmin)) {
    ATOLL_ASSIGN_OR_RETURN(const std::vector<TokenRecord> tokens, store.list_tokens());
    int admins = 0;
    for (const auto& t : tokens) admins += t.role == role_name(Role::kAdmin) ? 1 : 0;
    if (admins <= 1)
      return FailedPrecondition("this is the last admin token; create another admin token first");
  }
  return store.delete_token(token.hash);
}

StatusOr<TokenRecord> find_token(const Store& store, std::string_view prefix) {
  if (prefix.size() < 8 || prefix.size() > 64)
    return InvalidArgument("a token hash prefix needs 8 to 64 hex digits");
  for (char c : prefix)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return InvalidArgument("a token hash prefix is lowercase hex digits");
  ATOLL_ASSIGN_OR_RETURN(std::vector<TokenRecord> tokens, store.list_tokens());
  const TokenRecord* match = nullptr;
  for (const auto& t : tokens) {
    if (t.hash.compare(0, prefix.size(), prefix) != 0) continue;
    if (match)
      return FailedPrecondition("hash prefix " + std::string(prefix) +
                                " matches several tokens; give more digits");
    match = &t;
  }
  if (!match) return NotFound("no token hash starts with " + std::string(prefix));
  return *match;
}

StatusOr<Role> authenticate(const Store& store, std::string_view authorization,
                            std::string* token_hash) {
  if (authorization.empty())
    return Unauthenticated(
        "missing token: send \"Authorization: Bearer <token>\" "
        "(create one with `atoll token create`)");
  constexpr std::string_view kBearer = "bearer ";
  const auto same_letter = [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) ==
           std::tolower(static_cast<unsigned char>(b));
  };
  if (authorization.size() <= kBearer.size() ||
      !std::equal(kBearer.begin(), kBearer.end(), authorization.begin(), same_letter))
    return Unauthenticated("the Authorization header must be \"Bearer <token>\"");
  const std::string_view token = authorization.substr(kBearer.size());
  if (!plausible_token(token)) return Unauthenticated("invalid token");
  const std::string hash = hash_token(token);
  if (token_hash) *token_hash = hash;
  auto rec = store.load_token(hash);
  if (!rec.ok()) {
    if (rec.status().code() == StatusCode::kNotFound) return Unauthenticated("invalid token");
    return rec.status();
  }
  auto role = parse_role(rec->role);
  if (!role.ok()) return Unauthenticated("invalid token (unknown role in the store)");
  return *role;
}

}  // namespace atl::coordinator::http
