#include "coordinator/store.h"

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <boost/json.hpp>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <limits>
#include <mutex>
#include <shared_mutex>

#include "coordinator/blob_file.h"
#include "coordinator/json_views.h"
#include "kernels/core/sha256.h"

namespace atl::coordinator {
namespace json = boost::json;

namespace {

constexpr char kFeedbackSuffix[] = "/feedback";
constexpr char kReplaySuffix[] = "/replay";
constexpr char kStrategySuffix[] = "/strategy";

// A small opaque value stored with its integrity check: SHA-256 (32 bytes) | bytes.
std::string with_sha256(std::string_view bytes) {
  const Sha256Digest d = sha256(bytes.data(), bytes.size());
  std::string value(reinterpret_cast<const char*>(d.data()), d.size());
  value.append(bytes);
  return value;
}

// The bytes of a with_sha256 value; DataLoss naming `what` when the check fails.
StatusOr<std::string> checked_bytes(const std::string& value, const std::string& what) {
  const size_t head = std::min<size_t>(value.size(), 32);
  const Sha256Digest want = sha256(value.data() + head, value.size() - head);
  if (value.size() < 32 || std::memcmp(value.data(), want.data(), 32) != 0)
    return DataLoss("store: " + what + " does not match its SHA-256 (the store is corrupt)");
  return value.substr(32);
}

uint64_t now_unix_ms() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// RocksDB's own log (DIR/LOG, rolled to DIR/LOG.old past kMaxBytes), written with stdio.
// RocksDB's built-in logger must not be written to after a failed write (Debian's build asserts
// and aborts the process when the disk was full); here a line that does not fit is dropped.
class StoreLog final : public rocksdb::Logger {
 public:
  static constexpr long kMaxBytes = 512 << 10;
  explicit StoreLog(const std::string& dir)
      : rocksdb::Logger(rocksdb::InfoLogLevel::INFO_LEVEL), path_(dir + "/LOG") {
    file_ = std::fopen(path_.c_str(), "a");
  }
  ~StoreLog() override {
    if (file_ != nullptr) std::fclose(file_);
  }
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    std::lock_guard<std::mutex> lk(mu_);
    if (file_ != nullptr && std::ftell(file_) > kMaxBytes) {
      std::fclose(file_);
      std::error_code ec;
      std::filesystem::rename(path_, path_ + ".old", ec);
      file_ = std::fopen(path_.c_str(), "a");
    }
    if (file_ == nullptr) return;
    char stamp[32];
    const std::time_t now = std::time(nullptr);
    std::tm utc{};
    gmtime_r(&now, &utc);
    std::strftime(stamp, sizeof(stamp), "%Y/%m/%d-%H:%M:%S ", &utc);
    std::fputs(stamp, file_);
    std::vfprintf(file_, format, ap);
    std::fputc('\n', file_);
    std::fflush(file_);
  }

 private:
  std::mutex mu_;
  std::string path_;
  std::FILE* file_ = nullptr;
};

// RocksDB recovers from a full disk by itself only once a whole write buffer (64 MB) is free
// again, which a small disk never has; and while that recovery is pending it refuses a manual
// DB::Resume. So its own recovery is turned off: the coordinator probes and resumes
// (Store::recover), which needs only the space to flush what the memtables hold.
class ManualRecoveryOnly final : public rocksdb::EventListener {
 public:
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason /*reason*/, rocksdb::Status /*bg_error*/,
                            bool* auto_recovery) override {
    *auto_recovery = false;
  }
};

Status from_rocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  if (s.IsNotFound()) return NotFound(what + ": not found");
  if (s.IsCorruption()) return DataLoss("store: " + what + ": " + s.ToString());
  return IoError("store: " + what + ": " + s.ToString());
}

// ---- JSON (de)serialisation; every accessor checks the type so corrupt values give a Status.
struct Reader {
  const json::object* o;
  std::string what;
  Status err;
  const json::value* field(const char* k) {
    if (!err.ok()) return nullptr;
    auto it = o->find(k);
    if (it == o->end()) {
      err = DataLoss("store: " + what + " is corrupt (missing field '" + k + "')");
      return nullptr;
    }
    return &it->value();
  }
  std::string str(const char* k) {
    const json::value* v = field(k);
    if (!v) return {};
    if (!v->is_string()) {
      err = DataLoss("store: " + what + " is corrupt (field '" + k + "' is not a string)");
      return {};
    }
    return std::string(v->get_string());
  }
  uint64_t u64(const char* k) {
    const json::value* v = field(k);
    if (!v) return 0;
    if (v->is_uint64()) return v->get_uint64();
    if (v->is_int64() && v->get_int64() >= 0) return static_cast<uint64_t>(v->get_int64());
    err = DataLoss("store: " + what + " is corrupt (field '" + k + "' is not an unsigned integer)");
    return 0;
  }
  double dbl(const char* k) {
    const json::value* v = field(k);
    if (!v) return 0;
    if (v->is_double()) return v->get_double();
    if (v->is_int64()) return static_cast<double>(v->get_int64());
    if (v->is_uint64()) return static_cast<double>(v->get_uint64());
    err = DataLoss("store: " + what + " is corrupt (field '" + k + "' is not a number)");
    return 0;
  }
  // Fields added after the first release: absent is `fallback`; JSON null (a non-finite
  // double) reads as +inf.
  bool has(const char* k) const { return o->find(k) != o->end(); }
  double optional_dbl(const char* k, double fallback) {
    if (!has(k)) return fallback;
    if (o->at(k).is_null()) return std::numeric_limits<double>::infinity();
    return dbl(k);
  }
  std::string optional_str(const char* k, const std::string& fallback = "") {
    return has(k) ? str(k) : fallback;
  }
  bool optional_bool(const char* k) { return has(k) && boolean(k); }
  bool boolean(const char* k) {
    const json::value* v = field(k);
    if (!v) return false;
    if (!v->is_bool()) {
      err = DataLoss("store: " + what + " is corrupt (field '" + k + "' is not a boolean)");
      return false;
    }
    return v->get_bool();
  }
};

StatusOr<json::object> parse_object(const std::string& text, const std::string& what) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec || !v.is_object())
    return DataLoss("store: " + what + " is corrupt (not a JSON object" +
                    (ec ? ": " + ec.message() : std::string()) + ")");
  return std::move(v.as_object());
}

