#include "node/sync_strategy.h"

#include <map>
#include <utility>

#include "algorithms/diloco/streaming.h"
#include "algorithms/model/subnet.h"
#include "node/hydra_site.h"
#include "algorithms/secagg/quantize.h"
#include "kernels/cpu/ops.h"
#include "node/saved_value.h"
#include "node/secure_push.h"
#include "node/state_bytes.h"

namespace atl::node {

namespace {

namespace al = atl::algorithms;
using al::compress::ErrorFeedback;
using atoll_pb::v1::Task;

template <class T>
std::unique_ptr<SyncState> saved(T value) {
  return save_value<SyncState>(std::move(value));
}

template <class T>
StatusOr<const T*> saved_value(const SyncState& state) {
  return node::saved_value<T>(state, "synchronization");
}

std::string codec_spec_of(const SiteConfig& site) {
  return site.spec.codec().empty() ? "none" : site.spec.codec();
}

// Plain DiLoCo: Δ over the whole θ, one residual. With TrainSpec.secagg the exchange is a
// securely aggregated push (node/secure_push.h) instead of a plain one.
class DilocoSync final : public SyncStrategy {
 public:
  DilocoSync(std::optional<al::compress::Codec> codec, std::string spec, bool ef, size_t numel,
             atoll_pb::v1::SecAggSpec secagg = {}, uint64_t site_seed = 0)
      : SyncStrategy(std::move(codec), std::move(spec), ef, numel),
        numel_(numel),
        secagg_(std::move(secagg)),
        site_seed_(site_seed) {}
  std::future<ExchangeResult> exchange(CoordinatorClient& link, const EncodedUpdate& update,
                                       const HeldTheta& held, uint64_t round,
                                       const std::atomic<bool>* stop) override {
    if (!secagg_.enabled()) return SyncStrategy::exchange(link, update, held, round, stop);
    std::promise<ExchangeResult> done;
    ExchangeResult x;
    SecurePush secure(secagg_, al::secagg::rounding_seed(site_seed_, update.header.round, ""),
                      stop);
    x.sent = secure.push(link, update.header, update.delta);
    if (x.sent.ok()) {
      if (Status st = secure.unmask(link); !st.ok()) x.sent = st;
    }
    done.set_value(std::move(x));
    return done.get_future();
  }
  Status plan(const Task& /*task*/) override {
    planned_numel_ = numel_;
    return Status::Ok();
  }
  std::unique_ptr<SyncState> save_state() const override { return saved(feedback_); }
  Status restore_state(const SyncState& state) override {
    ATOLL_ASSIGN_OR_RETURN(const auto* fb, saved_value<std::optional<ErrorFeedback>>(state));
    feedback_ = *fb;
    return Status::Ok();
  }
  // Whether there is a residual (0 or 1), then the residual (numel floats).
  StatusOr<std::string> encode_state(const SyncState& state) const override {
    ATOLL_ASSIGN_OR_RETURN(const auto* fb, saved_value<std::optional<ErrorFeedback>>(state));
    StateWriter w;
    w.u64(fb->has_value() ? 1 : 0);
    if (fb->has_value()) w.floats((*fb)->residual());
    return w.take();
  }
  StatusOr<std::unique_ptr<SyncState>> decode_state(std::string_view bytes) const override {
    StateReader r(bytes);
    ATOLL_ASSIGN_OR_RETURN(const uint64_t has, r.u64());
    std::optional<ErrorFeedback> fb;
    if (has == 1) {
      ATOLL_ASSIGN_OR_RETURN(std::vector<float> residual, r.floats(numel_));
      fb.emplace(std::move(residual));
    }
    if (has > 1 || !r.done()) return InvalidArgument("saved round state: bad DiLoCo residual");
    return saved(std::move(fb));
  }

 protected:
  void fill_delta(const al::ParamSet& theta, const al::ParamSet& local,
                  std::span<float> out) const override {
    for (size_t i = 0; i < out.size(); ++i) out[i] = theta.data()[i] - local.data()[i];
  }
  ErrorFeedback& feedback() override {
    if (!feedback_) feedback_.emplace(numel_);
    return *feedback_;
  }
  void label(UpdateHeader& header) const override { header.fragment_offset = 0; }

