// Coordinator state in RocksDB, with the large float arrays in files beside it. Nothing
// committed is ever lost: a round first writes (and syncs) the files of θ_{r+1}, the outer
// momentum and the error feedback, then commits their names, the round record and the
// experiment's current-round pointer in ONE WriteBatch with a synced write, so after a crash
// the store shows all of round r or none of it (files no batch names are removed at open).
//
// Column families and keys (<exp> = experiment id, <r> = round as 16 hex digits so keys sort
// by round):
//   experiments  <exp>                  JSON ExperimentRecord (state, current round, fingerprints)
//   nodes        <exp>/<node>           JSON NodeRecord
//   rounds       <exp>/<r>              JSON RoundRecord of the committed round r
//   params       <exp>/<r>              blob: θ at the START of round r (θ_0 = initial params)
//   outer_state  <exp>                  blob: outer Nesterov momentum after the last commit
//                <exp>/feedback         blob: the broadcast's error feedback after the last
//                                       commit (diloco.pull_codec names a codec)
//                <exp>/update/<r>       codec message of round r's compressed outer update
//                                       (θ_r → θ_{r+1}), kept while θ_r is
//                <exp>/replay           SHA-256 (32 bytes) | the replay-detection memory after
//                                       the last commit (coordinator/update_screening.h)
//                <exp>/strategy         SHA-256 (32 bytes) | what the round strategy's later
//                                       rounds depend on after the last commit (Hydra: the
//                                       latest selection; RoundStrategy::committed_state)
//   metrics      <exp>/<node>/<r>/<seq> JSON metrics reported by a node
//   audit        <exp>/<unix_ms>/<seq>  JSON audit event (joins, rejections, lifecycle)
//   tokens       <sha256 hex of token>  JSON TokenRecord (dashboard/API tokens; never the token)
// A blob value is "ATF1" | file name: the file blobs/e-<exp>/<kind>-<r> under the store's
// directory (kind params, momentum or feedback; <r> the round it belongs to), laid out as
// blob_file.h says. Stores written before the files existed hold the blob itself in the value
// ("ATB1" | numel | SHA-256 | data); both are read.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/core/status.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
class Status;
class WriteBatch;
}  // namespace rocksdb

