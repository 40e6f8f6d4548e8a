// CoordinatorService: the gRPC handlers. Each validates everything it receives (sizes, ids,
// rounds, shapes, fingerprints, finiteness) before touching state; the round state machine is
// in service_rounds.cc.
#include "coordinator/service.h"

#include <grpcpp/server_context.h>

#include <algorithm>
#include <boost/json.hpp>
#include <chrono>
#include <cmath>
#include <string_view>

#include "algorithms/compress/codec.h"
#include "algorithms/compress/exact_delta.h"
#include "algorithms/compress/sparse_delta.h"
#include "transport/grpc_status.h"
#include "transport/tensor_stream.h"
#include "transport/tls/credentials.h"

namespace atl::coordinator {
namespace pb = atoll_pb::v1;
using transport::to_grpc;

namespace {

constexpr char kNodeMetadata[] = "atoll-node";
constexpr size_t kMaxMetrics = 256;
constexpr size_t kMaxMetricName = 128;

std::string short_fp(const std::string& fp) {
  return fp.substr(0, 12);
}

}  // namespace

StatusOr<std::string> CoordinatorService::caller(const grpc::ServerContext& ctx,
                                                 const std::string* join_name) const {
  std::string name;
  if (options_.identity == IdentitySource::kTlsCertificate) {
    ATOLL_ASSIGN_OR_RETURN(transport::PeerIdentity id, transport::peer_identity(ctx));
    if (id.role != "node")
      return PermissionDenied("certificate '" + id.name + "' has role '" + id.role +
                              "'; nodes need a certificate issued with --role node");
    name = id.name;
  } else if (join_name) {
    name = *join_name;
  } else {
    const auto& md = ctx.client_metadata();
    auto it = md.find(kNodeMetadata);
    if (it == md.end())
      return Unauthenticated("call carries no node identity (insecure mode: set the '" +
                             std::string(kNodeMetadata) + "' metadata to the joined node name)");
    name.assign(it->second.data(), it->second.size());
  }
  if (!valid_id(name))
    return InvalidArgument("node name '" + name.substr(0, 80) +
                           "' must be 1-64 characters of [A-Za-z0-9._-]");
  return name;
}

Status CoordinatorService::check_experiment(const std::string& experiment_id) const {
  if (experiment_id.empty() || experiment_id == experiment_id_) return Status::Ok();
  return NotFound("unknown experiment '" + experiment_id.substr(0, 80) +
                  "'; this coordinator runs '" + experiment_id_ + "'");
}

StatusOr<std::string> CoordinatorService::member_locked(const grpc::ServerContext& ctx,
                                                        const std::string& experiment_id) {
  if (stopping_) return Unavailable("coordinator is shutting down; reconnect later");
  ATOLL_RETURN_IF_ERROR(check_experiment(experiment_id));
  ATOLL_ASSIGN_OR_RETURN(std::string id, caller(ctx, nullptr));
  auto it = nodes_.find(id);
  if (it == nodes_.end() || it->second.status != NodeStatus::kActive)
    return NotFound("node '" + id + "' is not an active member of experiment '" + experiment_id_ +
                    "' (never joined, lost or left); Join again");
  it->second.last_seen = Clock::now();
  return id;
}

grpc::Status CoordinatorService::Join(grpc::ServerContext* ctx, const pb::JoinRequest* req,
                                      pb::JoinResponse* resp) {
  auto id_or = caller(*ctx, &req->node_name());
  if (!id_or.ok()) return to_grpc(id_or.status());
  const std::string id = *id_or;
  const double budget = req->budget() == 0 ? 1.0 : req->budget();
  if (!(budget > 0 && budget <= 1))
    return to_grpc(
        InvalidArgument("budget " + std::to_string(req->budget()) + " must be in (0, 1]"));
  if (req->capabilities().device().size() > 64)
    return to_grpc(InvalidArgument("capabilities.device is longer than 64 characters"));

  std::lock_guard<std::mutex> lk(mu_);
  if (stopping_) return to_grpc(Unavailable("coordinator is shutting down; reconnect later"));
  size_t active = 0;
  for (const auto& [nid, n] : nodes_) active += (n.status == NodeStatus::kActive && nid != id);
  if (active >= config_.diloco.max_nodes)
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "experiment '" + experiment_id_ + "' already has diloco.max_nodes = " +
                            std::to_string(config_.diloco.max_nodes) + " nodes");
  const auto now = Clock::now();
  NodeState& n = nodes_[id];
  const bool rejoin = !n.record.node_id.empty();
  n.status = NodeStatus::kActive;
  n.last_seen = now;
  n.record.node_id = id;
  n.record.state = "active";
  n.record.device = req->capabilities().device();
  n.record.threads = req->capabilities().threads();
  n.record.budget = budget;
  n.record.joined_unix_ms =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  n.record.last_seen_unix_ms = n.record.joined_unix_ms;
  if (Status st = store_.put_node(experiment_id_, n.record); !st.ok()) return to_grpc(st);
  audit(rejoin ? "node_rejoined" : "node_joined", id + " device " + n.record.device);
  Event e{Event::Kind::kNodeJoined};
  e.round = experiment_.current_round;
  e.node_id = id;
  e.message = rejoin ? "rejoined" : "joined";
  emit_locked(std::move(e));

