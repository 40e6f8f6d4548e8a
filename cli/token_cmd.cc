// `atoll token create --role viewer|admin --store DIR [--label TEXT]`, `atoll token list`,
// `atoll token revoke`: dashboard/API tokens, kept hashed (SHA-256) in the coordinator's store.
// The store is locked while a coordinator runs; then the coordinator's API manages tokens
// (POST /api/tokens, DELETE /api/tokens/{hash-prefix}, with an admin token).
#include <cinttypes>
#include <cstdio>

#include "cli/commands.h"
#include "cli/flags.h"
#include "coordinator/http/auth.h"
#include "coordinator/store.h"

namespace atl::cli {

namespace {

StatusOr<std::unique_ptr<coordinator::Store>> open_store(const Flags& flags) {
  auto dir = flags.get("store");
  if (!dir) return InvalidArgument("--store DIR is required (the coordinator's RocksDB directory)");
  // Never a new store: a typo in --store used to create an empty one and a token nobody's
  // coordinator reads.
  auto store = coordinator::Store::open(*dir, {.create_if_missing = false});
  if (!store.ok() && store.status().code() == StatusCode::kUnavailable) {
    // A running coordinator holds the store: point to its API, which manages tokens meanwhile.
    return Unavailable(
        "the store " + *dir +
        " is in use by a running coordinator; manage tokens through its API with an admin "
        "token: POST https://HOST:PORT/api/tokens with {\"role\": \"viewer\"} (or DELETE "
        "/api/tokens/HASH_PREFIX), see docs/dashboard.md, or stop the coordinator first");
  }
  return store;
}

}  // namespace

int cmd_token(const Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::printf(
        "usage: atoll token create --role viewer|admin --store DIR [--label TEXT]\n"
        "       atoll token list --store DIR\n"
        "       atoll token revoke --store DIR --hash PREFIX\n"
        "Viewers read the dashboard and the API; admins also create, start, pause,\n"
        "stop and delete experiments. Only the SHA-256 of a token is stored.\n");
    return args.empty() ? 2 : 0;
  }
  const std::string sub = args[0];
  const std::string cmd = "token " + sub;
  Args rest(args.begin() + 1, args.end());
  if (sub == "create") {
    Flags flags(cmd, {{"role", true, "viewer (read) or admin (read and change)", ""},
                      {"store", true, "the coordinator's store directory", ""},
                      {"label", true, "a note kept with the token (who it is for)", ""}});
    if (Status s = flags.parse(rest); !s.ok()) return fail(cmd, s.message(), 2);
    if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
    auto role_text = flags.get("role");
    if (!role_text) return fail(cmd, "--role viewer|admin is required", 2);
    auto role = coordinator::http::parse_role(*role_text);
    if (!role.ok()) return fail(cmd, "--role: " + role.status().message(), 2);
    auto store = open_store(flags);
    if (!store.ok())
      return fail(cmd, store.status().message(),
                  store.status().code() == StatusCode::kInvalidArgument ? 2 : 1);
    auto token = coordinator::http::create_token(**store, *role, flags.get_or("label", ""));
    if (!token.ok())
      return fail(cmd, token.status().message(),
                  token.status().code() == StatusCode::kInvalidArgument ? 2 : 1);
    std::printf("token: %s\n", token->c_str());
    std::fprintf(stderr, "%s token created; it is shown only once (the store keeps its hash)\n",
                 coordinator::http::role_name(*role));
    return 0;
  }
  if (sub == "list" || sub == "revoke") {
    Flags flags(cmd, {{"store", true, "the coordinator's store directory", ""},
                      {"hash", true, "revoke: the token's hash, or a unique prefix of it", ""}});
    if (Status s = flags.parse(rest); !s.ok()) return fail(cmd, s.message(), 2);
    if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
    auto store = open_store(flags);
    if (!store.ok())
      return fail(cmd, store.status().message(),
                  store.status().code() == StatusCode::kInvalidArgument ? 2 : 1);
    auto tokens = (*store)->list_tokens();
    if (!tokens.ok()) return fail(cmd, tokens.status().message());
    if (sub == "list") {
      for (const auto& t : *tokens)
        std::printf("%s  %-6s  %" PRIu64 "  %s\n", t.hash.c_str(), t.role.c_str(),
                    t.created_unix_ms, t.label.c_str());
      return 0;
    }
    const std::string prefix = flags.get_or("hash", "");
    auto found = coordinator::http::find_token(**store, prefix);
    if (!found.ok())
      return fail(cmd, "--hash: " + found.status().message() + " (see `atoll token list`)",
                  found.status().code() == StatusCode::kNotFound ? 1 : 2);
    const coordinator::TokenRecord* match = &*found;
    if (Status s = coordinator::http::revoke_token(**store, *match); !s.ok())
      return fail(cmd, s.message(), s.code() == StatusCode::kFailedPrecondition ? 2 : 1);
    std::printf("revoked %s token %s\n", match->role.c_str(), match->hash.c_str());
    return 0;
  }
  return fail("token", "unknown subcommand '" + sub + "' (create, list, revoke)", 2);
}

}  // namespace atl::cli