std::string experiment_to_json(const ExperimentRecord& e) {
  json::object o;
  o["id"] = e.id;
  o["state"] = experiment_state_name(e.state);
  o["current_round"] = e.current_round;
  o["params_fingerprint"] = e.params_fingerprint;
  o["layout_fingerprint"] = e.layout_fingerprint;
  o["numel"] = e.numel;
  o["config_toml"] = e.config_toml;
  o["created_unix_ms"] = e.created_unix_ms;
  o["failure"] = e.failure;
  if (e.site_tokenizer)
    o["site_tokenizer"] = {{"name", e.site_tokenizer->name},
                           {"sha256", e.site_tokenizer->sha256},
                           {"source", e.site_tokenizer->source}};
  if (e.privacy_noise_key != 0) {
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016" PRIx64, e.privacy_noise_key);
    o["privacy_noise_key"] = hex;
  }
  return json::serialize(o);
}

StatusOr<ExperimentRecord> experiment_from_json(const std::string& text, const std::string& what) {
  ATOLL_ASSIGN_OR_RETURN(json::object o, parse_object(text, what));
  Reader r{&o, what, {}};
  ExperimentRecord e;
  e.id = r.str("id");
  const std::string state = r.str("state");
  e.current_round = r.u64("current_round");
  e.params_fingerprint = r.str("params_fingerprint");
  e.layout_fingerprint = r.str("layout_fingerprint");
  e.numel = r.u64("numel");
  e.config_toml = r.str("config_toml");
  e.created_unix_ms = r.u64("created_unix_ms");
  e.failure = r.str("failure");
  if (r.has("site_tokenizer")) {  // records written before it was kept have none
    const json::value& t = o.at("site_tokenizer");
    if (!t.is_object())
      return DataLoss("store: " + what + " is corrupt (field 'site_tokenizer' is not an object)");
    Reader tr{&t.get_object(), what + " site_tokenizer", {}};
    e.site_tokenizer = SiteTokenizer{tr.str("name"), tr.str("sha256"), tr.str("source")};
    if (!tr.err.ok()) return tr.err;
  }
  if (r.has("privacy_noise_key")) {  // only experiments with a secret noise key have one
    const std::string hex = r.str("privacy_noise_key");
    char* end = nullptr;
    e.privacy_noise_key = std::strtoull(hex.c_str(), &end, 16);
    if (hex.size() != 16 || end != hex.c_str() + 16 || e.privacy_noise_key == 0)
      return DataLoss("store: " + what +
                      " is corrupt (field 'privacy_noise_key' is not 16 hex digits)");
  }
  if (!r.err.ok()) return r.err;
  auto st = parse_experiment_state(state);
  if (!st.ok()) return DataLoss("store: " + what + " is corrupt (" + st.status().message() + ")");
  e.state = *st;
  return e;
}

// The same JSON the API serves (json_views.h); finite values only reach a commit.
std::string round_to_json(const RoundRecord& r) {
  return json::serialize(to_json(r));
}

StatusOr<RoundRecord> round_from_json(const std::string& text, const std::string& what) {
  ATOLL_ASSIGN_OR_RETURN(json::object o, parse_object(text, what));
  Reader r{&o, what, {}};
  RoundRecord rr;
  rr.round = r.u64("round");
  const json::value* ps = r.field("participants");
  if (ps && !ps->is_array()) return DataLoss("store: " + what + " is corrupt (participants)");
  if (ps) {
    for (const auto& pv : ps->get_array()) {
      if (!pv.is_object()) return DataLoss("store: " + what + " is corrupt (participant)");
      Reader pr{&pv.get_object(), what, {}};
      ParticipantRecord p;
      p.node_id = pr.str("node_id");
      p.pushed = pr.boolean("pushed");
      p.tokens = pr.u64("tokens");
      p.loss = pr.dbl("loss");
      p.bytes_up = pr.u64("bytes_up");
      p.bytes_down = pr.u64("bytes_down");
      if (!pr.err.ok()) return pr.err;
      // Screening fields: absent in records written before screening existed.
      p.norm = pr.optional_dbl("norm", 0.0);
      p.screen = pr.optional_str("screen");
      p.screen_reason = pr.optional_str("screen_reason");  // absent before replay detection
      rr.participants.push_back(std::move(p));
    }
  }
  rr.tokens = r.u64("tokens");
  rr.mean_loss = r.dbl("mean_loss");
  rr.bytes_up = r.u64("bytes_up");
  rr.bytes_down = r.u64("bytes_down");
  if (r.has("late_bytes_down")) {  // absent in records written before it
    const json::value& late = o.at("late_bytes_down");
    if (!late.is_object()) return DataLoss("store: " + what + " is corrupt (late_bytes_down)");
    Reader lr{&late.get_object(), what, {}};
    for (const auto& entry : late.get_object())
      rr.late_bytes_down[std::string(entry.key())] = lr.u64(std::string(entry.key()).c_str());
    if (!lr.err.ok()) return lr.err;
  }
  rr.duration_s = r.dbl("duration_s");
  rr.base_fingerprint = r.str("base_fingerprint");
  rr.params_fingerprint = r.str("params_fingerprint");
  rr.momentum_fingerprint = r.str("momentum_fingerprint");
  rr.committed_unix_ms = r.u64("committed_unix_ms");
  if (!r.err.ok()) return r.err;
  rr.aggregator = r.optional_str("aggregator", "mean");
  rr.median_norm = r.optional_dbl("median_norm", 0.0);
  rr.norm_limit = r.optional_dbl("norm_limit", std::numeric_limits<double>::infinity());
  rr.skipped = r.optional_bool("skipped");
  rr.privacy_epsilon = r.optional_dbl("privacy_epsilon", -1.0);  // null: +inf
  if (!r.err.ok()) return r.err;
  return rr;
}

std::string node_to_json(const NodeRecord& n) {
  json::object o;
  o["node_id"] = n.node_id;
  o["state"] = n.state;
  o["device"] = n.device;
  o["threads"] = n.threads;
  o["budget"] = n.budget;
  o["joined_unix_ms"] = n.joined_unix_ms;
  o["last_seen_unix_ms"] = n.last_seen_unix_ms;
  return json::serialize(o);
}

