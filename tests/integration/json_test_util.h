// JSON reading for the tests that parse a command's --json output.
#pragma once

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cmath>

namespace atl::testing {

// o[key] as a number; a missing or non-numeric key is a test failure (and NaN, which fails every
// comparison that follows).
inline double number(const boost::json::object& o, const char* key) {
  const auto* v = o.if_contains(key);
  if (v == nullptr || !v->is_number()) {
    ADD_FAILURE() << "missing numeric key '" << key << "' in " << boost::json::serialize(o);
    return std::nan("");
  }
  return v->to_number<double>();
}

}  // namespace atl::testing
