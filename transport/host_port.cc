#include "transport/host_port.h"

namespace atl::transport {

StatusOr<HostPort> parse_host_port(const std::string& text, const std::string& flag, PortZero zero,
                                   const std::string& example) {
  if (text.empty()) return InvalidArgument(flag + " is empty: expected HOST:PORT, e.g. " + example);
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos)
    return InvalidArgument(flag + " " + text + ": expected HOST:PORT, e.g. " + example);
  // The port first: in "127.0.0.1:abc" or ":-1" it is the port that is wrong.
  const std::string port = text.substr(colon + 1);
  const unsigned long min_port = zero == PortZero::kAllowed ? 0 : 1;
  const bool digits = !port.empty() && port.size() <= 5 &&
                      port.find_first_not_of("0123456789") == std::string::npos;
  const unsigned long value = digits ? std::stoul(port) : 0;
  if (!digits || value > 65535 || value < min_port)
    return InvalidArgument(flag + " " + text + ": the port must be a number in " +
                           std::to_string(min_port) + "-65535");
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host.empty())
    return InvalidArgument(flag + " " + text + ": the host is missing: expected HOST:PORT, e.g. " +
                           example + " (0.0.0.0:PORT for every address)");
  return HostPort{host, static_cast<uint16_t>(value)};
}

}  // namespace atl::transport