 private:
  size_t numel_;
  std::optional<ErrorFeedback> feedback_;  // made on first use (lossy codecs only)
  atoll_pb::v1::SecAggSpec secagg_;
  uint64_t site_seed_ = 0;  // SiteConfig::seed: with the round, seeds the quantizer's rounding
};

// Streaming DiLoCo: the task's fragment, a residual per fragment, the exchange in the background.
class StreamingSync final : public SyncStrategy {
 public:
  StreamingSync(std::optional<al::compress::Codec> codec, std::string spec, bool ef, size_t numel,
                uint32_t overlap, float alpha)
      : SyncStrategy(std::move(codec), std::move(spec), ef, numel),
        numel_(numel),
        overlap_(overlap),
        alpha_(alpha) {}

  Status plan(const Task& task) override {
    fragment_ = {0, numel_};  // a task without a fragment syncs the whole θ
    if (task.fragment_numel() > 0) {
      if (task.fragment_offset() > numel_ ||
          task.fragment_numel() > numel_ - task.fragment_offset())
        return InvalidArgument("the coordinator's fragment [" +
                               std::to_string(task.fragment_offset()) + ", +" +
                               std::to_string(task.fragment_numel()) + ") is outside θ (" +
                               std::to_string(numel_) + " values)");
      fragment_ = {task.fragment_offset(), task.fragment_numel()};
    }
    planned_numel_ = fragment_.numel;
    return Status::Ok();
  }

  std::future<ExchangeResult> exchange(CoordinatorClient& link, const EncodedUpdate& update,
                                       const HeldTheta& held, uint64_t round,
                                       const std::atomic<bool>* stop) override {
    return std::async(std::launch::async, [&link, &update, &held, round, stop] {
      ExchangeResult x;
      x.sent = push(link, update);
      if (!x.sent.ok()) return x;
      StatusOr<Task> task = Task{};
      for (;;) {
        task = link.next_task(round, 2000);
        if (!task.ok() || task->kind() != Task::WAIT || (stop != nullptr && stop->load())) break;
      }
      if (task.ok() && task->kind() == Task::TRAIN && !held.holds(task->params_fingerprint()))
        x.pulled = held.pull(link, *task);
      x.next_task = std::move(task);
      return x;
    });
  }
  uint32_t overlap_steps() const override { return overlap_; }
  std::unique_ptr<SyncState> save_state() const override {
    return saved(Saved{fragment_, planned_numel_, feedback_});
  }
  Status restore_state(const SyncState& state) override {
    ATOLL_ASSIGN_OR_RETURN(const Saved* s, saved_value<Saved>(state));
    fragment_ = s->fragment;
    planned_numel_ = s->planned_numel;
    feedback_ = s->feedback;
    return Status::Ok();
  }
  // The planned fragment (offset, numel), planned_numel, the number of residuals, then each
  // residual's fragment (offset, numel) and values.
  StatusOr<std::string> encode_state(const SyncState& state) const override {
    ATOLL_ASSIGN_OR_RETURN(const Saved* s, saved_value<Saved>(state));
    StateWriter w;
    w.u64(s->fragment.offset);
    w.u64(s->fragment.numel);
    w.u64(s->planned_numel);
    w.u64(s->feedback.size());
    for (const auto& [key, fb] : s->feedback) {
      w.u64(key.first);
      w.u64(key.second);
      w.floats(fb.residual());
    }
    return w.take();
  }
  StatusOr<std::unique_ptr<SyncState>> decode_state(std::string_view bytes) const override {
    StateReader r(bytes);
    Saved s;
    ATOLL_ASSIGN_OR_RETURN(s.fragment.offset, r.u64());
    ATOLL_ASSIGN_OR_RETURN(s.fragment.numel, r.u64());
    ATOLL_ASSIGN_OR_RETURN(s.planned_numel, r.u64());
    ATOLL_ASSIGN_OR_RETURN(const uint64_t count, r.u64());
    if (!inside(s.fragment) || s.planned_numel > numel_ || count > numel_)
      return InvalidArgument("saved round state: a Streaming DiLoCo fragment outside θ");
    for (uint64_t i = 0; i < count; ++i) {
      al::FragmentRange f;
      ATOLL_ASSIGN_OR_RETURN(f.offset, r.u64());
      ATOLL_ASSIGN_OR_RETURN(f.numel, r.u64());
      if (!inside(f))
        return InvalidArgument("saved round state: a Streaming DiLoCo residual outside θ");
      ATOLL_ASSIGN_OR_RETURN(std::vector<float> residual, r.floats(f.numel));
      s.feedback.emplace(std::make_pair(f.offset, f.numel), ErrorFeedback(std::move(residual)));
    }
    if (!r.done()) return InvalidArgument("saved round state: bytes after the residuals");
    return saved(std::move(s));
  }
  void merge(al::ParamSet& local, const al::ParamSet& theta) const override {
    al::merge_fragment(std::span<float>(local.data() + fragment_.offset, fragment_.numel),
                       std::span<const float>(theta.data() + fragment_.offset, fragment_.numel),
                       alpha_);
  }

