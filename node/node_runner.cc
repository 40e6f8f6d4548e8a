#include "node/node_runner.h"

#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "algorithms/compress/codec.h"
#include "algorithms/compress/error_feedback.h"
#include "algorithms/data/dataset.h"
#include "algorithms/diloco/outer.h"
#include "algorithms/diloco/streaming.h"
#include "algorithms/hydra/trainer.h"
#include "algorithms/model/llama.h"
#include "algorithms/optim/inner_trainer.h"
#include "kernels/core/sha256.h"
#include "kernels/cpu/ops.h"
#include "node/coordinator_client.h"
#include "node/hydra_site.h"
#include "node/distill_inner.h"
#include "node/gpu_trainer.h"
#include "node/site_data.h"
#include "transport/tls/credentials.h"

namespace atl::node {

namespace {

using Clock = std::chrono::steady_clock;
using atoll_pb::v1::Task;

algorithms::ModelConfig model_from_spec(const atoll_pb::v1::ModelSpec& m) {
  algorithms::ModelConfig c;
  c.vocab = static_cast<int>(m.vocab());
  c.dim = static_cast<int>(m.dim());
  c.layers = static_cast<int>(m.layers());
  c.heads = static_cast<int>(m.heads());
  c.ffn_hidden = static_cast<int>(m.ffn_hidden());
  c.seq_len = static_cast<int>(m.seq_len());
  c.rope_base = m.rope_base();
  c.norm_eps = m.norm_eps();
  if (m.moe_experts() > 0) {  // otherwise the defaults: a dense model
    c.moe_experts = static_cast<int>(m.moe_experts());
    c.moe_top_k = static_cast<int>(m.moe_top_k());
    c.moe_hidden = static_cast<int>(m.moe_hidden());
    c.moe_every = static_cast<int>(m.moe_every());
    c.moe_score = m.moe_score();
    c.moe_shared_hidden = static_cast<int>(m.moe_shared_hidden());
    c.moe_aux_coef = m.moe_aux_coef();
    c.moe_z_coef = m.moe_z_coef();
  }
  return c;
}

algorithms::TrainerConfig trainer_from_spec(const atoll_pb::v1::TrainSpec& t, int seq) {
  algorithms::TrainerConfig c;
  c.batch = static_cast<int>(t.batch_size());
  c.seq = seq;
  c.lr = t.lr();
  c.min_lr = t.min_lr();
  c.warmup = t.warmup_steps();
  c.total_steps = static_cast<int64_t>(t.total_inner_steps());
  c.weight_decay = t.weight_decay();
  c.beta1 = t.beta1();
  c.beta2 = t.beta2();
  c.grad_clip = t.grad_clip();
  return c;
}

// Heartbeats from a side thread while the main thread trains.
class Heartbeater {
 public:
  Heartbeater(CoordinatorClient& client, std::chrono::milliseconds interval)
      : client_(client), interval_(interval), thread_([this] { loop(); }) {}
  ~Heartbeater() {
    {
      std::lock_guard<std::mutex> l(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void progress(uint64_t round, uint32_t step, double loss, double tps) {
    std::lock_guard<std::mutex> l(mu_);
    round_ = round;
    step_ = step;
    loss_ = loss;
    tps_ = tps;
  }
  bool unknown() const { return unknown_.load(); }
  void clear_unknown() { unknown_ = false; }

 private:
  void loop() {
    std::unique_lock<std::mutex> l(mu_);
    while (!done_) {
      if (cv_.wait_for(l, interval_, [this] { return done_; })) break;
      uint64_t r = round_;
      uint32_t s = step_;
      double loss = loss_, tps = tps_;
      l.unlock();
      auto known = client_.heartbeat(r, s, loss, tps);
      if (known.ok() && !*known) unknown_ = true;
      l.lock();
    }
  }
  CoordinatorClient& client_;
  std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  uint64_t round_ = 0;
  uint32_t step_ = 0;
  double loss_ = 0, tps_ = 0;
  std::atomic<bool> unknown_{false};
  std::thread thread_;
};

bool retryable(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
}

// A refused TLS handshake or certificate will not fix itself by retrying: report it at once.
// (Only before the first successful join: afterwards a coordinator restart can look alike.)
bool security_refusal(const Status& s) {
  const std::string& m = s.message();
  return m.find("certificate") != std::string::npos || m.find("TLS") != std::string::npos;
}

// A node is set up for one experiment (model, optimizer, codec); when the coordinator now
// serves another one (the dashboard switched the live experiment), stop with a clear line
// rather than train the wrong model.
Status same_experiment(const std::string& was, const atoll_pb::v1::JoinResponse& now) {
  if (now.experiment_id() == was) return Status::Ok();
  return FailedPrecondition("the coordinator now serves experiment '" + now.experiment_id() +
                            "' instead of '" + was + "': start the node again to join it");
}

}  // namespace

uint64_t site_seed(uint64_t experiment_seed, const std::string& node_id) {
  auto d = sha256(node_id.data(), node_id.size());
  uint64_t h = 0;
  for (int i = 0; i < 8; ++i) h = (h << 8) | d[i];
  return experiment_seed ^ h;
}

Status run_node(const NodeOptions& opt) {
  auto log = [&](const std::string& line) {
    if (opt.log) opt.log(line);
  };
  auto stopping = [&] { return opt.stop && opt.stop->load(); };
  // Before joining: a GPU flag this build or machine cannot honour is one line, not a join.
  ATOLL_ASSIGN_OR_RETURN(const DeviceChoice devices, resolve_devices(opt.device, opt.devices));

  ClientOptions co;
  co.target = opt.coordinator;
  co.node_name = opt.name;
  if (opt.insecure) {
    co.tls = transport::insecure_client_credentials();
  } else {
    ATOLL_ASSIGN_OR_RETURN(co.tls,
                           transport::client_credentials(opt.tls_dir, opt.name, opt.server_name));
  }
  CoordinatorClient client(co);
  ATOLL_ASSIGN_OR_RETURN(DataSpec spec, parse_data_spec(opt.data_spec));
  kernels::cpu::set_num_threads(opt.threads);

  // Join, retrying while the coordinator is unreachable.
  bool joined_once = false;
  auto join = [&]() -> StatusOr<atoll_pb::v1::JoinResponse> {
    atoll_pb::v1::JoinRequest req;
    req.set_node_name(opt.name);
    // The coordinator takes at most 64 characters here (a long --devices list is summarized).
    req.mutable_capabilities()->set_device(
        devices.name.size() <= 64 ? devices.name
                                  : std::to_string(devices.cuda.size()) + " CUDA devices");
    req.mutable_capabilities()->set_threads(static_cast<uint32_t>(opt.threads));
    req.set_budget(opt.budget);
    req.set_client_version("atoll 0.1.0");
    req.mutable_data()->add_genres(spec.to_string());
    auto give_up = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(opt.give_up_after_s));
    auto backoff = std::chrono::milliseconds(200);
    while (true) {
      auto r = client.join(req);
      if (r.ok()) {
        joined_once = true;
        return r;
      }
      if (!retryable(r.status()) || (!joined_once && security_refusal(r.status()))) return r;
      if (stopping()) return r.status();
      if (Clock::now() + backoff > give_up)
        return Unavailable(r.status().message() + " (gave up after " +
                           std::to_string(static_cast<int>(opt.give_up_after_s)) + " s)");
      log("coordinator unreachable, retrying in " + std::to_string(backoff.count()) + " ms: " +
          r.status().message());
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
    }
  };

  ATOLL_ASSIGN_OR_RETURN(auto joined, join());
  const auto model_cfg = model_from_spec(joined.model());
  ATOLL_RETURN_IF_ERROR(algorithms::validate(model_cfg));
  auto train_cfg = trainer_from_spec(joined.train(), model_cfg.seq_len);
  ATOLL_RETURN_IF_ERROR(algorithms::validate(train_cfg, model_cfg));
  const uint64_t seed = site_seed(joined.train().seed(), joined.node_id());
  if (!joined.train().precision().empty()) {
    ATOLL_ASSIGN_OR_RETURN(train_cfg.precision,
                           algorithms::parse_precision(joined.train().precision()));
  }
  train_cfg.precision_seed = seed;  // this node's own stochastic-rounding streams
  log("joined " + joined.experiment_id() + " as " + joined.node_id() + " (index " +
      std::to_string(joined.node_index()) + ")");

  ATOLL_ASSIGN_OR_RETURN(SiteData site, load_site_data(spec, TokenizerChoice{}, opt.brown_dir));
  if (site.tokenizer->vocab_size() > model_cfg.vocab)
    return InvalidArgument("the site's tokenizer has " +
                           std::to_string(site.tokenizer->vocab_size()) +
                           " ids but the experiment's model has vocab " +
                           std::to_string(model_cfg.vocab));
  ATOLL_RETURN_IF_ERROR(
      algorithms::data::check_sampling(site.train, train_cfg.batch, train_cfg.seq));
  log("data " + spec.to_string() + ": " + std::to_string(site.train.size()) + " train tokens");

  const std::string codec_spec = joined.train().codec().empty() ? "none" : joined.train().codec();
  std::optional<algorithms::compress::Codec> codec;
  if (codec_spec != "none") {
    ATOLL_ASSIGN_OR_RETURN(auto c, algorithms::compress::Codec::create(codec_spec));
    codec.emplace(std::move(c));
  }

  algorithms::InnerTrainer trainer(model_cfg, train_cfg);
  // Hydra (docs/hydra.md): SCORE tasks measure importance; TRAIN tasks name the subnetwork this
  // node trains and pushes Δ for (its trained elements only, in index order).
  const bool hydra = joined.train().algorithm() == "hydra";
  const int ffn_blocks = static_cast<int>(joined.train().ffn_blocks());
  if (hydra && (ffn_blocks <= 0 || model_cfg.ffn_hidden % ffn_blocks != 0))
    return InvalidArgument("the coordinator's hydra ffn_blocks " + std::to_string(ffn_blocks) +
                           " does not divide ffn_hidden " + std::to_string(model_cfg.ffn_hidden));
  if (hydra && (joined.train().streaming_fragments() > 1 || joined.train().overlap_steps() > 0))
    return InvalidArgument("the coordinator asks for Hydra with Streaming DiLoCo (unsupported)");
  if (hydra && !opt.distill.teachers.empty())
    return InvalidArgument("--teacher cannot be used in a Hydra experiment (subnetwork training "
                           "has no distillation loss); drop --teacher or use algorithm = diloco");
  std::optional<algorithms::hydra::HydraTrainer> hydra_trainer;
  if (hydra) hydra_trainer.emplace(model_cfg, train_cfg);
  // The GPU path (node/gpu_trainer.h): plain DiLoCo inner steps only, for now.
  std::unique_ptr<GpuTrainer> gpu;
  if (devices.gpu()) {
    if (hydra || !opt.distill.teachers.empty())
      return FailedPrecondition("--device " + devices.name + ": " +
                                (hydra ? "Hydra subnetworks" : "distillation (--teacher)") +
                                " train on the CPU only for now: use --device cpu");
    ATOLL_ASSIGN_OR_RETURN(gpu, GpuTrainer::create(model_cfg, train_cfg, devices));
    log("training on " + devices.name);
  }
  uint64_t hydra_fb_generation = 0;  // the trained set the error feedback belongs to
  std::optional<algorithms::compress::ErrorFeedback> hydra_feedback;
  // Distillation from remote teachers: the inner loss is the distillation loss.
  std::unique_ptr<DistillInnerStep> distiller;
  if (!opt.distill.teachers.empty()) {
    transport::ClientTls teacher_tls;
    if (opt.insecure) {
      teacher_tls = transport::insecure_client_credentials();
    } else {
      ATOLL_ASSIGN_OR_RETURN(teacher_tls, transport::client_credentials(opt.tls_dir, opt.name,
                                                                        opt.distill.server_name));
    }
    ATOLL_ASSIGN_OR_RETURN(distiller, DistillInnerStep::create(opt.distill, teacher_tls, model_cfg,
                                                               train_cfg, opt.stop));
    log("distilling from teachers " + distiller->describe() + " (" + opt.distill.codec +
        ", alpha " + std::to_string(opt.distill.alpha).substr(0, 5) + ")");
  }
  const auto layout = algorithms::make_layout(model_cfg);
  const std::string layout_fp = algorithms::layout_fingerprint(layout);
  // theta: the global θ as last pulled (exact unless a lossy delta was applied); local: the
  // parameters this node trains.
  algorithms::ParamSet theta(layout), local(layout);
  std::string held_fingerprint;
  bool held_exact = true;
  std::vector<float> delta(layout.numel());
  algorithms::compress::ErrorFeedback feedback(layout.numel());
  const bool use_feedback = codec && joined.train().error_feedback();

  // Streaming DiLoCo (docs/coordinator.md): each round syncs one fragment; the exchange (push,
  // next task, pull) runs on a background thread while this thread trains overlap_steps more
  // inner steps, then the new global fragment is merged into the local one.
  const bool streaming =
      joined.train().streaming_fragments() > 1 || joined.train().overlap_steps() > 0;
  const uint32_t overlap = joined.train().overlap_steps();
  const float alpha = static_cast<float>(joined.train().merge_alpha());
  const uint64_t total_steps = joined.train().total_inner_steps();
  if (streaming && !(alpha >= 0 && alpha < 1))
    return InvalidArgument("the coordinator's merge_alpha " + std::to_string(alpha) +
                           " is not in [0, 1)");
  std::map<uint64_t, algorithms::compress::ErrorFeedback> fragment_feedback;  // by offset
  std::optional<Task> next;  // streaming: the next task, obtained by the exchange
  bool warm = false;         // streaming: theta and local continue from the exchange
  uint32_t pre_steps = 0;    // inner steps of `next` already trained during the overlap
  double pre_loss = 0;
  uint64_t pre_tokens = 0;

  Heartbeater heart(client, std::chrono::milliseconds(
                                std::max<uint32_t>(100, joined.heartbeat_interval_ms())));
  uint64_t last_done = 0;
  bool have_done = false;
  // When the coordinator became unreachable (valid while `unreachable`); a plain pair, since
  // GCC's -Wmaybe-uninitialized misreads an optional time_point here.
  bool unreachable = false;
  Clock::time_point unreachable_since{};

  // Pulls θ of `task`: a delta against what this node holds when the coordinator finds that
  // smaller than the full θ.
  auto pull = [&](const Task& task) -> StatusOr<PulledParams> {
    HeldParams held{theta.vec(), held_fingerprint, held_exact};
    return client.pull_params(task.round(), task.params_fingerprint(),
                              held_fingerprint.empty() ? nullptr : &held);
  };
  // A θ of another size is another model: not retryable.
  auto check_size = [&](const PulledParams& p) -> Status {
    if (p.values.size() == theta.numel()) return Status::Ok();
    return InvalidArgument("the coordinator's θ has " + std::to_string(p.values.size()) +
                           " values, this node's model has " + std::to_string(theta.numel()));
  };
  auto adopt = [&](PulledParams& p) {
    theta.vec().swap(p.values);
    held_fingerprint = p.fingerprint;
    held_exact = p.exact;
  };

  while (!stopping()) {
    Task cur;
    if (next) {
      cur = std::move(*next);
      next.reset();
      if (cur.kind() == Task::STOP) {
        log("stop: " + cur.reason());
        break;
      }
    } else {
      warm = false;
      if (heart.unknown()) {
        log("the coordinator no longer knows this node; joining again");
        const std::string was = joined.experiment_id();
        ATOLL_ASSIGN_OR_RETURN(joined, join());
        ATOLL_RETURN_IF_ERROR(same_experiment(was, joined));
        heart.clear_unknown();
      }
      auto task = client.next_task(have_done ? last_done : 0, 2000);
      if (!task.ok()) {
        if (!retryable(task.status()) && task.status().code() != StatusCode::kNotFound &&
            task.status().code() != StatusCode::kFailedPrecondition)
          return task.status();
        if (!unreachable) {
          unreachable = true;
          unreachable_since = Clock::now();
        }
        if (std::chrono::duration<double>(Clock::now() - unreachable_since).count() >
            opt.give_up_after_s)
          return Unavailable("coordinator at " + opt.coordinator + " unreachable for " +
                             std::to_string(static_cast<int>(opt.give_up_after_s)) + " s: " +
                             task.status().message());
        log("next task failed (" + task.status().message() + "); reconnecting");
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        auto re = join();
        if (!re.ok() && !retryable(re.status())) return re.status();
        if (re.ok()) ATOLL_RETURN_IF_ERROR(same_experiment(joined.experiment_id(), *re));
        continue;
      }
      unreachable = false;
      if (task->kind() == Task::STOP) {
        log("stop: " + task->reason());
        break;
      }
      if (hydra && task->kind() == Task::SCORE) {
        // Importance of θ_r on this site's data: scores only leave the site.
        if (held_fingerprint != task->params_fingerprint()) {
          auto pulled = pull(*task);
          if (!pulled.ok()) {
            log("pull for scoring failed: " + pulled.status().message());
            continue;
          }
          ATOLL_RETURN_IF_ERROR(check_size(*pulled));
          adopt(*pulled);
        }
        auto rep = measure_importance(model_cfg, theta, site.train, seed, task->round(),
                                      static_cast<int>(task->importance_batches()),
                                      train_cfg.batch, train_cfg.seq, ffn_blocks);
        if (!rep.ok()) return rep.status();
        Status st = client.report_importance(*rep);
        log(st.ok() ? "round " + std::to_string(task->round()) + ": importance reported"
                    : "importance report refused: " + st.message());
        continue;
      }
      if (task->kind() != Task::TRAIN) continue;
      cur = std::move(*task);
    }

    const uint64_t round = cur.round();
    if (!warm) {
      if (held_fingerprint != cur.params_fingerprint()) {
        auto pulled = pull(cur);
        if (!pulled.ok()) {
          log("pull of round " + std::to_string(round) + " failed: " + pulled.status().message());
          continue;
        }
        ATOLL_RETURN_IF_ERROR(check_size(*pulled));
        adopt(*pulled);
      }
      std::copy(theta.data(), theta.data() + theta.numel(), local.data());
      pre_steps = 0;
      pre_loss = 0;
      pre_tokens = 0;
    }
    // The elements this round synchronizes: the whole θ, or the task's fragment.
    size_t frag_off = 0, frag_n = theta.numel();
    if (streaming && cur.fragment_numel() > 0) {
      if (cur.fragment_offset() > theta.numel() ||
          cur.fragment_numel() > theta.numel() - cur.fragment_offset())
        return InvalidArgument("the coordinator's fragment [" +
                               std::to_string(cur.fragment_offset()) + ", +" +
                               std::to_string(cur.fragment_numel()) + ") is outside θ (" +
                               std::to_string(theta.numel()) + " values)");
      frag_off = cur.fragment_offset();
      frag_n = cur.fragment_numel();
    }

    if (hydra) {
      auto sub = algorithms::subnet_from_string(cur.subnet(), model_cfg, ffn_blocks);
      if (!sub.ok())
        return InvalidArgument("the coordinator's subnetwork is invalid: " +
                               sub.status().message());
      if (algorithms::subnet_fingerprint(*sub) != cur.mask_fingerprint())
        return InvalidArgument("the coordinator's mask fingerprint does not match its subnetwork");
      ATOLL_RETURN_IF_ERROR(hydra_trainer->set_subnet(*sub));
      frag_n = hydra_trainer->indices().size();
    }
    auto t0 = Clock::now();
    double loss_sum = pre_loss;
    uint64_t tokens = pre_tokens;
    const uint32_t H = cur.inner_steps();
    uint32_t done_steps = std::min(pre_steps, H);
    auto train_step = [&](uint64_t r, int64_t step, uint32_t k, double& lsum, uint64_t& toks) {
      auto batch = algorithms::data::sample_global_batch(site.train, seed, step, train_cfg.batch,
                                                         train_cfg.seq);
      algorithms::StepStats st;
      if (distiller) {
        // The batch of step + 1 too: its teacher targets are fetched while this step trains.
        std::optional<algorithms::data::GlobalBatch> after;
        if (static_cast<uint64_t>(step) + 1 < total_steps)
          after = algorithms::data::sample_global_batch(site.train, seed, step + 1, train_cfg.batch,
                                                        train_cfg.seq);
        auto ds = distiller->step(local, batch.tokens, step, after ? &after->tokens : nullptr);
        if (!ds.ok()) return ds.status();
        st.loss = ds->loss;
        st.grad_norm = ds->grad_norm;
        st.lr = ds->lr;
        st.tokens = ds->tokens;
      } else if (hydra) {
        st = hydra_trainer->step(local, batch.tokens.data(), step);
      } else if (gpu) {  // θ is on the device for the loop's duration (load/store below)
        auto gs = gpu->step_device(batch.tokens.data(), step);
        if (!gs.ok()) return gs.status();
        st = *gs;
      } else {
        st = trainer.step(local, batch.tokens.data(), step);
      }
      lsum += st.loss;
      toks += static_cast<uint64_t>(st.tokens);
      double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      heart.progress(r, k + 1, st.loss, secs > 0 ? toks / secs : 0);
      return Status::Ok();
    };
    if (gpu) ATOLL_RETURN_IF_ERROR(gpu->load(local));  // one copy of θ each way per loop
    for (uint32_t k = done_steps; k < H && !stopping(); ++k) {
      ATOLL_RETURN_IF_ERROR(
          train_step(round, static_cast<int64_t>(cur.global_step()) + k, k, loss_sum, tokens));
      ++done_steps;
    }
    if (gpu) ATOLL_RETURN_IF_ERROR(gpu->store(local));
    if (stopping()) break;
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const double mean_loss = loss_sum / std::max<uint32_t>(done_steps, 1);
    if (!std::isfinite(mean_loss))
      return Internal("inner training diverged in round " + std::to_string(round) +
                      " (loss is not finite): lower the experiment's lr");

    // Δ = θ − θ_local over the synchronized elements (+ what the codec dropped last time).
    const std::span<float> d(delta.data(), frag_n);
    if (hydra) {
      masked_delta(theta.vec(), local.vec(), hydra_trainer->indices(), d);
    } else {
      for (size_t i = 0; i < frag_n; ++i)
        d[i] = theta.data()[frag_off + i] - local.data()[frag_off + i];
    }
    UpdateHeader h;
    h.round = round;
    h.tokens = tokens;
    h.train_loss = mean_loss;
    h.base_fingerprint = held_fingerprint;
    h.layout_fingerprint = layout_fp;
    h.fragment_offset = streaming ? frag_off : 0;
    if (hydra) h.mask_fingerprint = cur.mask_fingerprint();
    std::optional<std::string> encoded_payload;  // empty: codec "none"
    if (codec) {
      algorithms::compress::ErrorFeedback* fb = &feedback;
      if (streaming)
        fb = &fragment_feedback.try_emplace(frag_off, frag_n).first->second;
      if (hydra) {  // the residual is per trained element: it restarts when they change (a
                    // new mask that only moves frozen units keeps it, like the optimizer)
        if (!hydra_feedback || hydra_fb_generation != hydra_trainer->trained_set_generation()) {
          hydra_feedback.emplace(frag_n);
          hydra_fb_generation = hydra_trainer->trained_set_generation();
        }
        fb = &*hydra_feedback;
      }
      auto encoded = use_feedback ? fb->encode(*codec, d) : codec->encode(d);
      if (!encoded.ok()) return encoded.status();
      encoded_payload.emplace(encoded->begin(), encoded->end());
    }
    auto push = [&]() -> StatusOr<uint64_t> {
      if (encoded_payload) return client.push_encoded(h, codec_spec, frag_n, *encoded_payload);
      return client.push_update(h, d);
    };

    StatusOr<uint64_t> sent = uint64_t{0};
    if (!streaming) {
      sent = push();
    } else {
      // The exchange: push Δ, wait for the next round's task, pull its θ (a delta against
      // theta, which this thread leaves alone until the exchange is joined).
      struct Exchange {
        StatusOr<uint64_t> sent = uint64_t{0};
        StatusOr<Task> task = Task{};
        std::optional<StatusOr<PulledParams>> pulled;
      };
      auto exchange = std::async(std::launch::async, [&]() {
        Exchange x;
        x.sent = push();
        if (!x.sent.ok()) return x;
        for (;;) {
          x.task = client.next_task(round, 2000);
          if (!x.task.ok() || x.task->kind() != Task::WAIT || stopping()) break;
        }
        if (x.task.ok() && x.task->kind() == Task::TRAIN &&
            x.task->params_fingerprint() != held_fingerprint)
          x.pulled = pull(*x.task);
        return x;
      });
      // Overlap: the first τ inner steps of the next round (if there is one) while the
      // exchange is in flight. Deterministic: the merge always happens after exactly these.
      const uint64_t next_step = (round + 1) * uint64_t{H};
      uint32_t overlapped = 0;
      double next_loss = 0;
      uint64_t next_tokens = 0;
      auto t_overlap = Clock::now();
      if (gpu) ATOLL_RETURN_IF_ERROR(gpu->load(local));
      for (uint32_t k = 0; k < std::min(overlap, H) && next_step + k < total_steps && !stopping();
           ++k) {
        ATOLL_RETURN_IF_ERROR(
            train_step(round + 1, static_cast<int64_t>(next_step + k), k, next_loss, next_tokens));
        ++overlapped;
      }
      if (gpu) ATOLL_RETURN_IF_ERROR(gpu->store(local));
      const double overlap_s = std::chrono::duration<double>(Clock::now() - t_overlap).count();
      Exchange x = exchange.get();
      if (stopping()) break;
      sent = x.sent;
      if (sent.ok() && !x.task.ok()) {
        log("next task after round " + std::to_string(round) +
            " failed: " + x.task.status().message());
      } else if (sent.ok() && x.task->kind() == Task::STOP) {
        next = std::move(*x.task);  // handled as a fresh task: logs and stops
        warm = false;
      } else if (sent.ok() && x.task->kind() == Task::TRAIN) {
        bool ok = true;
        if (x.pulled) {
          if (!x.pulled->ok()) {
            log("pull of round " + std::to_string(x.task->round()) +
                " failed: " + x.pulled->status().message());
            ok = false;
          } else {
            ATOLL_RETURN_IF_ERROR(check_size(**x.pulled));
            adopt(**x.pulled);
          }
        }
        // Merge the fragment this round synced: θ_local ← α·θ_local + (1−α)·θ_global.
        const bool continues = ok && x.task->round() == round + 1 &&
                               x.task->global_step() == next_step && x.task->inner_steps() == H;
        if (continues) {
          algorithms::merge_fragment(std::span<float>(local.data() + frag_off, frag_n),
                                     std::span<const float>(theta.data() + frag_off, frag_n),
                                     alpha);
          pre_steps = overlapped;
          pre_loss = next_loss;
          pre_tokens = next_tokens;
        } else if (ok) {
          log("round " + std::to_string(x.task->round()) + " does not follow round " +
              std::to_string(round) + ": restarting from the global θ");
        }
        next = std::move(*x.task);
        warm = continues;
      }
      if (overlapped > 0 && sent.ok()) {
        char line[160];
        std::snprintf(line, sizeof(line), "round %" PRIu64 ": %u inner steps overlapped the sync "
                      "(%.2f s)", round, overlapped, overlap_s);
        log(line);
      }
    }
    if (!sent.ok()) {
      log("update for round " + std::to_string(round) + " refused: " + sent.status().message());
      next.reset();
      continue;
    }
    last_done = round;
    have_done = true;
    char line[256];
    std::snprintf(line, sizeof(line),
                  "round %" PRIu64 ": %u steps, loss %.4f, %.0f tok/s, sent %" PRIu64 " bytes",
                  round, done_steps, mean_loss, secs > 0 ? tokens / secs : 0.0, *sent);
    std::string tail;
    if (distiller) {
      char t[96];
      std::snprintf(t, sizeof(t), ", teacher %.1f bytes/token", distiller->bytes_per_token());
      tail = t;
    }
    log(line + tail);
    (void)client.report_metrics(round, cur.global_step() + H,
                                {{"loss", mean_loss},
                                 {"tokens_per_s", secs > 0 ? tokens / secs : 0.0},
                                 {"bytes_up", static_cast<double>(*sent)},
                                 {"round_seconds", secs}});
  }
  (void)client.leave(stopping() ? "stop requested" : "experiment finished");
  return Status::Ok();
}

}  // namespace atl::node
