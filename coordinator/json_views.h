// JSON views of coordinator state for the REST API and its live event stream (field names are
// the OpenAPI schema's; see coordinator/http/openapi.cc).
#pragma once

#include <boost/json.hpp>

#include "coordinator/experiment_manager.h"

namespace atl::coordinator {

// A double as JSON: null when not finite (JSON has no NaN/inf).
boost::json::value json_number(double v);
boost::json::object to_json(const RoundRecord& r);
boost::json::object to_json(const ExperimentConfig& c);
boost::json::object to_json(const ExperimentSummary& s);
boost::json::object to_json(const NodeView& n);
boost::json::object to_json(const MetricSeries& m);

}  // namespace atl::coordinator
