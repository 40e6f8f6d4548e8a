// The OpenAPI 3.0 description of the REST API (api.h lists the same routes).
#include "coordinator/http/api.h"

namespace atl::coordinator::http {

const std::string& openapi_json() {
  static const std::string doc = R"JSON({
  "openapi": "3.0.3",
  "info": {
    "title": "Atoll coordinator API",
    "version": "1",
    "description": "Experiments, nodes, rounds, metrics and checkpoints of an Atoll coordinator. Every route except /api/health and /api/openapi.json needs 'Authorization: Bearer <token>' (atoll token create). Viewer tokens read; admin tokens also change. Errors are {\"error\": \"one line\", \"field\": \"config key (when known)\"}."
  },
  "servers": [{"url": "/"}],
  "components": {
    "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
    "parameters": {
      "id": {"name": "id", "in": "path", "required": true,
             "schema": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"}}
    },
    "responses": {
      "Error": {"description": "Error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Experiment": {"description": "The experiment", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Experiment"}}}}
    },
    "schemas": {
      "Error": {"type": "object", "required": ["error"],
                "properties": {"error": {"type": "string"}, "field": {"type": "string"},
                  "errors": {"type": "array", "description": "a refused config: every error at once, the first one included", "items": {"type": "object", "properties": {"error": {"type": "string"}, "field": {"type": "string"}}}}}},
      "Experiment": {"type": "object", "properties": {
        "id": {"type": "string"},
        "state": {"type": "string", "enum": ["created", "running", "paused", "finished", "failed"]},
        "live": {"type": "boolean", "description": "served by this coordinator's gRPC server"},
        "current_round": {"type": "integer"}, "rounds": {"type": "integer"},
        "params": {"type": "integer"}, "params_fingerprint": {"type": "string"},
        "created_unix_ms": {"type": "integer"}, "failure": {"type": "string"},
        "active_nodes": {"type": "integer"},
        "node_address": {"type": "string", "description": "HOST:PORT where nodes join the live experiment (atoll node --coordinator); empty when not known"},
        "config": {"type": "object", "description": "the parsed config, every key with its value (defaults included): name, seed, algorithm and the sections model, train, diloco, hydra, data, robust, privacy, secagg, lora, keyed as in config_toml"},
        "config_toml": {"type": "string"},
        "final_val_bpb": {"type": "number", "nullable": true, "description": "list only: the global validation bpb after the latest evaluated round; null until a committed round is evaluated"},
        "best_val_bpb": {"type": "number", "nullable": true, "description": "list only: the lowest global validation bpb after a committed round"},
        "started_unix_ms": {"type": "integer", "description": "list only: the first round's start; 0 before any round"},
        "duration_s": {"type": "number", "description": "list only: from the first round's start to the latest commit"}}},
      "CreateExperiment": {"type": "object",
        "description": "Either {config_toml} or the TOML structure as JSON (docs/configuration.md): name, seed, model{vocab,dim,layers,heads,ffn_hidden,seq_len}, train{batch_size,lr,codec,...}, diloco{rounds,inner_steps,min_nodes,max_nodes,...}, data{source,split,...}.",
        "properties": {"config_toml": {"type": "string"}, "name": {"type": "string"},
          "seed": {"type": "integer"}, "model": {"type": "object"}, "train": {"type": "object"},
          "diloco": {"type": "object"}, "data": {"type": "object"}}},
      "Node": {"type": "object", "properties": {
        "node_id": {"type": "string"}, "status": {"type": "string", "enum": ["active", "lost", "left", "revoked"]},
        "device": {"type": "string"}, "budget": {"type": "number", "description": "Hydra: the site's share of the full model's cost (1 = all of it)"},
        "ready": {"type": "boolean"},
        "round": {"type": "integer", "nullable": true, "description": "latest heartbeat's round while the experiment runs or is paused; null otherwise"},
        "inner_step": {"type": "integer", "nullable": true, "description": "latest heartbeat's inner step while the experiment runs or is paused; null otherwise"},
        "loss": {"type": "number", "nullable": true},
        "tokens_per_s": {"type": "number", "nullable": true}, "joined_unix_ms": {"type": "integer"},
        "last_seen_unix_ms": {"type": "integer"}, "rounds": {"type": "integer"},
        "tokens": {"type": "integer"}, "bytes_up": {"type": "integer"}, "bytes_down": {"type": "integer"}}},
      "Subnet": {"type": "object", "description": "One Hydra site's subnetwork (docs/hydra.md)", "properties": {
        "node_id": {"type": "string"},
        "subnet": {"type": "string", "description": "text form: per layer T (trained) or F (frozen), ':' kept heads as 0/1, ':' kept FFN blocks as 0/1; layers joined by '|'"},
        "flops_fraction": {"type": "number", "nullable": true, "description": "training FLOPs per token over the full model's"},
        "layers": {"type": "array", "items": {"type": "object", "properties": {
          "trained": {"type": "boolean"},
          "heads": {"type": "array", "items": {"type": "integer"}, "description": "kept head indices, ascending"},
          "ffn_blocks_kept": {"type": "integer"}}}}}},
      "Round": {"type": "object", "properties": {
        "round": {"type": "integer"},
        "participants": {"type": "array", "items": {"type": "object", "properties": {
          "node_id": {"type": "string"}, "pushed": {"type": "boolean"}, "tokens": {"type": "integer"},
          "loss": {"type": "number", "nullable": true}, "bytes_up": {"type": "integer"},
          "bytes_down": {"type": "integer"},
          "norm": {"type": "number", "nullable": true, "description": "L2 norm of the update as received"},
          "screen": {"type": "string", "enum": ["", "kept", "clipped", "dropped"], "description": "what screening did with the update (docs/coordinator.md); empty when the node did not push"},
          "screen_reason": {"type": "string", "enum": ["", "norm", "replay", "privacy", "nonfinite"], "description": "for clipped and dropped updates, the check that acted (docs/coordinator.md)"}}}},
        "tokens": {"type": "integer"}, "mean_loss": {"type": "number", "nullable": true},
        "bytes_up": {"type": "integer"}, "bytes_down": {"type": "integer"},
        "late_bytes_down": {"type": "object", "additionalProperties": {"type": "integer"}, "description": "per node: θ bytes of pulls that ended after their own round closed (a slow node), counted in the round open then; absent when none"},
        "duration_s": {"type": "number", "nullable": true}, "base_fingerprint": {"type": "string", "description": "SHA-256 of θ_r, the parameters the round started from (not a LoRA experiment's frozen base: that is lora.base_fingerprint)"},
        "params_fingerprint": {"type": "string"}, "committed_unix_ms": {"type": "integer"},
        "aggregator": {"type": "string", "enum": ["mean", "clipped-mean", "trimmed-mean", "median", "krum"]},
        "median_norm": {"type": "number", "nullable": true, "description": "lower median of the updates' norms"},
        "norm_limit": {"type": "number", "nullable": true, "description": "the screening limit; null when screening is off"},
        "skipped": {"type": "boolean", "description": "no update could be applied: θ and momentum unchanged"}}},
      "Token": {"type": "object", "properties": {
        "hash": {"type": "string", "description": "SHA-256 hex of the token"},
        "role": {"type": "string", "enum": ["viewer", "admin"]}, "label": {"type": "string"},
        "created_unix_ms": {"type": "integer"}}},
      "CreateToken": {"type": "object", "required": ["role"], "additionalProperties": false,
        "properties": {"role": {"type": "string", "enum": ["viewer", "admin"]},
                       "label": {"type": "string", "maxLength": 200}}},
      "Series": {"type": "array", "description": "[round, value] pairs; round = rounds completed",
                 "items": {"type": "array", "items": {"type": "number", "nullable": true}}},
      "Metrics": {"type": "object", "properties": {
        "total_rounds": {"type": "integer"},
        "bucket": {"type": "integer", "description": "rounds averaged into one point"},
        "global": {"type": "object", "description": "val_bpb, mean_loss, tokens, bytes, ddp_bytes, duration_s",
                   "additionalProperties": {"$ref": "#/components/schemas/Series"}},
        "per_node": {"type": "object", "description": "loss, tokens_per_s, bytes_up, site_val_bpb (nodes with validation data): node id -> series",
                     "additionalProperties": {"type": "object",
                       "additionalProperties": {"$ref": "#/components/schemas/Series"}}}}}
    }
  },
  "security": [{"bearer": []}],
  "paths": {
    "/api/health": {"get": {"summary": "Liveness", "security": [], "responses": {"200": {"description": "ok"}}}},
    "/api/openapi.json": {"get": {"summary": "This document", "security": [], "responses": {"200": {"description": "OpenAPI 3"}}}},
    "/api/whoami": {"get": {"summary": "Role of the token", "responses": {
      "200": {"description": "role", "content": {"application/json": {"schema": {"type": "object", "properties": {"role": {"type": "string", "enum": ["viewer", "admin"]}}}}}},
      "401": {"$ref": "#/components/responses/Error"}}}},
    "/metrics": {"get": {"summary": "Prometheus metrics of this coordinator, text exposition format 0.0.4 (viewer or admin token; docs/dashboard.md lists every metric)",
      "responses": {"200": {"description": "text/plain; version=0.0.4", "content": {"text/plain": {}}}, "401": {"$ref": "#/components/responses/Error"}}}},
    "/api/events": {"get": {"summary": "Live events of every experiment (server-sent events: state, node, round_started, round, metrics, eval, log, experiments)",
      "responses": {"200": {"description": "text/event-stream", "content": {"text/event-stream": {}}}, "401": {"$ref": "#/components/responses/Error"}}}},
    "/api/tokens": {
      "get": {"summary": "Tokens: hashes, roles, labels (admin)", "responses": {
        "200": {"description": "tokens", "content": {"application/json": {"schema": {"type": "object", "properties": {"tokens": {"type": "array", "items": {"$ref": "#/components/schemas/Token"}}}}}}},
        "401": {"$ref": "#/components/responses/Error"}, "403": {"$ref": "#/components/responses/Error"}}},
      "post": {"summary": "Create a token (admin); works while the coordinator runs, unlike `atoll token create`. The token is in this response only; the store keeps its hash",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CreateToken"}}}},
        "responses": {"201": {"description": "created", "content": {"application/json": {"schema": {"allOf": [{"$ref": "#/components/schemas/Token"}, {"type": "object", "properties": {"token": {"type": "string", "description": "atl_ + 64 hex digits, shown once"}}}]}}}},
          "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"},
          "403": {"$ref": "#/components/responses/Error"}, "413": {"$ref": "#/components/responses/Error"}}}},
    "/api/tokens/{hash_prefix}": {
      "parameters": [{"name": "hash_prefix", "in": "path", "required": true, "description": "the token's hash or a unique prefix of it (8 to 64 hex digits)",
                      "schema": {"type": "string", "pattern": "^[0-9a-f]{8,64}$"}}],
      "delete": {"summary": "Revoke a token (admin; not the last admin token)", "responses": {
        "200": {"description": "revoked", "content": {"application/json": {"schema": {"type": "object", "properties": {"revoked": {"type": "string"}, "role": {"type": "string"}}}}}},
        "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"},
        "403": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"},
        "409": {"$ref": "#/components/responses/Error"}}}},
    "/api/experiments": {
      "get": {"summary": "List experiments", "responses": {
        "200": {"description": "experiments", "content": {"application/json": {"schema": {"type": "object", "properties": {"experiments": {"type": "array", "items": {"$ref": "#/components/schemas/Experiment"}}}}}}},
        "401": {"$ref": "#/components/responses/Error"}}},
      "post": {"summary": "Create an experiment (admin); validated like a config file",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CreateExperiment"}}}},
        "responses": {"201": {"$ref": "#/components/responses/Experiment"},
          "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"},
          "403": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"},
          "413": {"$ref": "#/components/responses/Error"}}}},
    "/api/experiments/{id}": {
      "parameters": [{"$ref": "#/components/parameters/id"}],
      "get": {"summary": "One experiment", "responses": {"200": {"$ref": "#/components/responses/Experiment"}, "404": {"$ref": "#/components/responses/Error"}}},
      "delete": {"summary": "Delete an experiment and its data (admin; not the live one)", "responses": {"200": {"description": "deleted"}, "403": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"}}}},
    "/api/experiments/{id}/start": {"parameters": [{"$ref": "#/components/parameters/id"}],
      "post": {"summary": "Start (admin; the live experiment only)", "responses": {"200": {"$ref": "#/components/responses/Experiment"}, "403": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"}}}},
    "/api/experiments/{id}/pause": {"parameters": [{"$ref": "#/components/parameters/id"}],
      "post": {"summary": "Pause: no new round starts (admin)", "responses": {"200": {"$ref": "#/components/responses/Experiment"}, "403": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"}}}},
    "/api/experiments/{id}/resume": {"parameters": [{"$ref": "#/components/parameters/id"}],
      "post": {"summary": "Resume a paused experiment (admin)", "responses": {"200": {"$ref": "#/components/responses/Experiment"}, "403": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"}}}},
    "/api/experiments/{id}/stop": {"parameters": [{"$ref": "#/components/parameters/id"}],
      "post": {"summary": "Stop for good: state finished, nodes get STOP (admin)", "responses": {"200": {"$ref": "#/components/responses/Experiment"}, "403": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"}, "409": {"$ref": "#/components/responses/Error"}}}},
    "/api/experiments/{id}/nodes": {"parameters": [{"$ref": "#/components/parameters/id"}],
      "get": {"summary": "Nodes: status, last heartbeat, tokens/s, bytes", "responses": {"200": {"description": "nodes", "content": {"application/json": {"schema": {"type": "object", "properties": {"nodes": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}}}}}}}, "404": {"$ref": "#/components/responses/Error"}}}},
    "/api/experiments/{id}/subnets": {"parameters": [{"$ref": "#/components/parameters/id"}],
      "get": {"summary": "Hydra: each site's subnetwork of the latest selection (live experiment only; empty otherwise)", "responses": {"200": {"description": "subnetworks", "content": {"application/json": {"schema": {"type": "object", "properties": {"algorithm": {"type": "string", "enum": ["diloco", "hydra"]}, "live": {"type": "boolean"}, "layers": {"type": "integer"}, "heads": {"type": "integer"}, "ffn_blocks": {"type": "integer"}, "subnets": {"type": "array", "items": {"$ref": "#/components/schemas/Subnet"}}}}}}}, "404": {"$ref": "#/components/responses/Error"}}}},
    "/api/experiments/{id}/rounds": {"parameters": [{"$ref": "#/components/parameters/id"},
        {"name": "from", "in": "query", "schema": {"type": "integer", "minimum": 0}, "description": "first round (default: the last `limit` rounds)"},
        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 200}}],
      "get": {"summary": "Committed rounds", "responses": {"200": {"description": "rounds", "content": {"application/json": {"schema": {"type": "object", "properties": {"total": {"type": "integer"}, "from": {"type": "integer"}, "rounds": {"type": "array", "items": {"$ref": "#/components/schemas/Round"}}}}}}}, "400": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"}}}},
    "/api/experiments/{id}/metrics": {"parameters": [{"$ref": "#/components/parameters/id"},
        {"name": "max_points", "in": "query", "schema": {"type": "integer", "minimum": 2, "maximum": 5000, "default": 500}}],
      "get": {"summary": "Metric series per round, downsampled by averaging buckets", "responses": {"200": {"description": "series", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Metrics"}}}}, "400": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"}}}},
    "/api/experiments/{id}/checkpoint": {"parameters": [{"$ref": "#/components/parameters/id"}],
      "get": {"summary": "Safetensors checkpoint of the current parameters", "responses": {"200": {"description": "safetensors", "content": {"application/octet-stream": {}}}, "404": {"$ref": "#/components/responses/Error"}}}},
    "/api/experiments/{id}/events": {"parameters": [{"$ref": "#/components/parameters/id"}],
      "get": {"summary": "Live events of one experiment (server-sent events)", "responses": {"200": {"description": "text/event-stream", "content": {"text/event-stream": {}}}, "404": {"$ref": "#/components/responses/Error"}}}}
  }
})JSON";
  return doc;
}

}  // namespace atl::coordinator::http
