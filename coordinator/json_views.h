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

// One Hydra site's subnetwork (text form of algorithms::to_string, e.g. "F:1111:1111|T:0110:1001")
// for the dashboard grid: {"node_id", "subnet" (the text), "flops_fraction" (training FLOPs per
// token over the full model's, algorithms/hydra/cost.h), "layers": [{"trained", "heads" (kept
// head indices, ascending), "ffn_blocks_kept" (count of the config's hydra.ffn_blocks)}] (L)}.
// INVALID_ARGUMENT when the text does not fit the experiment's model.
StatusOr<boost::json::object> subnet_json(const std::string& node_id, const std::string& subnet,
                                          const ExperimentConfig& c);

}  // namespace atl::coordinator