StatusOr<NodeRecord> node_from_json(const std::string& text, const std::string& what) {
  ATOLL_ASSIGN_OR_RETURN(json::object o, parse_object(text, what));
  Reader r{&o, what, {}};
  NodeRecord n;
  n.node_id = r.str("node_id");
  n.state = r.str("state");
  n.device = r.str("device");
  n.threads = static_cast<uint32_t>(r.u64("threads"));
  n.budget = r.dbl("budget");
  n.joined_unix_ms = r.u64("joined_unix_ms");
  n.last_seen_unix_ms = r.u64("last_seen_unix_ms");
  if (!r.err.ok()) return r.err;
  return n;
}

std::string token_to_json(const TokenRecord& t) {
  json::object o;
  o["hash"] = t.hash;
  o["role"] = t.role;
  o["label"] = t.label;
  o["created_unix_ms"] = t.created_unix_ms;
  return json::serialize(o);
}

StatusOr<TokenRecord> token_from_json(const std::string& text, const std::string& what) {
  ATOLL_ASSIGN_OR_RETURN(json::object o, parse_object(text, what));
  Reader r{&o, what, {}};
  TokenRecord t;
  t.hash = r.str("hash");
  t.role = r.str("role");
  t.label = r.str("label");
  t.created_unix_ms = r.u64("created_unix_ms");
  if (!r.err.ok()) return r.err;
  return t;
}

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, v);
  return buf;
}

std::string update_key(const std::string& id, uint64_t round) {
  return id + "/update/" + hex16(round);
}

}  // namespace

const char* experiment_state_name(ExperimentState s) {
  switch (s) {
    case ExperimentState::kCreated:
      return "created";
    case ExperimentState::kRunning:
      return "running";
    case ExperimentState::kPaused:
      return "paused";
    case ExperimentState::kFinished:
      return "finished";
    case ExperimentState::kFailed:
      return "failed";
  }
  return "unknown";
}

StatusOr<ExperimentState> parse_experiment_state(const std::string& s) {
  for (auto st : {ExperimentState::kCreated, ExperimentState::kRunning, ExperimentState::kPaused,
                  ExperimentState::kFinished, ExperimentState::kFailed})
    if (s == experiment_state_name(st)) return st;
  return InvalidArgument("unknown experiment state '" + s + "'");
}

bool valid_id(const std::string& id) {
  if (id.empty() || id.size() > 64 || id == "." || id == "..") return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

const std::vector<std::string>& Store::column_family_names() {
  // Index order matches the Cf enum; "default" is RocksDB's own and stays unused.
  static const std::vector<std::string> names = {"experiments", "nodes",   "rounds", "params",
                                                 "outer_state", "metrics", "audit",  "tokens"};
  return names;
}

std::string Store::round_key(const std::string& experiment_id, uint64_t round) {
  return experiment_id + "/" + hex16(round);
}

void Store::HandleDeleter::operator()(rocksdb::ColumnFamilyHandle* h) const {
  if (h) db->DestroyColumnFamilyHandle(h);
}

Store::Store(std::string dir, StoreOptions options)
    : dir_(std::move(dir)), options_(options), wal_limit_(kMinWalBytes) {}

Store::~Store() {
  close_db();
}

namespace {

// The store holds θ, configs, token hashes and the audit log: its directory is 0700 and its
// files 0600, whatever the umask made of them (stores created before this rule included). Files
// RocksDB creates later follow the process umask (the coordinator runs with 077, cli/main.cc).
Status make_owner_only(const std::string& dir, bool files) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  if (ec == std::errc::read_only_file_system)
    return IoError("store " + dir +
                   " is on a read-only file system: the coordinator writes every round there; "
                   "give a writable --store");
  if (ec) return IoError("cannot make store " + dir + " owner-only (mode 0700): " + ec.message());
  if (!files) return Status::Ok();
  // A file RocksDB deletes while we list (a compaction's input) is skipped, not an error.
  const auto narrow = [](const fs::directory_entry& entry) -> Status {
    std::error_code e;
    const bool is_dir = entry.is_directory(e);
    if (!is_dir && !entry.is_regular_file(e)) return Status::Ok();
    fs::permissions(entry.path(),
                    is_dir ? fs::perms::owner_all : fs::perms::owner_read | fs::perms::owner_write,
                    fs::perm_options::replace, e);
    if (e && e != std::errc::no_such_file_or_directory)
      return IoError("cannot make " + entry.path().string() + " owner-only (mode " +
                     (is_dir ? "0700" : "0600") + "): " + e.message());
    return Status::Ok();
  };
  // RocksDB's files, and the blob files (store.h) in their directories.
  for (const auto& entry : fs::recursive_directory_iterator(dir, ec))
    ATOLL_RETURN_IF_ERROR(narrow(entry));
  if (ec) return IoError("cannot list store " + dir + ": " + ec.message());
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<Store>> Store::open(const std::string& dir, StoreOptions options) {
  if (options.keep_params < 1) return InvalidArgument("store: keep_params must be >= 1");
  // RocksDB's CURRENT names the live MANIFEST: a database exists exactly when it does.
  if (!options.create_if_missing &&
      !std::filesystem::exists(std::filesystem::path(dir) / "CURRENT"))
    return InvalidArgument("--store " + dir +
                           " holds no coordinator store (check the path: a coordinator creates "
                           "its store on its first start)");
  {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return IoError("cannot create store directory " + dir + ": " + ec.message());
    ATOLL_RETURN_IF_ERROR(make_owner_only(dir, /*files=*/false));
  }
  std::unique_ptr<Store> store(new Store(dir, options));
  ATOLL_RETURN_IF_ERROR(store->open_db());
  ATOLL_RETURN_IF_ERROR(make_owner_only(dir, /*files=*/true));
  ATOLL_RETURN_IF_ERROR(store->collect_blob_garbage());
  // A store written before the small families were merged holds one file per flush (thousands
  // after a long run): merged once here.
  store->compact_small_families();
  return store;
}

Status Store::open_db() {
  rocksdb::DBOptions db_opts;
  db_opts.create_if_missing = true;
  db_opts.create_missing_column_families = true;
  db_opts.paranoid_checks = true;
  db_opts.max_background_jobs = 2;
  // Bounded size (docs/coordinator.md, "Store"): every commit writes θ and the momentum
  // through the WAL, and a WAL file is deleted only when every column family with data in it
  // has been flushed; the small column families (nodes, metrics, audit) never fill a memtable,
  // so without a cap on the WAL it would keep every θ ever committed (RocksDB's default cap is
  // 4 × the memtables, gigabytes). fit_wal_to() raises the cap to a few commits of the
  // experiment's size; flushes then leave the live θ versions only, and compactions drop the
  // versions deleted since.
  db_opts.max_total_wal_size = wal_limit_;
  db_opts.max_manifest_file_size = 1 << 20;  // then a new MANIFEST replaces it
  // Table files held open at most (a cache beyond): the file count is kept flat
  // (compact_small_families), and this bound keeps a store of any history within a 1024
  // descriptor limit with room for the connections.
  db_opts.max_open_files = 256;
  // Memory: RocksDB's defaults give every column family its own 32 MB block cache and 64 MB
  // memtables, which a long run fills (the coordinator's RSS grew with every round read). One
  // cache and one memtable budget for the whole store instead.
  db_opts.db_write_buffer_size = 64 << 20;
  // The WAL holds everything the memtables do; closing after a failed write must not flush.
  db_opts.avoid_flush_during_shutdown = true;
  // No preallocation: on a full disk a new WAL file (a reopen after a failed write creates one)
  // would reserve the space just freed, and the store waited for room it had taken itself (the
  // full-disk test failed so, now and then, under load).
  db_opts.allow_fallocate = false;
  {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);  // for the log; Open reports what fails
    db_opts.info_log = std::make_shared<StoreLog>(dir_);
  }
  db_opts.listeners.push_back(std::make_shared<ManualRecoveryOnly>());
  rocksdb::BlockBasedTableOptions table_opts;
  table_opts.block_cache = rocksdb::NewLRUCache(16 << 20);  // shared by every family
  const std::shared_ptr<rocksdb::TableFactory> tables(
      rocksdb::NewBlockBasedTableFactory(table_opts));
  std::vector<rocksdb::ColumnFamilyDescriptor> descs;
  descs.emplace_back(rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions());
  for (const auto& n : column_family_names()) {
    rocksdb::ColumnFamilyOptions cf_opts;
    cf_opts.table_factory = tables;
    if (n == "params" || n == "outer_state") {
      // θ blobs are large and incompressible; keep them out of the block cache churn.
      cf_opts.compression = rocksdb::kNoCompression;
      // Every flush of these holds the live θ versions again: merge them after two flushes
      // rather than four, so superseded copies do not pile up in level 0.
      cf_opts.level0_file_num_compaction_trigger = 2;
    }
    descs.emplace_back(n, cf_opts);
  }
  std::vector<rocksdb::ColumnFamilyHandle*> raw;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(db_opts, dir_, descs, &raw, &db);
  if (!s.ok()) {
    std::string msg = s.ToString();
    if (s.IsIOError() && msg.find("lock") != std::string::npos)
      return Unavailable("store " + dir_ + " is in use by another process (" + msg + ")");
    return IoError("cannot open store " + dir_ + ": " + msg);
  }
  db_.reset(db);
  // raw[0] is the default CF; we keep only our own.
  for (size_t i = 0; i < raw.size(); ++i) {
    if (i == 0) {
      db->DestroyColumnFamilyHandle(raw[i]);
      continue;
    }
    cfs_.emplace_back(raw[i], HandleDeleter{db});
  }
  return Status::Ok();
}

void Store::close_db() {
  cfs_.clear();  // handles before the DB
  if (db_) db_->Close();
  db_.reset();
}

Status Store::not_open(const std::string& what) const {
  return IoError("store at " + dir_ +
                 " is closed after a failed write and could not be opened "
                 "again yet: " +
                 what);
}

Status Store::write(rocksdb::WriteBatch& batch, bool sync, const std::string& what) {
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  return written(db_->Write(wo, &batch), what);
}

Status Store::written(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) {
    full_ = false;
    return Status::Ok();
  }
  // A full disk, or a write refused because an earlier one failed for that reason (RocksDB
  // then holds the error until recover()).
  if (s.IsCorruption()) return DataLoss("store at " + dir_ + ": " + what + ": " + s.ToString());
  return write_failed(s.IsNoSpace() || s.subcode() == rocksdb::Status::kNoSpace,
                      what + ": " + s.ToString());
}