 protected:
  void fill_delta(const al::ParamSet& theta, const al::ParamSet& local,
                  std::span<float> out) const override {
    const size_t off = fragment_.offset;
    for (size_t i = 0; i < out.size(); ++i) out[i] = theta.data()[off + i] - local.data()[off + i];
  }
  ErrorFeedback& feedback() override {
    auto key = std::make_pair(fragment_.offset, fragment_.numel);
    return feedback_.try_emplace(key, fragment_.numel).first->second;
  }
  void label(UpdateHeader& header) const override { header.fragment_offset = fragment_.offset; }

 private:
  using Feedbacks = std::map<std::pair<size_t, size_t>, ErrorFeedback>;  // by (offset, numel)
  struct Saved {
    al::FragmentRange fragment;
    size_t planned_numel = 0;
    Feedbacks feedback;
  };
  bool inside(const al::FragmentRange& f) const {
    return f.offset <= numel_ && f.numel <= numel_ - f.offset;
  }
  size_t numel_;
  uint32_t overlap_;
  float alpha_;
  al::FragmentRange fragment_;
  Feedbacks feedback_;
};

// Hydra: the subnetwork's trained elements; importance for SCORE tasks.
class HydraSync final : public SyncStrategy {
 public:
  HydraSync(std::optional<al::compress::Codec> codec, std::string spec, bool ef, size_t numel,
            const SiteConfig& site, InnerStep& inner)
      : SyncStrategy(std::move(codec), std::move(spec), ef, numel),
        numel_(numel),
        model_(site.model),
        ffn_blocks_(static_cast<int>(site.spec.ffn_blocks())),
        batch_(site.train.batch),
        seq_(site.train.seq),
        inner_(inner) {}

  Status plan(const Task& task) override {
    auto sub = al::subnet_from_string(task.subnet(), model_, ffn_blocks_);
    if (!sub.ok())
      return InvalidArgument("the coordinator's subnetwork is invalid: " + sub.status().message());
    if (al::subnet_fingerprint(*sub) != task.mask_fingerprint())
      return InvalidArgument("the coordinator's mask fingerprint does not match its subnetwork");
    ATOLL_ASSIGN_OR_RETURN(trained_, inner_.set_subnet(*sub));
    mask_fingerprint_ = task.mask_fingerprint();
    planned_numel_ = trained_.indices.size();
    return Status::Ok();
  }

