#include "node/site_worker.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "algorithms/data/dataset.h"
#include "algorithms/diloco/outer.h"
#include "algorithms/model/param_set.h"
#include "kernels/core/build_info.h"
#include "kernels/core/number_text.h"
#include "kernels/core/sha256.h"
#include "node/evaluate.h"
#include "node/gpu_trainer.h"
#include "node/heartbeater.h"
#include "node/held_theta.h"
#include "node/inner_step.h"
#include "node/kept_theta.h"
#include "node/metrics_reporter.h"
#include "node/reconnect.h"
#include "node/round_snapshot.h"
#include "node/round_state_file.h"
#include "node/site_data.h"
#include "node/sync_strategy.h"

namespace atl::node {

namespace {

namespace al = atl::algorithms;
using Clock = std::chrono::steady_clock;
// How long a finishing worker waits for its queued metrics reports: past one call's deadline
// (10 s) when the experiment ended, briefly when a stop was requested.
constexpr std::chrono::milliseconds kFlushAtEnd{15000};
constexpr std::chrono::milliseconds kFlushOnStop{2000};
using atoll_pb::v1::Task;

// The coordinator did not answer (a transport error): retried. A certificate verdict is
// kUnauthenticated (transport::explain_call_error) and stops the node at once.
bool retryable(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
}

// Another process joined under this node's name and the coordinator took it instead
// (coordinator/service.h): this process stops with the coordinator's line, without a line of its
// own about the call that failed.
bool superseded(const Status& s) {
  return s.code() == StatusCode::kAborted;
}

ReconnectOptions reconnect_options(const SiteWorkerOptions& o) {
  ReconnectOptions r;
  r.coordinator = o.coordinator;
  r.give_up_after_s = o.give_up_after_s;
  r.stop = o.stop;
  r.log = o.log;
  return r;
}

// θ pulls: a connection of their own, which can fail while the calls' works (refused at the
// coordinator's per-address cap). Without a pause a pull failing at once was retried at once,
// ~200–900 lines a second, and the node never gave up since its calls were answered.
ReconnectOptions transfer_reconnect_options(const SiteWorkerOptions& o) {
  ReconnectOptions r = reconnect_options(o);
  r.subject = "the coordinator's stream connection";
  r.wake_on_link = false;
  return r;
}

// A node is set up for one experiment (model, optimizer, codec); when the coordinator now
// serves another one (the dashboard switched the live experiment), stop with a clear line
// rather than train the wrong model.
Status same_experiment(const std::string& was, const atoll_pb::v1::JoinResponse& now) {
  if (now.experiment_id() == was) return Status::Ok();
  return FailedPrecondition("the coordinator now serves experiment '" + now.experiment_id() +
                            "' instead of '" + was + "': start the node again to join it");
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// "pulled B bytes in S s (R MB/s), pushed B bytes in S s (R MB/s), answers A s": the wire
// throughput as this node saw it (TransferTotals; bench/transport reads this line). MB = 10^6
// bytes. Nothing is logged by a transport without a wire (in memory).
std::string transfer_line(const TransferTotals& t) {
  // Three decimals below 1 MB/s: a 100 kbit/s link's 0.011 MB/s read "0.0 MB/s".
  auto rate = [](uint64_t bytes, double s) {
    const double mb_per_s = s > 0 ? bytes / s / 1e6 : 0.0;
    char text[32];
    std::snprintf(text, sizeof(text), mb_per_s < 1 ? "%.3f" : "%.1f", mb_per_s);
    return std::string(text);
  };
  char line[224];
  std::snprintf(line, sizeof(line),
                "pulled %" PRIu64 " bytes in %.3f s (%s MB/s), pushed %" PRIu64
                " bytes in %.3f s (%s MB/s), answers %.3f s",
                t.pull_bytes, t.pull_seconds, rate(t.pull_bytes, t.pull_seconds).c_str(),
                t.push_bytes, t.push_seconds, rate(t.push_bytes, t.push_seconds).c_str(),
                t.push_answer_seconds);
  return line;
}

// ", wire: pull B bytes in S s, push B bytes in S s": the streams between two round lines; empty
// when there were none (an in-process link has no wire).
std::string round_transfer_note(const TransferTotals& now, const TransferTotals& before) {
  const double pull_s = now.pull_seconds - before.pull_seconds;
  const double push_s = now.push_seconds - before.push_seconds;
  if (pull_s <= 0 && push_s <= 0) return {};
  char note[160];
  std::snprintf(note, sizeof(note),
                ", wire: pull %" PRIu64 " bytes in %.3f s, push %" PRIu64 " bytes in %.3f s",
                now.pull_bytes - before.pull_bytes, pull_s, now.push_bytes - before.push_bytes,
                push_s);
  return note;
}

// Loss and tokens summed over inner steps, timed from t0; earlier_s: the seconds of steps tallied
// before t0 (a Streaming DiLoCo round's steps that overlapped the previous sync).
struct Tally {
  Clock::time_point t0;
  double loss_sum = 0;
  uint64_t tokens = 0;
  double earlier_s = 0;
  double seconds() const { return earlier_s + seconds_since(t0); }
};

enum class Next { kTrain, kAgain, kStop };  // what the loop does with a polled task
enum class Flow { kContinue, kStop };       // after a round

class SiteWorker {
 public:
  SiteWorker(CoordinatorClient& link, const SiteWorkerOptions& options)
      : link_(link),
        opt_(options),
        reconnect_(link, reconnect_options(options)),
        pulls_(link, transfer_reconnect_options(options)) {}
  Status run();

 private:
  void log(const std::string& line) const {
    if (opt_.log) opt_.log(line);
  }
  bool stopping() const { return opt_.stop != nullptr && opt_.stop->load(); }

  StatusOr<atoll_pb::v1::JoinResponse> join();
  Status set_up();
  Status serve();
  Status stopped_or(const Status& failure);
  StatusOr<Next> next_task(Task& cur);
  StatusOr<Next> poll_failed(const Status& failure);
  Status score(const Task& task);
  StatusOr<Flow> train_round(const Task& cur);
  StatusOr<bool> start_from_snapshot(const Task& cur);
  void snapshots_unavailable(const Status& why);
  void read_saved_states();
  void take_saved_state(uint64_t round);
  void save_to_disk(const RoundSnapshot& snapshot);
  StatusOr<uint32_t> train_steps(uint64_t round, uint64_t first_step, uint32_t from, uint32_t to,
                                 Tally& tally);
  StatusOr<Flow> sync_round(const Task& cur, const EncodedUpdate& update,
                            StatusOr<uint64_t>& sent);
  Status take_next_task(const Task& cur, StatusOr<Task>& task,
                        std::optional<StatusOr<PulledParams>>& pulled, uint32_t overlapped,
                        const Tally& overlap);
  // Takes a pulled θ as the one held (and counts its bytes).
  Status adopt(PulledParams& pulled);
  Status load_data();
  Status set_up_validation();
  std::optional<double> validation_bpb(const al::ParamSet& params);
  Status set_up_keep_best();
  void restore_kept();
  void offer_kept(const KeptSource& source, double site_val_bpb, const al::ParamSet& params);
  void finish_kept();
  void report_round(const Task& cur, uint32_t steps, double mean_loss, const Tally& tally,
                    double secs, uint64_t sent, std::optional<double> site_val_bpb);

  CoordinatorClient& link_;
  const SiteWorkerOptions& opt_;
  DeviceChoice devices_;
  DataSpec data_spec_;
  atoll_pb::v1::JoinResponse joined_;
  SiteConfig site_;
  std::shared_ptr<const SiteData> data_;
  // The model that evaluates θ on the site's validation data (null: none to evaluate on).
  std::unique_ptr<al::Llama> val_model_;
  // The frozen base of a LoRA experiment as [lora] base_dtype holds it (trainer and val_model_).
  std::shared_ptr<const al::FrozenBase> frozen_base_;
  std::unique_ptr<InnerStep> inner_;
  std::unique_ptr<SyncStrategy> sync_;
  std::string layout_fingerprint_;
  std::optional<HeldTheta> theta_;     // the global θ as last pulled
  std::optional<al::ParamSet> local_;  // the parameters this site trains
  std::unique_ptr<Heartbeater> heart_;
  std::unique_ptr<MetricsReporter> reporter_;
  uint64_t last_done_ = 0;
  bool have_done_ = false;
  Reconnect reconnect_;  // the backoff and the clock of an outage, shared by every call
  Reconnect pulls_;      // the same for θ pulls that fail while calls are answered
  Status paused_after_failed_pull(Clock::time_point began, const Status& failure);
  // Streaming DiLoCo: the next task, obtained by the exchange; whether θ and θ_local continue
  // from it (warm); the inner steps of that task already trained during the overlap.
  std::optional<Task> next_;
  bool warm_ = false;
  uint32_t pre_steps_ = 0;
  double pre_loss_ = 0;
  uint64_t pre_tokens_ = 0;
  double pre_seconds_ = 0;  // their wall seconds
  // Inner steps trained by this process and their wall seconds (train_steps), for the line at
  // the end of the run: compute utilization = seconds ÷ the run's wall time (bench/wan).
  uint64_t steps_trained_ = 0;
  double train_seconds_ = 0;
  // The transport's totals when the last round line was written: each line gives the wire
  // time of the pulls and pushes since the one before (bench/transport reads them per stream).
  TransferTotals transfers_at_last_round_;
  // Redoing a round bit for bit (node/round_snapshot.h): the state at the start of the round
  // this site works on, and with Streaming DiLoCo the state after its update (the start of the
  // next round, taken before the overlapped steps). Both are kept until the next task says
  // which one the coordinator's committed state continues.
  std::optional<RoundSnapshot> at_start_;
  std::optional<RoundSnapshot> after_;
  bool snapshots_ = true;  // false once the inner step said it cannot copy its state
  // --state-dir (node/round_state_file.h): whether snapshots are written there (false without
  // the flag, or once a write failed), the round of the last file written, and the states read
  // back at the start, used by the first round this process trains.
  bool on_disk_ = false;
  std::optional<uint64_t> last_written_;
  std::map<uint64_t, RoundSnapshot> read_back_;
  bool first_round_ = true;  // no round trained by this process yet
  // What this site ends with (node/kept_theta.h): the mode, the best θ so far, the checkpoint it
  // is saved to ("" = kept in memory only), and the STOP task that ended the experiment (whose
  // round's θ is the last candidate).
  KeepBest keep_ = KeepBest::kOff;
  BestTheta best_;
  std::string kept_path_;
  std::optional<Task> stop_;
};

// Join, retrying with backoff while the coordinator is unreachable.
StatusOr<atoll_pb::v1::JoinResponse> SiteWorker::join() {
  atoll_pb::v1::JoinRequest req;
  req.set_node_name(opt_.name);
  // The coordinator takes at most 64 characters here (a long --devices list is summarized).
  req.mutable_capabilities()->set_device(
      devices_.name.size() <= 64 ? devices_.name
                                 : std::to_string(devices_.cuda.size()) + " CUDA devices");
  req.mutable_capabilities()->set_threads(static_cast<uint32_t>(opt_.threads));
  for (const char* optimizer : {"adamw", "muon"}) req.mutable_capabilities()->add_optimizers(optimizer);
  req.set_budget(opt_.budget);
  req.set_client_version(build_label());
  req.mutable_data()->add_genres(data_spec_.to_string());
  // The coordinator refuses a site with fewer tokens than one of its sequences needs.
  req.mutable_data()->set_train_tokens(static_cast<uint64_t>(data_->train.size()));
  // Every site of an experiment must tokenize alike: the coordinator compares these.
  req.mutable_data()->set_tokenizer(data_->tokenizer->name());
  req.mutable_data()->set_tokenizer_sha256(
      sha256_hex(data_->tokenizer_blob.data(), data_->tokenizer_blob.size()));
  while (true) {
    auto r = link_.join(req);
    if (r.ok()) {
      reconnect_.reached();
      if (opt_.metrics) opt_.metrics->joined(r->experiment_id(), r->node_id());
      return r;
    }
    if (!retryable(r.status())) return r;
    // The experiment has its diloco.max_nodes: a site that never joined waits for a seat without
    // holding a connection (behind one address the sites waiting so took the places a member
    // needs to come back after a coordinator restart). Nothing else uses the link yet.
    // (RESOURCE_EXHAUSTED on the wire, which reaches here as UNAVAILABLE: told by its line.)
    if (!heart_ && r.status().message().find("already has diloco.max_nodes") != std::string::npos)
      link_.drop_connections();
    ATOLL_RETURN_IF_ERROR(reconnect_.pause(r.status()));
  }
}

// After the first join: the experiment's configs, the impossible combinations refused (one line,
// before anything is loaded), the site's data, the inner step and the sync strategy.
Status SiteWorker::set_up() {
  ATOLL_ASSIGN_OR_RETURN(site_, site_config_from_join(joined_));
  log("joined " + joined_.experiment_id() + " as " + joined_.node_id());
  InnerStepOptions step_options;
  step_options.devices = devices_;
  step_options.distill = opt_.distill;
  step_options.teacher_tls = opt_.teacher_tls;
  step_options.stop = opt_.stop;
  ATOLL_RETURN_IF_ERROR(check_base_model(opt_.base.get(), site_));
  if (site_.lora_enabled()) {
    frozen_base_ = opt_.base->frozen(site_.lora.base_storage, opt_.base_exclusive);
    step_options.lora_base = frozen_base_;
    log("fine-tuning LoRA adapters (r=" + std::to_string(site_.lora.rank) + " on " +
        al::lora_targets_csv(site_.lora) + ", " +
        std::to_string(al::count_lora_params(site_.lora, site_.model)) + " trainable) over base " +
        opt_.base->path + " (sha256 " + opt_.base->fingerprint.substr(0, 16) + "..., held in " +
        al::base_storage_name(site_.lora.base_storage) + ", " +
        format_bytes(static_cast<double>(frozen_base_->stored_bytes())) + ")");
  } else if (opt_.base) {
    log("--base " + opt_.base->path +
        ": its tokenizer reads this site's data; its parameters are not used (this experiment "
        "has no LoRA adapters: θ comes from the coordinator)");
  }
  if (!site_.hydra() && opt_.budget < 1.0) {
    log("--budget " + shortest_decimal(opt_.budget) +
        " is not used: only a Hydra experiment gives a site a subnetwork of its budget; this "
        "site trains the whole model");
  }
  ATOLL_RETURN_IF_ERROR(check_inner_step(site_, step_options));
  ATOLL_RETURN_IF_ERROR(check_sync_strategy(site_));

  if (data_->tokenizer->vocab_size() > site_.model.vocab)
    return InvalidArgument(
        "the site's tokenizer has " + std::to_string(data_->tokenizer->vocab_size()) +
        " ids but the experiment's model has vocab " + std::to_string(site_.model.vocab));
  if (Status s = check_fits_vocabulary(*data_, site_.model.vocab); !s.ok())
    return InvalidArgument("data " + data_spec_.to_string() + ": " + s.message());
  if (Status s = al::data::check_sampling(data_->train, site_.train.batch, site_.train.seq);
      !s.ok())
    return InvalidArgument("data " + data_spec_.to_string() + ": " + s.message() +
                           ": add documents");
  ATOLL_RETURN_IF_ERROR(set_up_validation());
  ATOLL_RETURN_IF_ERROR(set_up_keep_best());

  ATOLL_ASSIGN_OR_RETURN(inner_, make_inner_step(site_, step_options));
  if (const std::string line = inner_->describe(); !line.empty()) log(line);
  ATOLL_ASSIGN_OR_RETURN(sync_, make_sync_strategy(site_, *inner_));
  const auto layout = theta_layout(site_);
  layout_fingerprint_ = al::layout_fingerprint(layout);
  theta_.emplace(layout);
  local_.emplace(layout);
  return Status::Ok();
}

// The site's data, read and checked before it joins: a spec that cannot train never reaches
// the coordinator.
Status SiteWorker::load_data() {
  ATOLL_ASSIGN_OR_RETURN(data_spec_, parse_data_spec(opt_.data_spec));
  data_ = opt_.data;
  if (!data_) {
    SiteDataOptions o;
    o.train_spec = opt_.data_spec;
    o.holdout = opt_.holdout;
    o.val_spec = opt_.val_data_spec;
    o.brown_dir = opt_.brown_dir;
    if (opt_.base) o.tokenizer_blob = opt_.base->meta.tokenizer;
    ATOLL_ASSIGN_OR_RETURN(SiteData loaded, load_site_training_data(o));
    data_ = std::make_shared<const SiteData>(std::move(loaded));
  }
  std::string line = "data " + data_spec_.to_string() + ": " + std::to_string(data_->train.size()) +
                     " training tokens (tokenizer " + data_->tokenizer->name() + ")";
  if (data_->validation.size() > 0)
    line += ", " + std::to_string(data_->validation.size()) + " validation tokens (" +
            (opt_.val_data_spec.empty() ? std::string("held out") : opt_.val_data_spec) + ")";
  log(line);
  return Status::Ok();
}

// Validation needs one window of seq_len + 1 tokens. Data asked for with --val-data that is
// shorter is an error; a held-out part that happens to be shorter is skipped with a line.
Status SiteWorker::set_up_validation() {
  const int64_t window = int64_t{site_.train.seq} + 1;
  if (data_->validation.size() == 0) return Status::Ok();
  if (data_->validation.size() < window) {
    const std::string what = std::to_string(data_->validation.size()) +
                             " validation tokens, fewer than one window of seq_len + 1 = " +
                             std::to_string(window);
    if (!opt_.val_data_spec.empty())
      return InvalidArgument("--val-data " + opt_.val_data_spec + " holds " + what +
                             ": add documents");
    log("not evaluating the held-out part: " + what);
    return Status::Ok();
  }
  val_model_ = std::make_unique<al::Llama>(site_.model);
  if (site_.lora_enabled()) val_model_->attach_lora(site_.lora, frozen_base_);
  return Status::Ok();
}

// Bits per byte of `params` (θ or θ_local) on the site's validation data (none without).
std::optional<double> SiteWorker::validation_bpb(const al::ParamSet& params) {
  if (!val_model_) return std::nullopt;
  constexpr int kRowsPerPass = 8;
  return evaluate_bpb(*val_model_, params, data_->validation, *data_->tokenizer, site_.train.seq,
                      kRowsPerPass, opt_.val_tokens)
      .bpb;
}

// What the site keeps: kAuto resolved against its validation data; a mode asked for explicitly
// without validation data is refused before any training.
Status SiteWorker::set_up_keep_best() {
  // Hydra's subnetworks and LoRA's adapters fine-tune a base model: there the default keeps.
  const bool fine_tuning = site_.hydra() || site_.lora_enabled();
  keep_ = resolve_keep_best(opt_.keep_best, val_model_ != nullptr, fine_tuning);
  if (keep_ == KeepBest::kOff) return Status::Ok();
  if (!val_model_)
    return InvalidArgument(std::string("--keep-best ") + keep_best_name(keep_) +
                           " needs validation data of the site's own to choose with: give "
                           "--val-split held-out or --val-data, or --keep-best off");
  if (!opt_.state_dir.empty())
    kept_path_ = (std::filesystem::path(opt_.state_dir) / "kept.safetensors").string();
  log(std::string("keeping the best θ on the site's validation data: the global θ of every "
                  "round") +
      (keep_ == KeepBest::kPersonal ? " and its own θ_local" : "") +
      (kept_path_.empty() ? "" : " (saved in " + kept_path_ + ")"));
  return Status::Ok();
}

// A restarted node goes on from the θ it kept before (--state-dir). A file of another node or
// experiment is left alone: the site then keeps its θ in memory only.
void SiteWorker::restore_kept() {
  if (kept_path_.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(opt_.state_dir, ec);
  auto loaded =
      load_kept_theta(kept_path_, joined_.experiment_id(), joined_.node_id(), local_->numel());
  if (!loaded.ok()) {
    log("not resuming the kept θ (keeping it in memory only): " + loaded.status().message());
    kept_path_.clear();
    return;
  }
  if (!*loaded) return;
  char line[160];
  std::snprintf(line, sizeof(line), ", site val %.6f bpb", (*loaded)->site_val_bpb);
  log("kept θ read back from " + kept_path_ + ": " + (*loaded)->source.describe() + line);
  best_.restore(std::move(**loaded));
}

// A candidate θ; when it becomes the kept one, its checkpoint is rewritten (a failed write is one
// line, and the site goes on keeping it in memory).
void SiteWorker::offer_kept(const KeptSource& source, double site_val_bpb,
                            const al::ParamSet& params) {
  if (!best_.offer(source, site_val_bpb, params.vec()) || kept_path_.empty()) return;
  CheckpointMeta meta;
  meta.model = site_.model;
  meta.seed = site_.seed;
  meta.tokenizer = data_->tokenizer_blob;
  meta.experiment = joined_.experiment_id();
  if (site_.lora_enabled()) {
    meta.lora = site_.lora;
    carry_base_meta(opt_.base->meta, meta);
  }
  // A bf16-held base is written widened (exactly its bf16 values), a transient fp32 copy.
  const std::shared_ptr<const al::ParamSet> lora_base =
      site_.lora_enabled() ? opt_.base->fp32() : nullptr;
  if (Status s = save_kept_theta(kept_path_, meta, joined_.node_id(), *best_.kept(),
                                 theta_layout(site_), lora_base.get());
      !s.ok()) {
    log("not writing the kept θ to " + kept_path_ + " any more: " + s.message());
    kept_path_.clear();
  }
}

// After the last round: the final global θ is the last candidate (pulled once more), then the
// site says what it kept.
void SiteWorker::finish_kept() {
  if (keep_ == KeepBest::kOff || !stop_) return;
  auto pulled = theta_->pull(link_, *stop_);
  if (!pulled.ok()) {
    log("the final θ is not a candidate to keep: its pull failed: " + pulled.status().message());
  } else if (Status s = adopt(*pulled); !s.ok()) {
    log("the final θ is not a candidate to keep: " + s.message());
  } else if (auto bpb = validation_bpb(theta_->params())) {
    offer_kept({KeptSource::Kind::kGlobal, stop_->round()}, *bpb, theta_->params());
  }
  if (!best_.kept()) return;
  const KeptTheta& kept = *best_.kept();
  char line[96];
  std::snprintf(line, sizeof(line), ", site val %.6f bpb, sha256 ", kept.site_val_bpb);
  log("kept " + kept.source.describe() + line +
      sha256_hex(kept.params.data(), kept.params.size() * sizeof(float)) +
      (kept_path_.empty() ? "" : " in " + kept_path_));
  if (opt_.on_kept) opt_.on_kept(kept);
}

Status SiteWorker::run() {
  ATOLL_ASSIGN_OR_RETURN(devices_, resolve_devices(opt_.device, opt_.devices));
  ATOLL_RETURN_IF_ERROR(load_data());
  auto joined = join();
  if (!joined.ok()) return stopped_or(joined.status());
  joined_ = std::move(joined).value();
  if (Status s = set_up(); !s.ok()) {
    // Refused before any training (wrong base, impossible combination): leave at once, so the
    // coordinator does not wait for this node's updates.
    (void)link_.leave(s.message());
    return s;
  }
  read_saved_states();
  restore_kept();
  heart_ = std::make_unique<Heartbeater>(
      link_, std::chrono::milliseconds(std::max<uint32_t>(100, joined_.heartbeat_interval_ms())));
  reporter_ = std::make_unique<MetricsReporter>(link_);
  if (Status s = serve(); !s.ok()) return stopped_or(s);
  char line[128];
  std::snprintf(line, sizeof(line), "trained %" PRIu64 " inner steps in %.3f s", steps_trained_,
                train_seconds_);
  log(line);
  if (stopping())
    log("stopped on request; leaving the experiment");
  else
    finish_kept();
  if (const TransferTotals t = link_.transfer_totals(); t.pull_seconds > 0 || t.push_seconds > 0)
    log(transfer_line(t));
  // The last rounds' metrics reach the coordinator before the node leaves (a stop request
  // waits less for them).
  const bool flushed = reporter_->flush(stopping() ? kFlushOnStop : kFlushAtEnd);
  if (const uint64_t dropped = reporter_->dropped(); dropped > 0 || !flushed)
    log("some rounds' metrics were not reported: " + std::to_string(dropped) +
        " dropped while the coordinator was out of reach" +
        (flushed ? std::string() : ", the last ones not sent in time"));
  (void)link_.leave(stopping() ? "stop requested" : "experiment finished");
  return Status::Ok();
}

// A θ pull that failed: the pause before the next try (logged by it, an unchanged failure at
// most every 10 s), or, after --give-up-after seconds without a pull, the end with a Leave: the
// node's calls are answered, so the coordinator hears that it goes and stops waiting for its
// updates at once rather than at the round's deadline. A pull that ran kPullMadeProgressS or
// more before it failed moved θ for that long (fast failures are refusals): it restarts the
// clock, so a slow link whose long pulls are cut now and then is not given up on.
Status SiteWorker::paused_after_failed_pull(Clock::time_point began, const Status& failure) {
  constexpr double kPullMadeProgressS = 5;
  if (std::chrono::duration<double>(Clock::now() - began).count() >= kPullMadeProgressS)
    pulls_.reached();
  const Status paused = pulls_.pause(failure);
  if (stopping() || paused.ok()) return Status::Ok();
  (void)link_.leave("gave up: " + paused.message());
  return paused;
}

// Tasks until a STOP task or a stop request.
Status SiteWorker::serve() {
  while (!stopping()) {
    Task cur;
    ATOLL_ASSIGN_OR_RETURN(const Next next, next_task(cur));
    if (next == Next::kStop) break;
    if (next == Next::kAgain) continue;
    ATOLL_ASSIGN_OR_RETURN(const Flow flow, train_round(cur));
    if (flow == Flow::kStop) break;
  }
  return Status::Ok();
}

// A stop request that came while the coordinator was unreachable ends the node cleanly, at once
// and without Leave (which could not reach it either): the coordinator counts the node as lost
// by its missed heartbeats. Any other failure stays one.
Status SiteWorker::stopped_or(const Status& failure) {
  if (!stopping() || !retryable(failure)) return failure;
  char line[200];
  std::snprintf(line, sizeof(line),
                "stopped on request while the coordinator at %s was unreachable (for %.1f s); "
                "exiting without Leave",
                opt_.coordinator.c_str(), reconnect_.unreachable_s());
  log(line);
  return Status::Ok();
}

// The task to train next into `cur`: the one the last exchange brought, or a polled one. SCORE
// tasks are answered here.
StatusOr<Next> SiteWorker::next_task(Task& cur) {
  if (next_) {
    cur = std::move(*next_);
    next_.reset();
    if (cur.kind() == Task::STOP) {
      stop_ = cur;
      log("stop: " + cur.reason());
      return Next::kStop;
    }
    return Next::kTrain;
  }
  warm_ = false;
  if (heart_->unknown()) {
    log("the coordinator no longer knows this node; joining again");
    const std::string was = joined_.experiment_id();
    ATOLL_ASSIGN_OR_RETURN(joined_, join());
    ATOLL_RETURN_IF_ERROR(same_experiment(was, joined_));
    heart_->clear_unknown();
  }
  auto task = link_.next_task(have_done_ ? last_done_ : 0, 2000);
  if (!task.ok()) return poll_failed(task.status());
  reconnect_.reached();
  if (task->kind() == Task::STOP) {
    stop_ = *task;
    log("stop: " + task->reason());
    return Next::kStop;
  }
  if (task->kind() == Task::SCORE && sync_->scores()) {
    ATOLL_RETURN_IF_ERROR(score(*task));
    return Next::kAgain;
  }
  if (task->kind() != Task::TRAIN) return Next::kAgain;
  cur = std::move(*task);
  return Next::kTrain;
}

// A failed poll. Unreachable coordinator: pause (backoff, give-up, stop: node/reconnect.h),
// then join again, since a restarted coordinator no longer knows this node. A coordinator that
// answered but no longer knows the node or its experiment: join again at once.
StatusOr<Next> SiteWorker::poll_failed(const Status& failure) {
  const bool forgotten =
      failure.code() == StatusCode::kNotFound || failure.code() == StatusCode::kFailedPrecondition;
  if (!retryable(failure) && !forgotten) return failure;
  if (forgotten) {
    log(failure.message() + "; joining again");
  } else {
    ATOLL_RETURN_IF_ERROR(reconnect_.pause(failure));
  }
  ATOLL_ASSIGN_OR_RETURN(const auto re, join());
  ATOLL_RETURN_IF_ERROR(same_experiment(joined_.experiment_id(), re));
  heart_->clear_unknown();  // joined just now: a heartbeat's "unknown" from before is stale
  return Next::kAgain;
}

Status SiteWorker::adopt(PulledParams& pulled) {
  const uint64_t bytes = pulled.bytes;
  ATOLL_RETURN_IF_ERROR(theta_->adopt(pulled));
  if (opt_.metrics) {
    opt_.metrics->pulled(bytes);
    const TransferTotals t = link_.transfer_totals();
    opt_.metrics->transfer_seconds(t.pull_seconds, t.push_seconds);
  }
  return Status::Ok();
}

// Hydra's SCORE task: importance of θ_r on this site's data; scores only leave the site.
Status SiteWorker::score(const Task& task) {
  if (!theta_->holds(task.params_fingerprint())) {
    const auto began = Clock::now();
    auto pulled = theta_->pull(link_, task);
    if (!pulled.ok()) {
      if (superseded(pulled.status())) return pulled.status();
      return paused_after_failed_pull(
          began,
          Status(pulled.status().code(), "pull for scoring failed: " + pulled.status().message()));
    }
    pulls_.reached();
    ATOLL_RETURN_IF_ERROR(adopt(*pulled));
  }
  ATOLL_ASSIGN_OR_RETURN(const auto report,
                         sync_->score(task, theta_->params(), data_->train, site_.seed));
  Status st = link_.report_importance(report);
  log(st.ok() ? "round " + std::to_string(task.round()) + ": importance reported"
              : "importance report refused: " + st.message());
  return Status::Ok();
}

// One TRAIN task: θ (pulled unless the exchange continued), H inner steps, the update, the
// exchange, the report.
StatusOr<Flow> SiteWorker::train_round(const Task& cur) {
  const uint64_t round = cur.round();
  if (!warm_) {
    if (!theta_->holds(cur.params_fingerprint())) {
      const auto began = Clock::now();
      auto pulled = theta_->pull(link_, cur);
      if (!pulled.ok()) {
        if (superseded(pulled.status())) return pulled.status();
        ATOLL_RETURN_IF_ERROR(paused_after_failed_pull(
            began, Status(pulled.status().code(), "pull of round " + std::to_string(round) +
                                                      " failed: " + pulled.status().message())));
        return stopping() ? Flow::kStop : Flow::kContinue;
      }
      pulls_.reached();
      ATOLL_RETURN_IF_ERROR(adopt(*pulled));
    }
    // States read back from --state-dir say for themselves what the first round starts from
    // (take_saved_state); without any, a process that starts past round 0 (restarted without
    // its files, or joining late) trains from a fresh optimizer state, and says so.
    if (first_round_ && round > 0 && read_back_.empty())
      log("round " + std::to_string(round) +
          ": no saved round state (--state-dir) to continue from (a first join after round 0, "
          "or a restart without its files): training from a fresh optimizer state; after a "
          "restart, later rounds differ from a run without it");
    first_round_ = false;
    ATOLL_ASSIGN_OR_RETURN(const bool resumed, start_from_snapshot(cur));
    if (!resumed) {
      const al::ParamSet& theta = theta_->params();
      std::copy(theta.data(), theta.data() + theta.numel(), local_->data());
      pre_steps_ = 0;
      pre_loss_ = 0;
      pre_tokens_ = 0;
      pre_seconds_ = 0;
    }
  }
  const std::optional<double> site_val_bpb = validation_bpb(theta_->params());
  if (site_val_bpb && keep_ != KeepBest::kOff)
    offer_kept({KeptSource::Kind::kGlobal, round}, *site_val_bpb, theta_->params());
  ATOLL_RETURN_IF_ERROR(sync_->plan(cur));
  Tally tally{Clock::now(), pre_loss_, pre_tokens_, pre_seconds_};
  const uint32_t H = cur.inner_steps();
  ATOLL_ASSIGN_OR_RETURN(const uint32_t done_steps,
                         train_steps(round, cur.global_step(), std::min(pre_steps_, H), H, tally));
  if (stopping()) return Flow::kStop;
  const double secs = tally.seconds();
  const double mean_loss = tally.loss_sum / std::max<uint32_t>(done_steps, 1);
  if (!std::isfinite(mean_loss))
    return Internal("inner training diverged in round " + std::to_string(round) +
                    " (loss is not finite): lower the experiment's lr");

  if (keep_ == KeepBest::kPersonal)
    if (const std::optional<double> own = validation_bpb(*local_))
      offer_kept({KeptSource::Kind::kPersonal, round}, *own, *local_);
  ATOLL_ASSIGN_OR_RETURN(EncodedUpdate update, sync_->make_update(theta_->params(), *local_));
  update.header.round = round;
  update.header.tokens = tally.tokens;
  update.header.train_loss = mean_loss;
  update.header.base_fingerprint = theta_->fingerprint();
  update.header.layout_fingerprint = layout_fingerprint_;
  StatusOr<uint64_t> sent = uint64_t{0};
  ATOLL_ASSIGN_OR_RETURN(const Flow flow, sync_round(cur, update, sent));
  if (flow == Flow::kStop) return Flow::kStop;
  if (!sent.ok()) {
    if (superseded(sent.status())) return sent.status();
    // UNAVAILABLE: the coordinator could not be reached, nothing refused the update (or its
    // answer never came: then it may have arrived, and the line says so).
    const bool unanswered =
        sent.status().message().find("no answer to PushUpdate") != std::string::npos;
    log("update for round " + std::to_string(round) +
        (unanswered                                         ? " sent, unanswered: "
         : sent.status().code() == StatusCode::kUnavailable ? " not delivered: "
                                                            : " refused: ") +
        sent.status().message());
    next_.reset();
    return Flow::kContinue;
  }
  last_done_ = round;
  have_done_ = true;
  report_round(cur, done_steps, mean_loss, tally, secs, *sent, site_val_bpb);
  return Flow::kContinue;
}

// The state a round that does not continue the previous exchange starts from. A snapshot of this
// very round means an earlier attempt at it was thrown away (the coordinator restarted the round
// after a crash or for lack of quorum): it is put back, and a streaming snapshot's overlapped
// steps and merge are trained again; returns true then, with θ_local set. Otherwise the live
// state is the state after the last committed round, and it is saved as this round's start.
StatusOr<bool> SiteWorker::start_from_snapshot(const Task& cur) {
  if (!snapshots_) return false;
  const uint64_t round = cur.round();
  const bool from_disk = !read_back_.empty();
  if (from_disk) take_saved_state(round);
  if (after_ && after_->round == round) at_start_ = std::move(after_);
  after_.reset();
  if (!at_start_ || at_start_->round != round) {
    auto snap = take_round_snapshot(round, *inner_, *sync_, nullptr, 0);
    if (!snap.ok()) {
      snapshots_unavailable(snap.status());
      return false;
    }
    at_start_ = std::move(snap).value();
    if (last_written_ != round) save_to_disk(*at_start_);
    return false;
  }
  if (!from_disk)
    log("round " + std::to_string(round) +
        " was not committed: redoing it from the state saved at its start");
  ATOLL_RETURN_IF_ERROR(restore_round_snapshot(*at_start_, *inner_, *sync_, *local_));
  if (!at_start_->local) return false;
  // Streaming DiLoCo: θ_local is the previous round's; its overlapped steps, then the merge of
  // the synced fragment of θ_r, exactly as in the first attempt.
  Tally overlap{Clock::now()};
  ATOLL_ASSIGN_OR_RETURN(const uint32_t trained, train_steps(round, cur.global_step(), 0,
                                                             at_start_->overlap_steps, overlap));
  sync_->merge(*local_, theta_->params());
  pre_steps_ = trained;
  pre_loss_ = overlap.loss_sum;
  pre_tokens_ = overlap.tokens;
  pre_seconds_ = overlap.seconds();
  return true;
}

void SiteWorker::snapshots_unavailable(const Status& why) {
  snapshots_ = false;
  on_disk_ = false;
  at_start_.reset();
  after_.reset();
  read_back_.clear();
  log("a round interrupted by a crash will be redone from the advanced optimizer state, not bit "
      "for bit: " +
      why.message());
}

// --state-dir: the states a previous process of this node wrote, read once after set_up. A
// directory that cannot be created or read is one line; the node then trains on without it.
void SiteWorker::read_saved_states() {
  if (opt_.state_dir.empty() || !snapshots_) return;
  std::error_code ec;
  std::filesystem::create_directories(opt_.state_dir, ec);
  if (ec) {
    log("not writing round states: cannot create --state-dir " + opt_.state_dir + ": " +
        ec.message());
    return;
  }
  const RoundStateOwner owner{joined_.experiment_id(), joined_.node_id(), layout_fingerprint_};
  auto states = read_round_states(opt_.state_dir, owner, local_->numel(), *inner_, *sync_);
  if (!states.ok()) {
    log("not resuming from saved round states: " + states.status().message());
  } else {
    read_back_ = std::move(states).value();
    // One line: the rounds before the coordinator's current one are already committed and are
    // not resumed (take_saved_state says which round is).
    if (!read_back_.empty())
      log("saved start states of rounds " + std::to_string(read_back_.begin()->first) + ".." +
          std::to_string(read_back_.rbegin()->first) + " in " + opt_.state_dir +
          "; the round the coordinator is at resumes from its own");
  }
  on_disk_ = true;
}

// The first round this process starts: the state read back for it becomes the round's start
// (restored by start_from_snapshot); without one the node trains on from a fresh optimizer
// state, and says so.
void SiteWorker::take_saved_state(uint64_t round) {
  auto it = read_back_.find(round);
  if (it != read_back_.end()) {
    log("round " + std::to_string(round) + ": resuming from the state saved in " + opt_.state_dir +
        " before this process started");
    at_start_ = std::move(it->second);
    after_.reset();
  } else {
    log("no saved state for round " + std::to_string(round) + " in " + opt_.state_dir +
        " (its rounds: " + std::to_string(read_back_.begin()->first) + ".." +
        std::to_string(read_back_.rbegin()->first) +
        "): training on from a fresh optimizer state, not bit for bit");
  }
  read_back_.clear();
}

// Writes a round's start state to --state-dir. A failed write (a full disk, a step whose state
// is not encoded) is one line, and the node goes on without writing: training matters more.
void SiteWorker::save_to_disk(const RoundSnapshot& snapshot) {
  if (!on_disk_) return;
  const RoundStateOwner owner{joined_.experiment_id(), joined_.node_id(), layout_fingerprint_};
  if (Status s = write_round_state(opt_.state_dir, owner, snapshot, *inner_, *sync_); !s.ok()) {
    on_disk_ = false;
    log("not writing round states to " + opt_.state_dir +
        " any more (a restarted node will train on from a fresh optimizer state): " + s.message());
    return;
  }
  last_written_ = snapshot.round;
}

// Inner steps k ∈ [from, to) of a round whose step k = 0 is global step `first_step`, reported
// to the heartbeat as round `round`. Returns where it stopped: `to`, or earlier on a stop
// request.
StatusOr<uint32_t> SiteWorker::train_steps(uint64_t round, uint64_t first_step, uint32_t from,
                                           uint32_t to, Tally& tally) {
  if (from >= to) return from;
  const uint64_t total_steps = site_.spec.total_inner_steps();
  const int B = site_.train.batch, T = site_.train.seq;
  const auto t_begin = Clock::now();
  ATOLL_RETURN_IF_ERROR(inner_->begin(*local_));  // one copy of θ each way per run of steps
  uint32_t k = from;
  for (; k < to && !stopping(); ++k) {
    const int64_t step = static_cast<int64_t>(first_step) + k;
    const auto batch = al::data::sample_global_batch(data_->train, site_.seed, step, B, T);
    // The batch of step + 1 too, for a step that prepares it while this one trains.
    std::optional<al::data::GlobalBatch> after;
    if (inner_->wants_next_batch() && static_cast<uint64_t>(step) + 1 < total_steps)
      after = al::data::sample_global_batch(data_->train, site_.seed, step + 1, B, T);
    ATOLL_ASSIGN_OR_RETURN(const al::StepStats st,
                           inner_->step(*local_, batch, after ? &*after : nullptr, step));
    tally.loss_sum += st.loss;
    tally.tokens += static_cast<uint64_t>(st.tokens);
    if (opt_.metrics) opt_.metrics->inner_step(round, st.loss, static_cast<uint64_t>(st.tokens));
    const double secs = tally.seconds();
    heart_->progress(round, k + 1, st.loss, secs > 0 ? tally.tokens / secs : 0);
  }
  ATOLL_RETURN_IF_ERROR(inner_->end(*local_));
  const double run_s = seconds_since(t_begin);
  steps_trained_ += k - from;
  train_seconds_ += run_s;
  if (opt_.metrics) opt_.metrics->trained(run_s);
  return k;
}

// The exchange of `update`, overlapped (Streaming DiLoCo) with the first τ inner steps of the
// next round, if there is one: deterministic, since the merge always happens after exactly these.
StatusOr<Flow> SiteWorker::sync_round(const Task& cur, const EncodedUpdate& update,
                                      StatusOr<uint64_t>& sent) {
  const uint64_t round = cur.round();
  const uint32_t H = cur.inner_steps();
  const uint64_t next_step = (round + 1) * uint64_t{H};
  const uint64_t total_steps = site_.spec.total_inner_steps();
  uint32_t overlap = std::min(sync_->overlap_steps(), H);
  if (next_step >= total_steps)
    overlap = 0;
  else
    overlap = static_cast<uint32_t>(std::min<uint64_t>(overlap, total_steps - next_step));
  if (snapshots_ && (site_.streaming() || on_disk_)) {
    // The next round starts here, before this one is known to be committed: with Streaming
    // DiLoCo it is kept (the overlapped steps come next); with --state-dir it is written before
    // the update leaves, so a process that dies once the coordinator has it can start round
    // r + 1 from it.
    const bool streaming = site_.streaming();
    auto snap = take_round_snapshot(round + 1, *inner_, *sync_, streaming ? &*local_ : nullptr,
                                    streaming ? overlap : 0);
    if (snap.ok()) {
      save_to_disk(*snap);
      if (streaming) after_ = std::move(snap).value();
    } else {
      snapshots_unavailable(snap.status());
    }
  }
  auto exchange = sync_->exchange(link_, update, *theta_, round, opt_.stop);
  Tally next{Clock::now()};  // the next round's first steps
  ATOLL_ASSIGN_OR_RETURN(const uint32_t overlapped,
                         train_steps(round + 1, next_step, 0, overlap, next));
  next.earlier_s = next.seconds();  // the overlapped steps' seconds, without the wait below
  next.t0 = Clock::now();
  const double overlap_s = next.earlier_s;
  const auto t_wait = Clock::now();
  ExchangeResult x = exchange.get();
  const double wait_s = seconds_since(t_wait);
  if (site_.streaming() && stopping()) return Flow::kStop;
  sent = std::move(x.sent);
  if (sent.ok() && x.next_task)
    ATOLL_RETURN_IF_ERROR(take_next_task(cur, *x.next_task, x.pulled, overlapped, next));
  if (overlapped > 0 && sent.ok()) {
    char line[200];
    std::snprintf(line, sizeof(line),
                  "round %" PRIu64 ": %u inner steps overlapped the sync (%.2f s), then %.3f s "
                  "waiting for it",
                  round, overlapped, overlap_s, wait_s);
    log(line);
  }
  return Flow::kContinue;
}

// Streaming DiLoCo: the task the exchange brought after `cur`. When it continues `cur` (the next
// round, same H), the synced fragment is merged and its overlapped steps count for it; otherwise
// it restarts from the global θ.
Status SiteWorker::take_next_task(const Task& cur, StatusOr<Task>& task,
                                  std::optional<StatusOr<PulledParams>>& pulled,
                                  uint32_t overlapped, const Tally& overlap) {
  const uint64_t round = cur.round();
  if (!task.ok()) {
    log("next task after round " + std::to_string(round) + " failed: " + task.status().message());
    return Status::Ok();
  }
  if (task->kind() == Task::STOP) {
    next_ = std::move(*task);  // handled as a fresh task: logs and stops
    warm_ = false;
    return Status::Ok();
  }
  if (task->kind() != Task::TRAIN) return Status::Ok();
  bool ok = true;
  if (pulled) {
    if (!pulled->ok()) {
      log("pull of round " + std::to_string(task->round()) +
          " failed: " + pulled->status().message());
      ok = false;
    } else {
      ATOLL_RETURN_IF_ERROR(adopt(**pulled));
    }
  }
  const uint32_t H = cur.inner_steps();
  const bool continues = ok && task->round() == round + 1 &&
                         task->global_step() == (round + 1) * uint64_t{H} &&
                         task->inner_steps() == H;
  if (continues) {
    // Round `round` is committed: the next one starts from the state saved before its overlap.
    if (after_ && after_->round == task->round()) at_start_ = std::move(after_);
    after_.reset();
    sync_->merge(*local_, theta_->params());
    pre_steps_ = overlapped;
    pre_loss_ = overlap.loss_sum;
    pre_tokens_ = overlap.tokens;
    pre_seconds_ = overlap.earlier_s;
  } else if (ok) {
    log("round " + std::to_string(task->round()) + " does not follow round " +
        std::to_string(round) + ": starting it afresh");
  }
  next_ = std::move(*task);
  warm_ = continues;
  return Status::Ok();
}

void SiteWorker::report_round(const Task& cur, uint32_t steps, double mean_loss, const Tally& tally,
                              double secs, uint64_t sent, std::optional<double> site_val_bpb) {
  const double tokens_per_s = secs > 0 ? tally.tokens / secs : 0.0;
  char line[256];
  std::snprintf(line, sizeof(line),
                "round %" PRIu64 ": %u steps, loss %.4f, %.0f tok/s, sent %" PRIu64 " bytes",
                cur.round(), steps, mean_loss, tokens_per_s, sent);
  char val[64] = "";
  if (site_val_bpb) std::snprintf(val, sizeof(val), ", site val %.4f bpb", *site_val_bpb);
  const TransferTotals transfers = link_.transfer_totals();
  log(line + std::string(val) + inner_->round_note() +
      round_transfer_note(transfers, transfers_at_last_round_));
  transfers_at_last_round_ = transfers;
  std::vector<std::pair<std::string, double>> metrics = {{"loss", mean_loss},
                                                         {"tokens_per_s", tokens_per_s},
                                                         {"bytes_up", static_cast<double>(sent)},
                                                         {"round_seconds", secs}};
  if (site_val_bpb) metrics.emplace_back("site_val_bpb", *site_val_bpb);
  for (auto& m : inner_->round_metrics()) metrics.push_back(std::move(m));
  if (opt_.metrics) {
    opt_.metrics->pushed(sent);
    opt_.metrics->transfer_seconds(transfers.pull_seconds, transfers.push_seconds);
    opt_.metrics->round_done(secs, site_val_bpb);
  }
  // Sent from the reporter's thread: a round trip per round would stall training on a slow link.
  reporter_->report(cur.round(), cur.global_step() + cur.inner_steps(), std::move(metrics));
}

}  // namespace

Status run_site_worker(CoordinatorClient& link, const SiteWorkerOptions& options) {
  SiteWorker worker(link, options);
  return worker.run();
}

}  // namespace atl::node