namespace atl::coordinator {

enum class ExperimentState { kCreated, kRunning, kPaused, kFinished, kFailed };
const char* experiment_state_name(ExperimentState s);  // "created", "running", ...
StatusOr<ExperimentState> parse_experiment_state(const std::string& s);

// The tokenizer every site of an experiment reads with (DataProfile): a name for messages and the
// SHA-256 of its serialized form; `source` says where the coordinator has it from.
struct SiteTokenizer {
  std::string name;
  std::string sha256;
  std::string source;
};

struct ExperimentRecord {
  std::string id;  // [A-Za-z0-9._-]{1,64}
  ExperimentState state = ExperimentState::kCreated;
  uint64_t current_round = 0;      // θ_current is the parameters at the start of this round
  std::string params_fingerprint;  // SHA-256 hex of θ_current
  std::string layout_fingerprint;  // SHA-256 hex of the parameter layout
  uint64_t numel = 0;              // fp32 elements of θ
  std::string config_toml;         // the experiment config, as given at creation
  uint64_t created_unix_ms = 0;
  std::string failure;  // why, when state == kFailed
  // The sites' tokenizer once the launch or the first site set it; kept so that a restarted
  // coordinator goes on refusing sites that tokenize otherwise. Unset: not known yet.
  std::optional<SiteTokenizer> site_tokenizer;
  // The differential privacy noise's Philox key with [privacy] noise_key = "secret": drawn at
  // random at creation, kept here only (the store is 0600; the API and checkpoints never carry
  // it). 0 = none: the noise is keyed by the experiment seed.
  uint64_t privacy_noise_key = 0;
};

struct ParticipantRecord {
  std::string node_id;
  bool pushed = false;  // false: assigned but its update did not arrive before the close
  uint64_t tokens = 0;
  double loss = 0.0;        // mean inner training loss over the round
  uint64_t bytes_up = 0;    // update payload bytes received
  uint64_t bytes_down = 0;  // θ payload bytes sent for this round
  // Screening (docs/coordinator.md): the L2 norm of Δ as received, and what the commit did with
  // it: "kept", "clipped" (scaled to the round's limit), "dropped" (left out of the aggregate);
  // "" when the node did not push.
  double norm = 0.0;
  std::string screen = "";
  // For "clipped" and "dropped": which check acted, "norm", "replay", "stale", "privacy" or
  // "nonfinite" (update_screening.h); "" otherwise.
  std::string screen_reason = "";
};

struct RoundRecord {
  uint64_t round = 0;
  std::vector<ParticipantRecord> participants;  // sorted by node id
  uint64_t tokens = 0;                          // Σ tokens of accepted updates
  double mean_loss = 0.0;  // token-weighted mean of the accepted updates' losses
  uint64_t bytes_up = 0;
  uint64_t bytes_down = 0;
  // θ bytes whose pull ended after its own round had closed (a slow node's pull outliving its
  // round), or that went to a node outside the round, counted in the round open when they
  // arrived (or the next one to close); per node id. No bytes_down holds them. Records written
  // before this field have none.
  std::map<std::string, uint64_t> late_bytes_down;
  double duration_s = 0.0;           // round start to its close (the commit follows)
  std::string base_fingerprint;      // θ_r
  std::string params_fingerprint;    // θ_{r+1}
  std::string momentum_fingerprint;  // momentum after this round's outer step
  uint64_t committed_unix_ms = 0;
  // Screening and aggregation: the aggregator (robust.aggregator), the lower median of the
  // pushed updates' norms, the limit they were screened against (+inf, stored as null, when off),
  // and whether no update was applied (θ_{r+1} = θ_r, momentum unchanged).
  std::string aggregator = "mean";
  double median_norm = 0.0;
  double norm_limit = 0.0;
  bool skipped = false;
  // Differential privacy ([privacy]): ε spent after this round (rounds 0..round) at
  // privacy.delta; +inf (stored as null) with clipping only, -1 when privacy is off.
  double privacy_epsilon = -1.0;
};

// Σ RoundRecord::late_bytes_down over its nodes.
inline uint64_t late_bytes_down_total(const RoundRecord& r) {
  uint64_t total = 0;
  for (const auto& [node, bytes] : r.late_bytes_down) total += bytes;
  return total;
}

struct NodeRecord {
  std::string node_id;
  std::string state;  // "active", "lost", "left", "revoked"
  std::string device;
  uint32_t threads = 0;
  double budget = 1.0;
  uint64_t joined_unix_ms = 0;
  uint64_t last_seen_unix_ms = 0;
};

// A dashboard/API token as stored: only the SHA-256 of the secret is kept.
struct TokenRecord {
  std::string hash;   // SHA-256 hex of the token (the key)
  std::string role;   // "viewer" or "admin"
  std::string label;  // free text chosen at creation ("" allowed)
  uint64_t created_unix_ms = 0;
};

// The latest committed state of an experiment, with fingerprints verified against the record.
struct CommittedState {
  ExperimentRecord experiment;
  std::vector<float> params;                   // θ_current (numel)
  std::optional<std::vector<float>> momentum;  // absent before the first commit
  // The broadcast's error feedback (numel) committed with the current round; absent before the
  // first commit and without a compressed broadcast.
  std::optional<std::vector<float>> feedback;
  // The replay-detection memory committed with the current round (its SHA-256 checked); absent
  // before the first commit and with replay detection off.
  std::optional<std::string> replay_memory;
  // The round strategy's state committed with the current round (its SHA-256 checked); absent
  // before the first commit, for strategies without one, and in stores written before it was
  // kept.
  std::optional<std::string> strategy_state;
};

// What a round commit adds with a compressed broadcast (algorithms/compress/outer_update.h).
struct BroadcastCommit {
  std::span<const float> feedback;  // e_{r+1}, numel
  std::string_view update;          // round r's message; empty when the round was skipped
};

struct StoreOptions {
  // θ versions kept per experiment (the newest ones); the current θ is never deleted. ≥ 1.
  uint32_t keep_params = 3;
  // fsync every commit. Only tests of the store itself may want false.
  bool sync = true;
  // false: a directory that holds no store yet is InvalidArgument instead of a new empty store
  // (tools that manage an existing store: a typo in their --store must not create one).
  bool create_if_missing = true;
};

class Store {
 public:
  // Opens (or creates) the database in `dir`, creating missing column families. UNAVAILABLE when
  // another process (a running coordinator) holds the store's lock.
  static StatusOr<std::unique_ptr<Store>> open(const std::string& dir, StoreOptions options = {});
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Writes the record and θ_0 (as params of record.current_round) atomically. ALREADY_EXISTS if
  // the experiment exists.
  Status create_experiment(const ExperimentRecord& record, std::span<const float> theta0);
  // Lifecycle changes only (state, failure); never the round pointer's params.
  Status put_experiment(const ExperimentRecord& record);
  StatusOr<ExperimentRecord> load_experiment(const std::string& id) const;  // NOT_FOUND if absent
  StatusOr<std::vector<std::string>> list_experiments() const;