Status Store::write_failed(bool no_space, const std::string& detail) {
  full_ = no_space;
  return IoError("store at " + dir_ + (no_space ? " is full: " : " cannot be written: ") + detail);
}

Status Store::recover() {
  // RocksDB refuses writes after a failed one, and its own way back (DB::Resume) can wait
  // forever on a flush that failed: close the store and open it again, which replays the WAL
  // (RocksDB keeps its records until a flush succeeds) and starts a new one.
  std::unique_lock<std::shared_mutex> lk(db_mu_);
  close_db();
  Status st = open_db();
  if (!st.ok()) full_ = true;  // most likely still no space for the recovery's flush
  return st;
}

void Store::fit_wal_to(uint64_t commit_bytes) {
  // The WAL is cut (and the column families holding its oldest data flushed) once it exceeds
  // this: kWalCommits commits' worth, so on disk θ exists ~kWalCommits times in the WAL at most.
  const uint64_t want = std::max<uint64_t>(kMinWalBytes, kWalCommits * commit_bytes);
  if (want <= wal_limit_) return;
  if (db_->SetDBOptions({{"max_total_wal_size", std::to_string(want)}}).ok()) wal_limit_ = want;
}

void Store::keep_wal_within(uint64_t commit_bytes) {
  // RocksDB starts a flush once the WAL passes its cap, but does not wait for it: commits that
  // come faster than flushes (many a second) would grow the WAL past the cap meanwhile. More
  // than one commit over it means the flush lags: wait for one here (rare; a flush of the kept
  // θ versions takes about as long as writing them).
  rocksdb::VectorLogPtr wals;
  if (!db_->GetSortedWalFiles(wals).ok()) return;
  uint64_t bytes = 0;
  for (const auto& w : wals) bytes += w->SizeFileBytes();
  if (bytes <= wal_limit_ + commit_bytes) return;
  std::vector<rocksdb::ColumnFamilyHandle*> all;
  for (const auto& h : cfs_) all.push_back(h.get());
  rocksdb::FlushOptions f;
  f.wait = true;
  (void)db_->Flush(f, all);  // a failure shows in the next write
}

