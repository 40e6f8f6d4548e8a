// HOST:PORT as every address flag takes it (--listen, --bulk-listen, --http, --metrics,
// --coordinator): one parser, so that every flag accepts the same spellings and refuses a bad
// one with the same line.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/core/status.h"

namespace atl::transport {

struct HostPort {
  std::string host;  // as given, IPv6 without its brackets ("[::1]:7070" → "::1")
  uint16_t port = 0;
};

// Whether port 0 is a valid port: yes for an address to listen on (any free port), no for a
// server to connect to.
enum class PortZero { kAllowed, kRefused };

// `text` as HOST:PORT, or InvalidArgument in one line naming `flag`: no colon or an empty host
// ("expected HOST:PORT, e.g. <example>"), a port that is not a decimal number in 0-65535 (1-65535
// with PortZero::kRefused). The port is checked here because getaddrinfo takes any number and
// wraps it modulo 65536 (99999 would bind 34463).
StatusOr<HostPort> parse_host_port(const std::string& text, const std::string& flag,
                                   PortZero zero = PortZero::kAllowed,
                                   const std::string& example = "127.0.0.1:7070");

}  // namespace atl::transport