  // The latest committed state: record, θ of its current round and momentum. DATA_LOSS if a
  // value is corrupt or its fingerprint does not match the record.
  StatusOr<CommittedState> load_state(const std::string& id) const;

  // One WriteBatch, synced: θ_{r+1} (params of round r+1), momentum (both as files written
  // and synced first, the batch naming them), the round record r and the experiment record
  // (current_round = r+1, params_fingerprint = fingerprint of θ_{r+1}). Old θ versions beyond
  // keep_params are deleted in the same batch. Requires experiment.current_round == round.round
  // + 1. With `broadcast`, its error feedback and round r's update message go into the same batch
  // (updates of deleted θ versions are deleted). `replay_memory` (opaque bytes) replaces the stored
  // replay-detection memory, and `strategy_state` (opaque bytes) the round strategy's state; empty:
  // none.
  Status commit_round(const ExperimentRecord& experiment, const RoundRecord& round,
                      std::span<const float> theta_next, std::span<const float> momentum,
                      const BroadcastCommit* broadcast = nullptr,
                      std::string_view replay_memory = {}, std::string_view strategy_state = {});
  // Round r's compressed outer update message; NOT_FOUND when none was stored (another pull
  // codec, a skipped round, or θ_r no longer kept).
  StatusOr<std::string> load_broadcast_update(const std::string& id, uint64_t round) const;

  StatusOr<std::vector<float>> load_params(const std::string& id, uint64_t round) const;
  StatusOr<std::vector<uint64_t>> list_param_rounds(const std::string& id) const;
  StatusOr<RoundRecord> load_round(const std::string& id, uint64_t round) const;

  Status put_node(const std::string& experiment_id, const NodeRecord& node);
  StatusOr<std::vector<NodeRecord>> list_nodes(const std::string& experiment_id) const;

  // `json` is an object produced by the caller (node, round, step, metrics).
  Status put_metrics(const std::string& experiment_id, const std::string& node_id, uint64_t round,
                     const std::string& json);
  // Every report of the experiment, or only `node_id`'s when given (a prefix scan either way).
  StatusOr<std::vector<std::string>> list_metrics(const std::string& experiment_id,
                                                  const std::string& node_id = "") const;
  // `node_id`'s reports stored under keys after `after_key` ("" = all), as (key, report) in key
  // order (round, then arrival): a reader that keeps the last key it read per node
  // (ExperimentManager::metrics) reads each report once.
  StatusOr<std::vector<std::pair<std::string, std::string>>> list_metrics_after(
      const std::string& experiment_id, const std::string& node_id,
      const std::string& after_key) const;
  // The node ids that have reports (one seek per node, however many reports each has).
  StatusOr<std::vector<std::string>> metrics_reporters(const std::string& experiment_id) const;
  Status append_audit(const std::string& experiment_id, const std::string& event,
                      const std::string& detail);
  StatusOr<std::vector<std::string>> list_audit(const std::string& experiment_id) const;

  // Removes the experiment and everything keyed under it (nodes, rounds, params, momentum,
  // metrics, audit) in one WriteBatch. NOT_FOUND if the experiment is absent.
  Status delete_experiment(const std::string& id);

  // Tokens (global, not per experiment). put_token overwrites a record with the same hash.
  Status put_token(const TokenRecord& token);
  StatusOr<TokenRecord> load_token(const std::string& hash) const;  // NOT_FOUND if unknown
  StatusOr<std::vector<TokenRecord>> list_tokens() const;
  Status delete_token(const std::string& hash);

  // Whether the last write failed because the disk is full (writes then fail with IO_ERROR
  // "store at DIR is full: ..."). A later successful write clears it.
  bool full() const { return full_; }
  // After a failed write RocksDB refuses every write: close the store and open it again (which
  // flushes what the WAL holds, so it fails again while the disk is still full; calls meanwhile
  // answer IO_ERROR "store at DIR is closed ..."). Waits for calls in progress.
  Status recover();