  // The trained set is planned again from the (restored) inner step before the next update.
  std::unique_ptr<SyncState> save_state() const override {
    return saved(Saved{feedback_, feedback_generation_});
  }
  Status restore_state(const SyncState& state) override {
    ATOLL_ASSIGN_OR_RETURN(const Saved* s, saved_value<Saved>(state));
    feedback_ = s->feedback;
    feedback_generation_ = s->generation;
    return Status::Ok();
  }
  // The trained-set generation, whether there is a residual (0 or 1), then its length (the
  // trained element count, at most θ's) and the residual.
  StatusOr<std::string> encode_state(const SyncState& state) const override {
    ATOLL_ASSIGN_OR_RETURN(const Saved* s, saved_value<Saved>(state));
    StateWriter w;
    w.u64(s->generation);
    w.u64(s->feedback.has_value() ? 1 : 0);
    if (s->feedback) {
      w.u64(s->feedback->residual().size());
      w.floats(s->feedback->residual());
    }
    return w.take();
  }
  StatusOr<std::unique_ptr<SyncState>> decode_state(std::string_view bytes) const override {
    StateReader r(bytes);
    Saved s{};
    ATOLL_ASSIGN_OR_RETURN(s.generation, r.u64());
    ATOLL_ASSIGN_OR_RETURN(const uint64_t has, r.u64());
    if (has == 1) {
      ATOLL_ASSIGN_OR_RETURN(const uint64_t n, r.u64());
      if (n > numel_) return InvalidArgument("saved round state: a Hydra residual longer than θ");
      ATOLL_ASSIGN_OR_RETURN(std::vector<float> residual, r.floats(n));
      s.feedback.emplace(std::move(residual));
    }
    if (has > 1 || !r.done()) return InvalidArgument("saved round state: bad Hydra residual");
    return saved(std::move(s));
  }

  bool scores() const override { return true; }
  StatusOr<atoll_pb::v1::ImportanceReport> score(const Task& task, const al::ParamSet& theta,
                                                 const al::data::TokenDataset& train,
                                                 uint64_t seed) const override {
    return measure_importance(model_, theta, train, seed, task.round(),
                              static_cast<int>(task.importance_batches()), batch_, seq_,
                              ffn_blocks_);
  }

 protected:
  void fill_delta(const al::ParamSet& theta, const al::ParamSet& local,
                  std::span<float> out) const override {
    masked_delta(theta.vec(), local.vec(), trained_.indices, out);
  }
  // The residual is per trained element: it restarts when they change (a new mask that only
  // moves frozen units keeps it, like the optimizer).
  ErrorFeedback& feedback() override {
    if (!feedback_ || feedback_generation_ != trained_.generation) {
      feedback_.emplace(planned_numel_);
      feedback_generation_ = trained_.generation;
    }
    return *feedback_;
  }
  void label(UpdateHeader& header) const override {
    header.fragment_offset = 0;
    header.mask_fingerprint = mask_fingerprint_;
  }

