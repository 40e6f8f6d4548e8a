// One TLS 1.3 handshake of our own with a server, to learn what gRPC does not say.
//
// When a gRPC server refuses a client's certificate it closes the connection without a TLS alert,
// and the client's gRPC reports "Socket closed": exactly what it reports when the connection is
// cut mid-handshake for any other reason (the server was killed or restarted, a proxy or a port
// scanner hung up). Only the first is a verdict worth stopping for. This probe tells them apart:
//
//   - the handshake fails before it completes (closed, reset, timed out): no verdict, kCut;
//   - it completes on our side (the server proved it holds a certificate from our CA, and received
//     ours), we send the HTTP/2 preface, and the server hangs up (or sends a certificate alert)
//     before answering a single byte: it refused our certificate, kClientCertificateRefused;
//   - the server answers HTTP/2: it accepts us now, kAccepted (whatever cut gRPC's attempt
//     was transient);
//   - our side refuses the server's certificate: kServerCertificateRefused, with OpenSSL's reason
//     ("certificate has expired", "unable to get local issuer certificate", ...).
//
// Blocking, bounded by `timeout`; meant for the rare failed Join, not for every call.
#pragma once

#include <chrono>
#include <string>

#include "transport/tls/credentials.h"

namespace atl::transport {

enum class ProbeOutcome {
  kAccepted,                  // the server answered HTTP/2 (or kept the connection open)
  kClientCertificateRefused,  // handshake done, then a certificate alert or a hang-up
  kServerCertificateRefused,  // this side refused the server's certificate
  kNotTls,                    // the server answered with something that is not TLS
  kCut,                       // closed, reset or timed out before the handshake completed
  kUnreachable,               // no TCP connection
};

struct ProbeResult {
  ProbeOutcome outcome = ProbeOutcome::kUnreachable;
  std::string detail;   // what happened, in a few words ("connection reset by peer", an alert)
  long x509_error = 0;  // kServerCertificateRefused: OpenSSL's X509_V_ERR_* verdict
};

// `target` is "HOST:PORT" (IPv6 as "[::1]:PORT"). The server certificate is checked against
// identity.ca_pem only (its name is not: gRPC reports a name mismatch clearly by itself).
ProbeResult probe_tls_handshake(const std::string& target, const ClientIdentity& identity,
                                std::chrono::milliseconds timeout);

}  // namespace atl::transport
