// The certificates the transport's TLS tests start from (tls_loopback_test, bulk_lane_test).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "transport/tls/ca.h"

namespace atl::transport::testing {

// `ca`: the experiment's CA with a coordinator "coord" (server), a node "node-1" and an admin
// "ops"; `other`: an unrelated CA with its own "node-1", the stranger every TLS test turns
// away. Fatal failures when a step fails (call under ASSERT_NO_FATAL_FAILURE).
inline void issue_test_cas(const std::string& ca, const std::string& other) {
  ASSERT_TRUE(ca_init(ca).ok());
  ASSERT_TRUE(ca_init(other).ok());
  ASSERT_TRUE(ca_issue(ca, "coord", Role::kServer).ok());
  ASSERT_TRUE(ca_issue(ca, "node-1", Role::kNode).ok());
  ASSERT_TRUE(ca_issue(ca, "ops", Role::kAdmin).ok());
  ASSERT_TRUE(ca_issue(other, "node-1", Role::kNode).ok());
}

}  // namespace atl::transport::testing