namespace {
// A blob value naming its file: "ATF1" | file name (store.h).
constexpr char kBlobFileRef[4] = {'A', 'T', 'F', '1'};

bool names_blob_file(const std::string& value) {
  return value.size() > 4 && std::memcmp(value.data(), kBlobFileRef, 4) == 0;
}
}  // namespace

std::string Store::blob_dir(const std::string& id) const {
  return dir_ + "/blobs/e-" + id;  // "e-": an id of "." or ".." is a plain name here
}

Status Store::stage_blobs(rocksdb::WriteBatch& batch, const std::string& id, uint64_t round,
                          const std::vector<BlobToStage>& blobs) {
  namespace fs = std::filesystem;
  const std::string dir = blob_dir(id);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    for (const std::string& d : {dir_ + "/blobs", dir}) {
      fs::create_directory(d, ec);
      if (!ec) fs::permissions(d, fs::perms::owner_all, fs::perm_options::replace, ec);
      if (ec)
        return write_failed(ec == std::errc::no_space_on_device,
                            "cannot create " + d + ": " + ec.message());
    }
    if (options_.sync) {
      ATOLL_RETURN_IF_ERROR(sync_directory(dir_));
      ATOLL_RETURN_IF_ERROR(sync_directory(dir_ + "/blobs"));
    }
  }
  std::vector<std::string> written;  // paths, in the order of `blobs`
  Status st;
  for (const BlobToStage& b : blobs) {
    const std::string path = dir + "/" + b.kind + "-" + hex16(round);
    BlobWriteError w = write_blob_file(path, b.values, options_.sync,
                                       std::string("write ") + b.kind + " of " + id);
    if (!w.status.ok()) {
      st = write_failed(w.no_space, w.status.message());
      break;
    }
    written.push_back(path);
  }
  if (st.ok() && options_.sync) st = sync_directory(dir);
  if (!st.ok()) {
    for (const std::string& path : written) ::unlink(path.c_str());
    return st;
  }
  for (size_t i = 0; i < blobs.size(); ++i)
    batch.Put(cfs_[blobs[i].cf].get(), blobs[i].key,
              std::string(kBlobFileRef, 4) + written[i].substr(dir.size() + 1));
  return Status::Ok();
}

StatusOr<std::vector<float>> Store::read_blob(Cf cf, const std::string& key,
                                              const std::string& value, const std::string& id,
                                              const std::string& what) const {
  if (!names_blob_file(value)) return decode_blob(value, what);  // written inline, before files
  const std::string name = value.substr(4);
  if (name.find('/') != std::string::npos || name == "." || name == "..")
    return DataLoss("store: " + what + " is corrupt (bad file name)");
  auto v = read_blob_file(blob_dir(id) + "/" + name, what);
  if (v.ok() || v.status().code() != StatusCode::kNotFound) return v;
  // A commit may have pruned the version between our read of its name and of its file.
  std::string again;
  const Status st = get(cf, key, &again);
  if (st.code() == StatusCode::kNotFound || (st.ok() && again != value))
    return NotFound("store: " + what + " is no longer kept");
  return DataLoss(v.status().message() + " (the store is corrupt)");
}

void Store::prune_blob_files(const std::string& id, uint64_t first_kept, uint64_t current) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(blob_dir(id), ec)) {
    const std::string name = entry.path().filename().string();
    const size_t dash = name.rfind('-');
    if (dash == std::string::npos) continue;
    const std::string kind = name.substr(0, dash);
    const uint64_t r = std::strtoull(name.c_str() + dash + 1, nullptr, 16);
    if (kind == "params" ? r < first_kept : (kind == "momentum" || kind == "feedback") && r != current)
      stale.push_back(entry.path());
  }
  for (const fs::path& p : stale) fs::remove(p, ec);  // a file left over goes at the next open
}

Status Store::collect_blob_garbage() {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> dirs;
  for (const auto& entry : fs::directory_iterator(dir_ + "/blobs", ec)) dirs.push_back(entry.path());
  for (const fs::path& d : dirs) {
    const std::string dname = d.filename().string();
    if (dname.rfind("e-", 0) != 0) continue;
    const std::string id = dname.substr(2);
    std::string record;
    const Status st = get(kExperiments, id, &record);
    if (st.code() == StatusCode::kNotFound) {
      fs::remove_all(d, ec);
      continue;
    }
    ATOLL_RETURN_IF_ERROR(st);
    std::vector<std::string> live;
    ATOLL_ASSIGN_OR_RETURN(std::vector<std::string> values, scan_prefix(kParams, id + "/"));
    for (const std::string& key : {id, id + kFeedbackSuffix}) {
      std::string v;
      if (get(kOuterState, key, &v).ok()) values.push_back(std::move(v));
    }
    for (const std::string& v : values)
      if (names_blob_file(v)) live.push_back(v.substr(4));
    std::vector<fs::path> unnamed;
    for (const auto& f : fs::directory_iterator(d, ec))
      if (std::find(live.begin(), live.end(), f.path().filename().string()) == live.end())
        unnamed.push_back(f.path());
    for (const fs::path& f : unnamed) fs::remove(f, ec);
  }
  return Status::Ok();
}

void Store::compact_small_families() {
  // Keys that only grow (round numbers, timestamps) make level compaction move each flushed
  // file down unmerged, so these families would keep one small file per flush; merging them
  // keeps the file count flat. kForce: the files all sit in the bottommost level, which a
  // manual compaction otherwise leaves as it is (a soak run kept 8,101 files in `rounds`).
  // Small data (about 1 kB a round): milliseconds. A failure only leaves more files.
  rocksdb::CompactRangeOptions o;
  o.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  for (Cf cf : {kNodes, kRounds, kMetrics, kAudit, kExperiments})
    (void)db_->CompactRange(o, cfs_[cf].get(), nullptr, nullptr);
}

Status Store::get(Cf cf, const std::string& key, std::string* value) const {
  std::shared_lock<std::shared_mutex> lk(db_mu_);
  if (!db_) return not_open("read " + column_family_names()[cf] + "/" + key);
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  return from_rocks(db_->Get(ro, cfs_[cf].get(), key, value),
                    column_family_names()[cf] + "/" + key);
}

