// Experiment configs sent as JSON by the dashboard and the REST API. Either
//   {"config_toml": "<TOML text>"}
// or the TOML structure as JSON: {"name": "x", "seed": 1, "model": {"dim": 64, ...},
// "train": {...}, "diloco": {...}, "data": {...}}. Both go through parse_experiment_config, so
// the API validates exactly like `atoll coordinator --config` and reports the same one-line
// messages ("request: diloco.rounds = 0 must be >= 1"); check_config_json reports all of them.
#pragma once

#include <boost/json.hpp>
#include <string>

#include "coordinator/experiment_config.h"
#include "kernels/core/status.h"

namespace atl::coordinator::http {

// JSON object → TOML text (scalars, one level of tables, arrays of scalars). INVALID_ARGUMENT
// names the offending key for anything else.
StatusOr<std::string> json_to_toml(const boost::json::object& o);

StatusOr<ExperimentConfig> config_from_json(const boost::json::value& v);
// Every error of the config at once (check_experiment_config), for the create form; a body that
// is not a config (not an object, both forms, an unsupported value) is one error.
ConfigCheck check_config_json(const boost::json::value& v);

// The config key a validation message is about ("diloco.rounds"), or "" if none is named.
std::string field_of_message(const std::string& message);

}  // namespace atl::coordinator::http