 private:
  struct Saved {
    std::optional<ErrorFeedback> feedback;
    uint64_t generation;
  };
  size_t numel_;  // θ's elements: a residual is at most this long
  al::ModelConfig model_;
  int ffn_blocks_;
  int batch_, seq_;  // B, T of the importance batches: the training batch shape
  InnerStep& inner_;
  TrainedSet trained_;
  std::string mask_fingerprint_;
  std::optional<ErrorFeedback> feedback_;
  uint64_t feedback_generation_ = 0;  // the trained set feedback_ belongs to
};

}  // namespace

StatusOr<uint64_t> push(CoordinatorClient& link, const EncodedUpdate& update) {
  if (update.payload)
    return link.push_encoded(update.header, update.codec, update.numel, *update.payload);
  return link.push_update(update.header, update.delta);
}

SyncStrategy::SyncStrategy(std::optional<al::compress::Codec> codec, std::string codec_spec,
                           bool error_feedback, size_t numel)
    : codec_(std::move(codec)),
      codec_spec_(std::move(codec_spec)),
      error_feedback_(error_feedback),
      delta_(numel) {}

SyncStrategy::~SyncStrategy() = default;

StatusOr<std::string> SyncStrategy::encode_state(const SyncState& /*state*/) const {
  return FailedPrecondition("this synchronization's state is not written to disk");
}

StatusOr<std::unique_ptr<SyncState>> SyncStrategy::decode_state(std::string_view /*bytes*/) const {
  return FailedPrecondition("this synchronization's state is not read from disk");
}

StatusOr<EncodedUpdate> SyncStrategy::make_update(const al::ParamSet& theta,
                                                  const al::ParamSet& local) {
  const std::span<float> d(delta_.data(), planned_numel_);
  fill_delta(theta, local, d);
  EncodedUpdate u;
  label(u.header);
  u.codec = codec_spec_;
  u.numel = planned_numel_;
  if (!codec_) {
    u.delta = d;
    return u;
  }
  auto encoded = error_feedback_ ? feedback().encode(*codec_, d) : codec_->encode(d);
  if (!encoded.ok()) return encoded.status();
  u.payload.emplace(encoded->begin(), encoded->end());
  return u;
}

std::future<ExchangeResult> SyncStrategy::exchange(CoordinatorClient& link,
                                                   const EncodedUpdate& update,
                                                   const HeldTheta& /*held*/, uint64_t /*round*/,
                                                   const std::atomic<bool>* /*stop*/) {
  std::promise<ExchangeResult> done;
  ExchangeResult x;
  x.sent = push(link, update);
  done.set_value(std::move(x));
  return done.get_future();
}

StatusOr<atoll_pb::v1::ImportanceReport> SyncStrategy::score(
    const Task& /*task*/, const al::ParamSet& /*theta*/, const al::data::TokenDataset& /*train*/,
    uint64_t /*seed*/) const {
  return FailedPrecondition("only Hydra experiments measure importance (a SCORE task)");
}

Status check_sync_strategy(const SiteConfig& site) {
  const std::string spec = codec_spec_of(site);
  if (spec != "none") ATOLL_RETURN_IF_ERROR(al::compress::Codec::create(spec).status());
  if (site.hydra() && site.streaming())
    return InvalidArgument("the coordinator asks for Hydra with Streaming DiLoCo (unsupported)");
  if (site.spec.secagg().enabled() && (site.hydra() || site.streaming() || spec != "none"))
    return InvalidArgument("the coordinator asks for secure aggregation with Hydra, Streaming "
                           "DiLoCo or codec '" + spec + "' (plain DiLoCo with codec none only)");
  const float alpha = static_cast<float>(site.spec.merge_alpha());
  if (site.streaming() && !(alpha >= 0 && alpha < 1))
    return InvalidArgument("the coordinator's merge_alpha " + std::to_string(alpha) +
                           " is not in [0, 1)");
  return Status::Ok();
}

StatusOr<std::unique_ptr<SyncStrategy>> make_sync_strategy(const SiteConfig& site,
                                                           InnerStep& inner) {
  ATOLL_RETURN_IF_ERROR(check_sync_strategy(site));
  const std::string spec = codec_spec_of(site);
  std::optional<al::compress::Codec> codec;
  if (spec != "none") {
    ATOLL_ASSIGN_OR_RETURN(auto c, al::compress::Codec::create(spec));
    // The process's --threads also split encode and decode (the bytes do not depend on it).
    c.set_threads(kernels::cpu::num_threads());
    codec.emplace(std::move(c));
  }
  const bool error_feedback = codec.has_value() && site.spec.error_feedback();
  const size_t numel = theta_layout(site).numel();
  if (site.hydra())
    return std::unique_ptr<SyncStrategy>(
        std::make_unique<HydraSync>(std::move(codec), spec, error_feedback, numel, site, inner));
  if (site.streaming())
    return std::unique_ptr<SyncStrategy>(std::make_unique<StreamingSync>(
        std::move(codec), spec, error_feedback, numel, site.spec.overlap_steps(),
        static_cast<float>(site.spec.merge_alpha())));
  return std::unique_ptr<SyncStrategy>(std::make_unique<DilocoSync>(
      std::move(codec), spec, error_feedback, numel, site.spec.secagg(), site.seed));
}

}  // namespace atl::node