StatusOr<std::vector<std::string>> Store::scan_prefix(Cf cf, const std::string& prefix) const {
  std::shared_lock<std::shared_mutex> lk(db_mu_);
  if (!db_) return not_open("scan " + column_family_names()[cf]);
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cfs_[cf].get()));
  std::vector<std::string> out;
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next())
    out.push_back(it->value().ToString());
  ATOLL_RETURN_IF_ERROR(from_rocks(it->status(), "scan " + column_family_names()[cf]));
  return out;
}

Status Store::create_experiment(const ExperimentRecord& record, std::span<const float> theta0) {
  if (!valid_id(record.id)) return InvalidArgument("experiment id '" + record.id + "' " + kIdRule);
  std::string existing;
  Status st = get(kExperiments, record.id, &existing);
  if (st.ok()) return AlreadyExists("experiment '" + record.id + "' already exists in the store");
  if (st.code() != StatusCode::kNotFound) return st;
  if (record.numel != theta0.size())
    return InvalidArgument("create_experiment: numel " + std::to_string(record.numel) +
                           " != θ size " + std::to_string(theta0.size()));
  const std::string key = round_key(record.id, record.current_round);
  std::shared_lock<std::shared_mutex> db_lock(db_mu_);
  if (!db_) return not_open("create experiment " + record.id);
  rocksdb::WriteBatch batch;
  ATOLL_RETURN_IF_ERROR(
      stage_blobs(batch, record.id, record.current_round, {{kParams, key, "params", theta0}}));
  batch.Put(cfs_[kExperiments].get(), record.id, experiment_to_json(record));
  return write(batch, options_.sync, "create experiment " + record.id);
}

Status Store::put_experiment(const ExperimentRecord& record) {
  std::shared_lock<std::shared_mutex> db_lock(db_mu_);
  if (!db_) return not_open("put experiment " + record.id);
  rocksdb::WriteBatch batch;
  batch.Put(cfs_[kExperiments].get(), record.id, experiment_to_json(record));
  return write(batch, options_.sync, "put experiment " + record.id);
}

StatusOr<ExperimentRecord> Store::load_experiment(const std::string& id) const {
  std::string v;
  Status st = get(kExperiments, id, &v);
  if (st.code() == StatusCode::kNotFound)
    return NotFound("experiment '" + id + "' is not in the store");
  ATOLL_RETURN_IF_ERROR(st);
  return experiment_from_json(v, "experiment record '" + id + "'");
}

StatusOr<std::vector<std::string>> Store::list_experiments() const {
  std::shared_lock<std::shared_mutex> db_lock(db_mu_);
  if (!db_) return not_open("list experiments");
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), cfs_[kExperiments].get()));
  std::vector<std::string> ids;
  for (it->SeekToFirst(); it->Valid(); it->Next()) ids.push_back(it->key().ToString());
  ATOLL_RETURN_IF_ERROR(from_rocks(it->status(), "list experiments"));
  return ids;
}

StatusOr<std::vector<float>> Store::load_params(const std::string& id, uint64_t round) const {
  std::string v;
  Status st = get(kParams, round_key(id, round), &v);
  if (st.code() == StatusCode::kNotFound)
    return NotFound("store has no parameters for experiment '" + id + "' round " +
                    std::to_string(round));
  ATOLL_RETURN_IF_ERROR(st);
  return read_blob(kParams, round_key(id, round), v, id,
                   "parameters of '" + id + "' round " + std::to_string(round));
}

StatusOr<std::vector<uint64_t>> Store::list_param_rounds(const std::string& id) const {
  std::shared_lock<std::shared_mutex> db_lock(db_mu_);
  if (!db_) return not_open("list params");
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), cfs_[kParams].get()));
  const std::string prefix = id + "/";
  std::vector<uint64_t> rounds;
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    const std::string k = it->key().ToString().substr(prefix.size());
    rounds.push_back(std::strtoull(k.c_str(), nullptr, 16));
  }
  ATOLL_RETURN_IF_ERROR(from_rocks(it->status(), "list params"));
  return rounds;
}

StatusOr<RoundRecord> Store::load_round(const std::string& id, uint64_t round) const {
  std::string v;
  Status st = get(kRounds, round_key(id, round), &v);
  if (st.code() == StatusCode::kNotFound)
    return NotFound("store has no record of experiment '" + id + "' round " +
                    std::to_string(round));
  ATOLL_RETURN_IF_ERROR(st);
  return round_from_json(v, "round record '" + id + "' " + std::to_string(round));
}

StatusOr<CommittedState> Store::load_state(const std::string& id) const {
  CommittedState s;
  ATOLL_ASSIGN_OR_RETURN(s.experiment, load_experiment(id));
  const ExperimentRecord& e = s.experiment;
  ATOLL_ASSIGN_OR_RETURN(s.params, load_params(id, e.current_round));
  if (s.params.size() != e.numel)
    return DataLoss("store: parameters of '" + id + "' round " + std::to_string(e.current_round) +
                    " have " + std::to_string(s.params.size()) + " elements, record says " +
                    std::to_string(e.numel));
  const std::string fp = sha256_hex(s.params.data(), s.params.size() * 4);
  if (fp != e.params_fingerprint)
    return DataLoss("store: parameters of '" + id + "' round " + std::to_string(e.current_round) +
                    " have fingerprint " + fp + ", record says " + e.params_fingerprint);
  std::string blob;
  Status st = get(kOuterState, id, &blob);
  if (st.ok()) {
    ATOLL_ASSIGN_OR_RETURN(std::vector<float> m,
                           read_blob(kOuterState, id, blob, id, "momentum of '" + id + "'"));
    if (m.size() != e.numel) return DataLoss("store: momentum of '" + id + "' has wrong size");
    if (e.current_round > 0) {
      // The momentum must be the one committed with the current round.
      ATOLL_ASSIGN_OR_RETURN(RoundRecord last, load_round(id, e.current_round - 1));
      const std::string mfp = sha256_hex(m.data(), m.size() * 4);
      if (mfp != last.momentum_fingerprint)
        return DataLoss("store: momentum of '" + id + "' does not match round " +
                        std::to_string(e.current_round - 1) + "'s record");
    }
    s.momentum = std::move(m);
  } else if (st.code() != StatusCode::kNotFound) {
    return st;
  } else if (e.current_round > 0) {
    return DataLoss("store: experiment '" + id + "' is at round " +
                    std::to_string(e.current_round) + " but its momentum is missing");
  }
  // Written in the same batch as the momentum: as current as it is (its blob has its SHA-256).
  st = get(kOuterState, id + kFeedbackSuffix, &blob);
  if (st.ok()) {
    ATOLL_ASSIGN_OR_RETURN(std::vector<float> f,
                           read_blob(kOuterState, id + kFeedbackSuffix, blob, id,
                                     "broadcast error feedback of '" + id + "'"));
    if (f.size() != e.numel)
      return DataLoss("store: broadcast error feedback of '" + id + "' has wrong size");
    s.feedback = std::move(f);
  } else if (st.code() != StatusCode::kNotFound) {
    return st;
  }
  // Written in the same batch as the momentum as well.
  st = get(kOuterState, id + kReplaySuffix, &blob);
  if (st.ok()) {
    ATOLL_ASSIGN_OR_RETURN(s.replay_memory,
                           checked_bytes(blob, "replay-detection memory of '" + id + "'"));
  } else if (st.code() != StatusCode::kNotFound) {
    return st;
  }
  // Written in the same batch as the momentum as well (absent in stores from before it).
  st = get(kOuterState, id + kStrategySuffix, &blob);
  if (st.ok()) {
    ATOLL_ASSIGN_OR_RETURN(s.strategy_state,
                           checked_bytes(blob, "round strategy state of '" + id + "'"));
  } else if (st.code() != StatusCode::kNotFound) {
    return st;
  }
  return s;
}