  const std::string& dir() const { return dir_; }

  // Key helpers (tests use them to corrupt values on purpose).
  static std::string round_key(const std::string& experiment_id, uint64_t round);
  static const std::vector<std::string>& column_family_names();

 private:
  struct HandleDeleter {
    rocksdb::DB* db;
    void operator()(rocksdb::ColumnFamilyHandle* h) const;
  };
  using Handle = std::unique_ptr<rocksdb::ColumnFamilyHandle, HandleDeleter>;
  enum Cf {
    kExperiments,
    kNodes,
    kRounds,
    kParams,
    kOuterState,
    kMetrics,
    kAudit,
    kTokens,
    kNumCf
  };

  // The WAL cap: kWalCommits commits of the largest experiment written, at least kMinWalBytes.
  static constexpr uint64_t kMinWalBytes = 1 << 20;
  static constexpr uint64_t kWalCommits = 4;
  // The small, ever-growing families are compacted into few files every this many rounds.
  static constexpr uint64_t kCompactEveryRounds = 256;

  Store(std::string dir, StoreOptions options);
  // db_ and cfs_ from dir_ (open_db) and back to nothing (close_db); under db_mu_ exclusively
  // once the store is shared.
  Status open_db();
  void close_db();
  Status not_open(const std::string& what) const;
  // Writes `batch`; the caller holds db_mu_ (shared) and has checked db_.
  Status write(rocksdb::WriteBatch& batch, bool sync, const std::string& what);
  Status get(Cf cf, const std::string& key, std::string* value) const;
  // A write's RocksDB status as one line naming the store (and `full_` set for a full disk).
  Status written(const rocksdb::Status& s, const std::string& what);
  void fit_wal_to(uint64_t commit_bytes);
  void keep_wal_within(uint64_t commit_bytes);
  void compact_small_families();
  // Blob files (blob_file.h): the directory of experiment `id`'s files, and a value naming one.
  std::string blob_dir(const std::string& id) const;
  // One array to write as a blob file: kind-<round> of its experiment, named under cf/key.
  struct BlobToStage {
    Cf cf;
    std::string key;
    const char* kind;  // "params", "momentum" or "feedback"
    std::span<const float> values;
  };
  // Writes each blob's file for `round` of experiment `id` (synced, with their directory, when
  // options_.sync) and puts its name in `batch`. On failure the files it wrote are removed and
  // nothing is put.
  Status stage_blobs(rocksdb::WriteBatch& batch, const std::string& id, uint64_t round,
                     const std::vector<BlobToStage>& blobs);
  // A failed write as one line naming the store, with `full_` set when the disk is full.
  Status write_failed(bool no_space, const std::string& detail);
  // The floats of the blob value read from cf/key (a file's name, or an inline blob).
  StatusOr<std::vector<float>> read_blob(Cf cf, const std::string& key, const std::string& value,
                                         const std::string& id, const std::string& what) const;
  // Removes experiment `id`'s files that no committed value names any more: θ versions before
  // `first_kept`, and momentum and error feedback of another round than `current`.
  void prune_blob_files(const std::string& id, uint64_t first_kept, uint64_t current);
  // At open: removes the files of experiments that no longer exist and files no value names
  // (left by a crash between writing them and the batch that would have named them).
  Status collect_blob_garbage();
  StatusOr<std::vector<std::string>> scan_prefix(Cf cf, const std::string& prefix) const;

  std::string dir_;
  StoreOptions options_;
  // Shared by every call that uses db_ or cfs_, exclusive for recover()'s reopen.
  mutable std::shared_mutex db_mu_;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<Handle> cfs_;       // destroyed before db_ (declared after it)
  std::atomic<uint64_t> seq_{0};  // disambiguates metrics/audit keys written in the same ms
  std::atomic<bool> full_{false};
  std::atomic<uint64_t> wal_limit_;  // max_total_wal_size in force
};

// An experiment or node id: [A-Za-z0-9._-]{1,64}, but not "." or "..", which a browser (and
// any URL resolver) removes from a path, so /api/experiments/.. could never be reached.
bool valid_id(const std::string& id);
// What valid_id asks for, for the messages that refuse an id ("name = \"..\" " + kIdRule).
inline constexpr const char* kIdRule =
    "must be 1-64 characters of [A-Za-z0-9._-], and not \".\" or \"..\"";

}  // namespace atl::coordinator