  resp->set_node_id(id);
  resp->set_experiment_id(experiment_id_);
  pb::ModelSpec* m = resp->mutable_model();
  const ModelSection& mc = config_.model;
  m->set_vocab(mc.vocab);
  m->set_dim(mc.dim);
  m->set_layers(mc.layers);
  m->set_heads(mc.heads);
  m->set_ffn_hidden(mc.ffn_hidden);
  m->set_seq_len(mc.seq_len);
  m->set_rope_base(mc.rope_base);
  m->set_norm_eps(mc.norm_eps);
  m->set_moe_experts(mc.moe_experts);
  m->set_moe_top_k(mc.moe_top_k);
  m->set_moe_hidden(mc.moe_hidden);
  m->set_moe_every(mc.moe_every);
  m->set_moe_score(mc.moe_score);
  m->set_moe_shared_hidden(mc.moe_shared_hidden);
  m->set_moe_aux_coef(mc.moe_aux_coef);
  m->set_moe_z_coef(mc.moe_z_coef);
  pb::TrainSpec* t = resp->mutable_train();
  const TrainSection& tc = config_.train;
  t->set_batch_size(tc.batch_size);
  t->set_lr(tc.lr);
  t->set_min_lr(tc.min_lr);
  t->set_warmup_steps(tc.warmup_steps);
  t->set_total_inner_steps(static_cast<uint64_t>(config_.diloco.rounds) *
                           config_.diloco.steps_per_round());
  t->set_weight_decay(tc.weight_decay);
  t->set_beta1(tc.beta1);
  t->set_beta2(tc.beta2);
  t->set_grad_clip(tc.grad_clip);
  t->set_seed(config_.seed);
  t->set_codec(tc.codec);
  t->set_error_feedback(tc.error_feedback);
  if (config_.is_hydra()) {
    t->set_algorithm("hydra");
    t->set_ffn_blocks(config_.hydra.ffn_blocks);
  }
  t->set_precision(tc.precision);
  if (config_.diloco.streaming()) {
    t->set_streaming_fragments(config_.diloco.streaming_fragments);
    t->set_overlap_steps(config_.diloco.overlap_steps);
    t->set_merge_alpha(config_.diloco.merge_alpha);
  }
  resp->set_heartbeat_interval_ms(
      static_cast<uint32_t>(std::lround(config_.diloco.heartbeat_interval_s * 1000.0)));
  resp->set_node_index(static_cast<uint32_t>(std::distance(nodes_.begin(), nodes_.find(id))));
  cv_.notify_all();
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Heartbeat(grpc::ServerContext* ctx,
                                           const pb::HeartbeatRequest* req,
                                           pb::HeartbeatResponse* resp) {
  std::lock_guard<std::mutex> lk(mu_);
  auto id = member_locked(*ctx, req->experiment_id());
  if (!id.ok()) {
    if (id.status().code() != StatusCode::kNotFound || !check_experiment(req->experiment_id()).ok())
      return to_grpc(id.status());
    resp->set_known(false);  // not a member: the node should Join again
    return grpc::Status::OK;
  }
  NodeState& n = nodes_[*id];
  n.progress = *req;
  n.record.last_seen_unix_ms =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  resp->set_known(true);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::NextTask(grpc::ServerContext* ctx, const pb::NextTaskRequest* req,
                                          pb::Task* task) {
  std::unique_lock<std::mutex> lk(mu_);
  auto id_or = member_locked(*ctx, req->experiment_id());
  if (!id_or.ok()) return to_grpc(id_or.status());
  const std::string id = *id_or;
  const auto now = Clock::now();
  auto deadline = now + std::chrono::milliseconds(std::min(req->wait_ms(), options_.max_wait_ms));
  // Never past the node's own RPC deadline (system clock), so the answer still reaches it.
  const auto call_deadline = ctx->deadline();
  if (call_deadline != std::chrono::system_clock::time_point::max()) {
    const auto left = call_deadline - std::chrono::system_clock::now();
    deadline = std::min(deadline, now + std::chrono::duration_cast<Clock::duration>(left) -
                                      std::chrono::milliseconds(50));
  }
  NodeState& n = nodes_[id];
  ++n.polling;
  const bool assigned_open = is_participant_locked(id) && !round_.updates.count(id);
  if (!assigned_open) n.ready = true;
  maybe_start_round_locked(now);

  grpc::Status result = grpc::Status::OK;
  task->set_kind(pb::Task::WAIT);
  for (;;) {
    if (stopping_) {
      result = to_grpc(Unavailable("coordinator is shutting down; reconnect later"));
      break;
    }
    const ExperimentState s = experiment_.state;
    if (s == ExperimentState::kFinished || s == ExperimentState::kFailed) {
      task->set_kind(pb::Task::STOP);
      task->set_round(experiment_.current_round);
      task->set_reason(s == ExperimentState::kFinished
                           ? "experiment finished after " +
                                 std::to_string(experiment_.current_round) + " rounds"
                           : "experiment failed: " + experiment_.failure);
      break;
    }
    if (n.status != NodeStatus::kActive) {
      task->set_kind(pb::Task::STOP);
      task->set_reason("node is no longer a member; Join again");
      break;
    }
    if (round_.scoring && is_participant_locked(id) && !round_.scores.count(id)) {
      // Hydra: measure importance on θ_r first (re-sent if the node polls again without it).
      task->set_kind(pb::Task::SCORE);
      task->set_round(round_.round);
      task->set_params_fingerprint(experiment_.params_fingerprint);
      task->set_deadline_unix_ms(round_.deadline_unix_ms);
      task->set_importance_batches(config_.hydra.importance_batches);
      n.ready = false;
      break;
    }
    if (!round_.scoring && is_participant_locked(id) && !round_.updates.count(id) &&
        !round_.receiving.count(id)) {
      task->set_kind(pb::Task::TRAIN);
      if (config_.is_hydra()) {
        const HydraMask& m = hydra_masks_.at(id);  // every TRAIN participant has one
        task->set_subnet(m.subnet);
        task->set_mask_fingerprint(m.fingerprint);
      }
      task->set_round(round_.round);
      task->set_inner_steps(config_.diloco.steps_per_round());
      task->set_params_fingerprint(experiment_.params_fingerprint);
      task->set_deadline_unix_ms(round_.deadline_unix_ms);
      task->set_global_step(round_.round * config_.diloco.steps_per_round());
      if (!fragments_.empty()) {
        const algorithms::FragmentRange f = fragment_of_locked(round_.round);
        task->set_fragment(
            algorithms::fragment_of_round(round_.round, config_.diloco.streaming_fragments));
        task->set_fragment_offset(f.offset);
        task->set_fragment_numel(f.numel);
      }
      n.ready = false;
      break;
    }
    if (ctx->IsCancelled() || cv_.wait_until(lk, deadline) == std::cv_status::timeout) {
      task->set_kind(pb::Task::WAIT);
      task->set_round(experiment_.current_round);
      task->set_reason(s == ExperimentState::kPaused    ? "experiment paused"
                       : s == ExperimentState::kCreated ? "experiment not started yet"
                       : round_.open
                           ? "round " + std::to_string(round_.round) + " in progress"
                           : "waiting for diloco.min_nodes = " +
                                 std::to_string(config_.diloco.min_nodes) + " ready nodes");
      break;
    }
  }
  --n.polling;
  n.last_seen = Clock::now();
  return result;
}

StatusOr<std::shared_ptr<const CoordinatorService::PullPayload>>
CoordinatorService::delta_payload(uint64_t base_round, uint64_t round,
                                  const std::shared_ptr<const std::vector<float>>& theta) {
  {
    std::lock_guard<std::mutex> lk(pull_mu_);
    auto it = pull_cache_.find({base_round, round});
    if (it != pull_cache_.end()) return it->second;
  }
  namespace cx = algorithms::compress;
  ATOLL_ASSIGN_OR_RETURN(std::vector<float> base, store_.load_params(experiment_id_, base_round));
  if (base.size() != theta->size())
    return DataLoss("θ of round " + std::to_string(base_round) + " in the store has " +
                    std::to_string(base.size()) + " values, θ has " +
                    std::to_string(theta->size()));
  // Candidates by actual message size; the full θ is numel·4 bytes.
  const uint64_t full = theta->size() * sizeof(float);
  const cx::exact_delta::Plan exact = cx::exact_delta::plan(*theta, base);
  uint64_t lossy = UINT64_MAX;
  if (config_.diloco.pull_codec == "sparse-delta")
    lossy = cx::sparse_delta::message_bytes(theta->size(),
                                            cx::sparse_delta::count_changed(*theta, base));
  std::shared_ptr<PullPayload> out;
  if (exact.bytes < full && exact.bytes <= lossy) {
    ATOLL_ASSIGN_OR_RETURN(auto bytes, cx::exact_delta::encode(*theta, base));
    out = std::make_shared<PullPayload>(
        PullPayload{cx::exact_delta::kName, std::string(bytes.begin(), bytes.end())});
  } else if (lossy < full) {
    ATOLL_ASSIGN_OR_RETURN(auto bytes, cx::sparse_delta::encode(*theta, base));
    out = std::make_shared<PullPayload>(
        PullPayload{"sparse-delta", std::string(bytes.begin(), bytes.end())});
  }
  std::lock_guard<std::mutex> lk(pull_mu_);
  // Only deltas to the current θ are asked for again: drop those to older rounds.
  for (auto it = pull_cache_.begin(); it != pull_cache_.end();)
    it = it->first.second < round ? pull_cache_.erase(it) : std::next(it);
  pull_cache_[{base_round, round}] = out;
  return std::shared_ptr<const PullPayload>(out);
}

StatusOr<std::shared_ptr<const CoordinatorService::PullPayload>> CoordinatorService::bf16_payload(
    uint64_t round, const std::shared_ptr<const std::vector<float>>& theta) {
  {
    std::lock_guard<std::mutex> lk(pull_mu_);
    auto it = pull_cache_.find({round, round});
    if (it != pull_cache_.end()) return it->second;
  }
  ATOLL_ASSIGN_OR_RETURN(auto codec, algorithms::compress::Codec::create("bf16"));
  ATOLL_ASSIGN_OR_RETURN(auto bytes, codec.encode(*theta));
  auto out =
      std::make_shared<PullPayload>(PullPayload{"bf16", std::string(bytes.begin(), bytes.end())});
  std::lock_guard<std::mutex> lk(pull_mu_);
  for (auto it = pull_cache_.begin(); it != pull_cache_.end();)
    it = it->first.second < round ? pull_cache_.erase(it) : std::next(it);
  pull_cache_[{round, round}] = out;
  return std::shared_ptr<const PullPayload>(out);
}

grpc::Status CoordinatorService::PullParams(grpc::ServerContext* ctx,
                                            const pb::PullParamsRequest* req,
                                            grpc::ServerWriter<pb::TensorChunk>* writer) {
  std::shared_ptr<const std::vector<float>> theta;
  pb::TensorHeader header;
  std::string id;
  std::optional<uint64_t> base_round;  // a θ version the node holds and the store still has
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto id_or = member_locked(*ctx, req->experiment_id());
    if (!id_or.ok()) return to_grpc(id_or.status());
    id = *id_or;
    if (req->round() != experiment_.current_round)
      return to_grpc(FailedPrecondition("stale round: θ of round " + std::to_string(req->round()) +
                                        " requested, the current round is " +
                                        std::to_string(experiment_.current_round)));
    theta = theta_;  // immutable snapshot: streamed without the lock
    header.set_experiment_id(experiment_id_);
    header.set_round(experiment_.current_round);
    header.set_codec("none");
    header.set_numel(theta->size());
    header.set_layout_fingerprint(experiment_.layout_fingerprint);
    header.set_params_fingerprint(experiment_.params_fingerprint);
    const std::string& have = req->have_fingerprint();
    if (config_.diloco.pull_codec != "full" && !have.empty() &&
        have != experiment_.params_fingerprint) {
      auto v = versions_.find(have);
      if (v != versions_.end() && v->second < experiment_.current_round) base_round = v->second;
    }
  }
  std::string_view payload(reinterpret_cast<const char*>(theta->data()),
                           theta->size() * sizeof(float));
  std::shared_ptr<const PullPayload> delta;
  if (config_.diloco.pull_codec == "bf16") {
    auto d = bf16_payload(header.round(), theta);
    if (!d.ok()) return to_grpc(d.status());
    delta = *d;
    payload = delta->bytes;
    header.set_codec(delta->codec);
  } else if (base_round) {
    // A base the store has since dropped (or cannot read) just means the full θ.
    auto d = delta_payload(*base_round, header.round(), theta);
    if (d.ok() && *d) {
      delta = *d;
      payload = delta->bytes;
      header.set_codec(delta->codec);
      header.set_base_fingerprint(req->have_fingerprint());
    }
  }
  Status st = transport::for_each_chunk(header, payload, [&](const pb::TensorChunk& c) -> Status {
    if (ctx->IsCancelled()) return Unavailable("PullParams cancelled by the node");
    if (!writer->Write(c)) return Unavailable("node '" + id + "' went away during PullParams");
    return Status::Ok();
  });
  if (!st.ok()) return to_grpc(st);
  std::lock_guard<std::mutex> lk(mu_);
  if (round_.open && round_.round == header.round() && is_participant_locked(id))
    round_.bytes_down[id] += payload.size();
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::PushUpdate(grpc::ServerContext* ctx,
                                            grpc::ServerReader<pb::TensorChunk>* reader,
                                            pb::PushUpdateResponse* resp) {
  pb::TensorChunk first;
  if (!reader->Read(&first))
    return to_grpc(
        InvalidArgument("PushUpdate: empty stream (the first chunk carries the header)"));
  if (!first.has_header())
    return to_grpc(InvalidArgument("PushUpdate: the first chunk has no header"));
  const pb::TensorHeader& h = first.header();

  std::string id;
  uint64_t numel = 0;
  Status header_status;
  // Rejections are recorded (audit + event) and leave θ untouched.
  auto reject = [&](const Status& st, bool was_receiving) -> grpc::Status {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (was_receiving) round_.receiving.erase(id);
      audit("update_rejected", id + " round " + std::to_string(h.round()) + ": " + st.to_string());
      Event e{Event::Kind::kUpdateRejected};
      e.round = h.round();
      e.node_id = id;
      e.message = st.to_string();
      emit_locked(std::move(e));
      if (was_receiving) maybe_close_round_locked(Clock::now());
    }
    return to_grpc(st);
  };

  {
    std::lock_guard<std::mutex> lk(mu_);
    auto id_or = member_locked(*ctx, h.experiment_id());
    if (!id_or.ok()) return to_grpc(id_or.status());
    id = *id_or;
    numel = theta_->size();
    // Streaming DiLoCo: the update covers the round's fragment only.
    const algorithms::FragmentRange frag = fragment_of_locked(round_.round);
    Status st;
    const bool in_round = round_.open && h.round() == round_.round && is_participant_locked(id);
    if (h.wire_version() != transport::kWireVersion) {
      st = InvalidArgument("unsupported wire_version " + std::to_string(h.wire_version()));
    } else if (in_round && round_.updates.count(id)) {
      st = AlreadyExists("replay: an update from '" + id + "' for round " +
                         std::to_string(h.round()) + " was already accepted");
    } else if (in_round && round_.receiving.count(id)) {
      st = AlreadyExists("an update from '" + id + "' for round " + std::to_string(h.round()) +
                         " is already being received");
    } else if (!in_round) {
      st = FailedPrecondition(
          "stale round: update for round " + std::to_string(h.round()) + ", but " +
          (round_.open ? "round " + std::to_string(round_.round) + " is open" +
                             (is_participant_locked(id) ? "" : " without '" + id + "'")
                       : "no round is open (current round " +
                             std::to_string(experiment_.current_round) + ")"));
    } else if (!fragments_.empty() &&
               (h.fragment_offset() != frag.offset || h.numel() != frag.numel)) {
      st = InvalidArgument("wrong shape: update covers elements [" +
                           std::to_string(h.fragment_offset()) + ", +" + std::to_string(h.numel()) +
                           "), round " + std::to_string(round_.round) + " syncs fragment [" +
                           std::to_string(frag.offset) + ", +" + std::to_string(frag.numel) + ")");
    } else if (config_.is_hydra() &&
               (!hydra_masks_.count(id) || h.fragment_offset() != 0 ||
                h.mask_fingerprint() != hydra_masks_.at(id).fingerprint ||
                h.numel() != hydra_masks_.at(id).indices.size())) {
      const auto m = hydra_masks_.find(id);
      st = InvalidArgument(
          "wrong mask: update has " + std::to_string(h.numel()) + " elements and mask " +
          short_fp(h.mask_fingerprint()) + ", round " + std::to_string(round_.round) +
          " assigned '" + id + "' " +
          (m == hydra_masks_.end() ? std::string("no subnetwork")
                                   : std::to_string(m->second.indices.size()) +
                                         " elements and mask " + short_fp(m->second.fingerprint)) +
          "; train the Task's subnetwork");
    } else if (fragments_.empty() && !config_.is_hydra() &&
               (h.numel() != numel || h.fragment_offset() != 0)) {
      st = InvalidArgument("wrong shape: update has " + std::to_string(h.numel()) +
                           " elements, θ has " + std::to_string(numel));
    } else if (h.layout_fingerprint() != experiment_.layout_fingerprint) {
      st = InvalidArgument("wrong shape: layout fingerprint " + short_fp(h.layout_fingerprint()) +
                           " does not match the experiment's " +
                           short_fp(experiment_.layout_fingerprint));
    } else if (h.params_fingerprint() != experiment_.params_fingerprint) {
      st = FailedPrecondition("wrong base: update was computed from θ " +
                              short_fp(h.params_fingerprint()) + ", round " +
                              std::to_string(round_.round) + " is θ " +
                              short_fp(experiment_.params_fingerprint) + "; pull θ again");
    } else if (h.codec() != "none" && !options_.decode) {
      st = InvalidArgument("codec '" + h.codec().substr(0, 64) +
                           "' is not supported by this coordinator (use \"none\")");
    } else if (h.codec() == "none" && h.payload_bytes() != h.numel() * sizeof(float)) {
      st = InvalidArgument("wrong shape: codec none needs " + std::to_string(h.numel() * 4) +
                           " payload bytes, header says " + std::to_string(h.payload_bytes()));
    } else if (h.tokens() == 0) {
      st = InvalidArgument("tokens must be > 0 (the aggregation weight)");
    } else if (!std::isfinite(h.train_loss())) {
      st = InvalidArgument("train_loss is not finite");
    }
    if (st.ok()) round_.receiving.insert(id);
    if (st.ok()) numel = h.numel();  // elements of this update: θ, or the round's fragment
    header_status = st;
  }
  if (!header_status.ok()) return reject(header_status, false);

  // Payload: bounded by the header checks above (numel·4, or + slack for encoded codecs).
  transport::ChunkAssembler assembler(numel * sizeof(float) + options_.payload_slack_bytes);
  Status st = assembler.add(first);
  pb::TensorChunk chunk;
  while (st.ok() && reader->Read(&chunk)) st = assembler.add(chunk);
  if (st.ok() && ctx->IsCancelled()) st = Unavailable("PushUpdate cancelled by the node");
  if (st.ok()) st = assembler.finish();
  if (!st.ok()) return reject(st, true);
  const uint64_t bytes = assembler.bytes_received();
  const std::string payload = assembler.take_payload();
  std::vector<float> delta;
  if (h.codec() == "none") {
    auto d = transport::bytes_to_floats(payload);
    if (!d.ok()) return reject(d.status(), true);
    delta = std::move(*d);
  } else {
    auto d = options_.decode(h.codec(), payload, numel);
    if (!d.ok()) return reject(d.status(), true);
    delta = std::move(*d);
  }
  if (delta.size() != numel)
    return reject(
        InvalidArgument("wrong shape: payload decodes to " + std::to_string(delta.size()) +
                        " elements, the update has " + std::to_string(numel)),
        true);
  if (Status f = algorithms::check_finite(
          delta, "update from '" + id + "' for round " + std::to_string(h.round()));
      !f.ok())
    return reject(f, true);

  std::lock_guard<std::mutex> lk(mu_);
  round_.receiving.erase(id);
  // The round may have closed or restarted while the payload streamed in.
  if (!(round_.open && round_.round == h.round() && is_participant_locked(id) &&
        h.params_fingerprint() == experiment_.params_fingerprint)) {
    const Status stale = FailedPrecondition("stale round: round " + std::to_string(h.round()) +
                                            " closed while the update was being received");
    audit("update_rejected", id + ": " + stale.to_string());
    Event e{Event::Kind::kUpdateRejected};
    e.round = h.round();
    e.node_id = id;
    e.message = stale.to_string();
    emit_locked(std::move(e));
    return to_grpc(stale);
  }
  if (config_.is_hydra() && (!hydra_masks_.count(id) ||
                             hydra_masks_.at(id).fingerprint != h.mask_fingerprint())) {
    const Status stale = FailedPrecondition("stale mask: the subnetwork of '" + id +
                                            "' changed while the update was being received");
    audit("update_rejected", id + ": " + stale.to_string());
    return to_grpc(stale);
  }
  PendingUpdate& u = round_.updates[id];
  if (config_.is_hydra()) u.indices = hydra_masks_.at(id).indices;
  u.delta = std::move(delta);
  u.tokens = h.tokens();
  u.loss = h.train_loss();
  u.bytes = bytes;
  const std::string progress = std::to_string(round_.updates.size()) + " of " +
                               std::to_string(round_.participants.size()) + " updates";
  Event e{Event::Kind::kUpdateAccepted};
  e.round = h.round();
  e.node_id = id;
  e.message = progress;
  emit_locked(std::move(e));
  resp->set_accepted(true);
  resp->set_message("accepted update for round " + std::to_string(h.round()) + " (" + progress +
                    ")");
  maybe_close_round_locked(Clock::now());
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ReportMetrics(grpc::ServerContext* ctx,
                                               const pb::MetricsReport* req, pb::MetricsAck* resp) {
  std::string id;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto id_or = member_locked(*ctx, req->experiment_id());
    if (!id_or.ok()) return to_grpc(id_or.status());
    id = *id_or;
  }
  if (static_cast<size_t>(req->metrics_size()) > kMaxMetrics)
    return to_grpc(
        InvalidArgument("at most " + std::to_string(kMaxMetrics) + " metrics per report"));
  boost::json::object o;
  o["node"] = id;
  o["round"] = req->round();
  o["step"] = req->step();
  o["unix_ms"] = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                           std::chrono::system_clock::now().time_since_epoch())
                                           .count());
  boost::json::object values;
  std::vector<std::pair<std::string, double>> list;
  for (const auto& m : req->metrics()) {
    if (m.name().empty() || m.name().size() > kMaxMetricName)
      return to_grpc(InvalidArgument("metric names must be 1-" + std::to_string(kMaxMetricName) +
                                     " characters"));
    if (!std::isfinite(m.value()))
      return to_grpc(InvalidArgument("metric '" + m.name() + "' is not finite"));
    values[m.name()] = m.value();
    list.emplace_back(m.name(), m.value());
  }
  o["metrics"] = std::move(values);
  if (Status st = store_.put_metrics(experiment_id_, id, req->round(), boost::json::serialize(o));
      !st.ok())
    return to_grpc(st);
  std::lock_guard<std::mutex> lk(mu_);
  Event e{Event::Kind::kMetrics};
  e.round = req->round();
  e.node_id = id;
  e.metrics = std::move(list);
  emit_locked(std::move(e));
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Leave(grpc::ServerContext* ctx, const pb::LeaveRequest* req,
                                       pb::LeaveResponse* resp) {
  std::lock_guard<std::mutex> lk(mu_);
  auto id_or = member_locked(*ctx, req->experiment_id());
  if (!id_or.ok()) return to_grpc(id_or.status());
  NodeState& n = nodes_[*id_or];
  n.status = NodeStatus::kLeft;
  n.ready = false;
  n.record.state = "left";
  (void)store_.put_node(experiment_id_, n.record);
  const std::string reason = req->reason().substr(0, 200);
  audit("node_left", *id_or + ": " + reason);
  Event e{Event::Kind::kNodeLeft};
  e.round = experiment_.current_round;
  e.node_id = *id_or;
  e.message = reason;
  emit_locked(std::move(e));
  maybe_close_round_locked(Clock::now());
  cv_.notify_all();
  return grpc::Status::OK;
}

}  // namespace atl::coordinator