Status Store::commit_round(const ExperimentRecord& experiment, const RoundRecord& round,
                           std::span<const float> theta_next, std::span<const float> momentum,
                           const BroadcastCommit* broadcast, std::string_view replay_memory,
                           std::string_view strategy_state) {
  if (experiment.current_round != round.round + 1)
    return InvalidArgument("commit_round: experiment.current_round must be round + 1");
  if (theta_next.size() != experiment.numel || momentum.size() != experiment.numel)
    return InvalidArgument("commit_round: θ/momentum size does not match the experiment");
  if (broadcast && broadcast->feedback.size() != experiment.numel)
    return InvalidArgument("commit_round: error feedback size does not match the experiment");
  const std::string& id = experiment.id;
  const std::string theta_key = round_key(id, experiment.current_round);
  std::shared_lock<std::shared_mutex> db_lock(db_mu_);
  if (!db_) return not_open("commit round " + std::to_string(round.round) + " of " + id);
  const std::string feedback_key = id + kFeedbackSuffix;
  const uint64_t next = experiment.current_round;
  // θ, momentum and error feedback go to files (blob_file.h), written and synced before the
  // batch that names them; the batch and the WAL hold the small values only.
  const size_t wal_bytes = (broadcast ? broadcast->update.size() : 0) + replay_memory.size() +
                           strategy_state.size() + 65536;
  fit_wal_to(wal_bytes);
  rocksdb::WriteBatch batch(wal_bytes);
  std::vector<BlobToStage> blobs = {{kParams, theta_key, "params", theta_next},
                                     {kOuterState, id, "momentum", momentum}};
  if (broadcast) blobs.push_back({kOuterState, feedback_key, "feedback", broadcast->feedback});
  ATOLL_RETURN_IF_ERROR(stage_blobs(batch, id, next, blobs));
  auto* params = cfs_[kParams].get();
  // Keep the newest keep_params versions: delete [id/0, id/(next - keep + 1)).
  const uint64_t first_kept = next + 1 > options_.keep_params ? next + 1 - options_.keep_params : 0;
  if (first_kept > 0) {  // first_kept ≤ next: the current version survives
    batch.DeleteRange(params, round_key(id, 0), round_key(id, first_kept));
    // Round v's update takes θ_v to θ_{v+1}: useful while θ_v is kept.
    if (broadcast)
      batch.DeleteRange(cfs_[kOuterState].get(), update_key(id, 0), update_key(id, first_kept));
  }
  if (broadcast) {
    if (!broadcast->update.empty())
      batch.Put(cfs_[kOuterState].get(), update_key(id, round.round),
                rocksdb::Slice(broadcast->update.data(), broadcast->update.size()));
  }
  // Opaque small values: replaced by this commit's, or deleted when it has none.
  for (const auto& [suffix, bytes] :
       {std::pair{kReplaySuffix, replay_memory}, std::pair{kStrategySuffix, strategy_state}}) {
    if (bytes.empty())
      batch.Delete(cfs_[kOuterState].get(), id + suffix);
    else
      batch.Put(cfs_[kOuterState].get(), id + suffix, with_sha256(bytes));
  }
  batch.Put(cfs_[kRounds].get(), round_key(id, round.round), round_to_json(round));
  batch.Put(cfs_[kExperiments].get(), id, experiment_to_json(experiment));
  // A failed write leaves the files written: RocksDB may still replay the batch from its WAL
  // when the store is reopened (recover()), and then it needs them. Unnamed ones go at open.
  ATOLL_RETURN_IF_ERROR(
      write(batch, options_.sync, "commit round " + std::to_string(round.round) + " of " + id));
  keep_wal_within(wal_bytes);
  prune_blob_files(id, first_kept, next);
  if (round.round % kCompactEveryRounds == kCompactEveryRounds - 1) compact_small_families();
  return Status::Ok();
}

StatusOr<std::string> Store::load_broadcast_update(const std::string& id, uint64_t round) const {
  std::string v;
  Status st = get(kOuterState, update_key(id, round), &v);
  if (st.code() == StatusCode::kNotFound)
    return NotFound("store has no broadcast update of experiment '" + id + "' round " +
                    std::to_string(round));
  ATOLL_RETURN_IF_ERROR(st);
  return v;
}

Status Store::put_node(const std::string& experiment_id, const NodeRecord& node) {
  std::shared_lock<std::shared_mutex> db_lock(db_mu_);
  if (!db_) return not_open("put node " + node.node_id);
  rocksdb::WriteBatch batch;
  batch.Put(cfs_[kNodes].get(), experiment_id + "/" + node.node_id, node_to_json(node));
  return write(batch, false, "put node " + node.node_id);
}

StatusOr<std::vector<NodeRecord>> Store::list_nodes(const std::string& experiment_id) const {
  ATOLL_ASSIGN_OR_RETURN(auto values, scan_prefix(kNodes, experiment_id + "/"));
  std::vector<NodeRecord> out;
  for (const auto& v : values) {
    ATOLL_ASSIGN_OR_RETURN(NodeRecord n, node_from_json(v, "node record"));
    out.push_back(std::move(n));
  }
  return out;
}

Status Store::put_metrics(const std::string& experiment_id, const std::string& node_id,
                          uint64_t round, const std::string& json_text) {
  const std::string key =
      experiment_id + "/" + node_id + "/" + hex16(round) + "/" + hex16(seq_.fetch_add(1));
  std::shared_lock<std::shared_mutex> db_lock(db_mu_);
  if (!db_) return not_open("put metrics");
  rocksdb::WriteBatch batch;
  batch.Put(cfs_[kMetrics].get(), key, json_text);
  return write(batch, false, "put metrics");
}

StatusOr<std::vector<std::string>> Store::list_metrics(const std::string& experiment_id,
                                                       const std::string& node_id) const {
  return scan_prefix(kMetrics, experiment_id + "/" + (node_id.empty() ? "" : node_id + "/"));
}

StatusOr<std::vector<std::pair<std::string, std::string>>> Store::list_metrics_after(
    const std::string& experiment_id, const std::string& node_id,
    const std::string& after_key) const {
  const std::string prefix = experiment_id + "/" + node_id + "/";
  std::shared_lock<std::shared_mutex> lk(db_mu_);
  if (!db_) return not_open("scan metrics");
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cfs_[kMetrics].get()));
  std::vector<std::pair<std::string, std::string>> out;
  it->Seek(after_key.empty() ? prefix : after_key);
  if (!after_key.empty() && it->Valid() && it->key() == after_key) it->Next();
  for (; it->Valid() && it->key().starts_with(prefix); it->Next())
    out.emplace_back(it->key().ToString(), it->value().ToString());
  ATOLL_RETURN_IF_ERROR(from_rocks(it->status(), "scan metrics"));
  return out;
}

StatusOr<std::vector<std::string>> Store::metrics_reporters(
    const std::string& experiment_id) const {
  const std::string prefix = experiment_id + "/";
  std::shared_lock<std::shared_mutex> lk(db_mu_);
  if (!db_) return not_open("scan metrics");
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), cfs_[kMetrics].get()));
  std::vector<std::string> out;
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);) {
    const std::string rest = it->key().ToString().substr(prefix.size());
    const size_t slash = rest.find('/');
    if (slash == std::string::npos) {  // not a report key: step over it
      it->Next();
      continue;
    }
    out.push_back(rest.substr(0, slash));
    // Past every key of this node: '0' sorts right after '/'.
    it->Seek(prefix + out.back() + "0");
  }
  ATOLL_RETURN_IF_ERROR(from_rocks(it->status(), "scan metrics"));
  return out;
}

Status Store::append_audit(const std::string& experiment_id, const std::string& event,
                           const std::string& detail) {
  const uint64_t t = now_unix_ms();
  json::object o;
  o["unix_ms"] = t;
  o["event"] = event;
  o["detail"] = detail;
  const std::string key = experiment_id + "/" + hex16(t) + "/" + hex16(seq_.fetch_add(1));
  std::shared_lock<std::shared_mutex> db_lock(db_mu_);
  if (!db_) return not_open("append audit");
  rocksdb::WriteBatch batch;
  batch.Put(cfs_[kAudit].get(), key, json::serialize(o));
  return write(batch, false, "append audit");
}

StatusOr<std::vector<std::string>> Store::list_audit(const std::string& experiment_id) const {
  return scan_prefix(kAudit, experiment_id + "/");
}

Status Store::delete_experiment(const std::string& id) {
  if (!valid_id(id)) return NotFound("experiment '" + id + "' is not in the store");
  std::string existing;
  Status st = get(kExperiments, id, &existing);
  if (st.code() == StatusCode::kNotFound)
    return NotFound("experiment '" + id + "' is not in the store");
  ATOLL_RETURN_IF_ERROR(st);
  // Keys under an experiment are "<id>/..."; '0' is the byte after '/', so [<id>/, <id>0)
  // holds exactly them (ids never contain '/').
  const std::string begin = id + "/", end = id + "0";
  std::shared_lock<std::shared_mutex> db_lock(db_mu_);
  if (!db_) return not_open("delete experiment " + id);
  rocksdb::WriteBatch batch;
  for (Cf cf : {kNodes, kRounds, kParams, kOuterState, kMetrics, kAudit})
    batch.DeleteRange(cfs_[cf].get(), begin, end);
  batch.Delete(cfs_[kOuterState].get(), id);
  batch.Delete(cfs_[kExperiments].get(), id);
  ATOLL_RETURN_IF_ERROR(write(batch, options_.sync, "delete experiment " + id));
  std::error_code ec;
  std::filesystem::remove_all(blob_dir(id), ec);  // what is left is removed at the next open
  return Status::Ok();
}

Status Store::put_token(const TokenRecord& token) {
  if (token.hash.size() != 64) return InvalidArgument("token hash must be 64 hex digits");
  std::shared_lock<std::shared_mutex> db_lock(db_mu_);
  if (!db_) return not_open("put token");
  rocksdb::WriteBatch batch;
  batch.Put(cfs_[kTokens].get(), token.hash, token_to_json(token));
  return write(batch, options_.sync, "put token");
}

StatusOr<TokenRecord> Store::load_token(const std::string& hash) const {
  std::string v;
  Status st = get(kTokens, hash, &v);
  if (st.code() == StatusCode::kNotFound) return NotFound("unknown token");
  ATOLL_RETURN_IF_ERROR(st);
  return token_from_json(v, "token record");
}

StatusOr<std::vector<TokenRecord>> Store::list_tokens() const {
  ATOLL_ASSIGN_OR_RETURN(auto values, scan_prefix(kTokens, ""));
  std::vector<TokenRecord> out;
  for (const auto& v : values) {
    ATOLL_ASSIGN_OR_RETURN(TokenRecord t, token_from_json(v, "token record"));
    out.push_back(std::move(t));
  }
  return out;
}

Status Store::delete_token(const std::string& hash) {
  std::string v;
  ATOLL_RETURN_IF_ERROR(get(kTokens, hash, &v));
  std::shared_lock<std::shared_mutex> db_lock(db_mu_);
  if (!db_) return not_open("delete token");
  rocksdb::WriteBatch batch;
  batch.Delete(cfs_[kTokens].get(), hash);
  return write(batch, options_.sync, "delete token");
}

}  // namespace atl::coordinator
