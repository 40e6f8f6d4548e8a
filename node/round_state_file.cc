#include "node/round_state_file.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "kernels/core/crc32c.h"
#include "kernels/core/file_io.h"
#include "node/state_bytes.h"

namespace atl::node {

Status claim_state_dir(const std::string& dir, const std::string& identity) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir, ec))
    return InvalidArgument("--state-dir " + dir + " is not a directory" +
                           (std::filesystem::exists(dir) ? " (it is a file)" : "") +
                           ": give a directory for this node's round states (created if missing)");
  // θ_local and the optimizer's moments: its user's only, as the coordinator's store (a
  // directory made before is narrowed; the files are written under the node's umask 077).
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace, ec);
  if (ec)
    return InvalidArgument("--state-dir " + dir + " cannot be made owner-only (" + ec.message() +
                           "): give a directory this user owns");
  const std::string path = (std::filesystem::path(dir) / "data").string();
  auto recorded = read_file_bounded(path, 4096);
  if (recorded.status().code() == StatusCode::kNotFound)
    return write_file_atomic(path, identity + "\n");
  if (!recorded.ok()) return recorded.status();
  std::string was = *recorded;
  while (!was.empty() && was.back() == '\n') was.pop_back();
  if (was != identity)
    return InvalidArgument("--state-dir " + dir + " holds the state of a node that trained on " +
                           was + ", this one trains on " + identity +
                           ": start it with the same --data, or give it another --state-dir");
  return Status::Ok();
}

std::optional<std::string> note_state_dir_host(const std::string& dir, const std::string& host) {
  const std::string path = (std::filesystem::path(dir) / "host").string();
  auto recorded = read_file_bounded(path, 4096);
  std::optional<std::string> was;
  if (recorded.ok()) {
    std::string text = *recorded;
    while (!text.empty() && text.back() == '\n') text.pop_back();
    if (text == host) return std::nullopt;
    was = text;
  }
  (void)write_file_atomic(path, host + "\n");  // best effort: it only informs
  return was;
}

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kMagic = "ATLRSTA1";
constexpr std::string_view kPrefix = "round-";
constexpr std::string_view kSuffix = ".state";

std::string file_name(uint64_t round) {
  return std::string(kPrefix) + std::to_string(round) + std::string(kSuffix);
}

// The round of a file named round-<R>.state; nullopt for any other name.
std::optional<uint64_t> round_of(const std::string& name) {
  if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) ||
      !name.ends_with(kSuffix))
    return std::nullopt;
  const std::string digits =
      name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.size() > 19 || !std::all_of(digits.begin(), digits.end(), ::isdigit))
    return std::nullopt;
  return std::stoull(digits);
}

// Every round-<R>.state in dir, by round.
std::map<uint64_t, fs::path> state_files(const std::string& dir) {
  std::map<uint64_t, fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (auto r = round_of(it->path().filename().string())) out[*r] = it->path();
  }
  return out;
}

void put_crc(std::string& bytes) {
  const uint32_t crc = crc32c(bytes);
  for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
}

// The bytes of a file before its CRC, when the CRC matches.
StatusOr<std::string_view> checked_body(std::string_view file) {
  if (file.size() < kMagic.size() + 4 || file.substr(0, kMagic.size()) != kMagic)
    return DataLoss("not a round state file (bad magic)");
  const std::string_view body = file.substr(0, file.size() - 4);
  uint32_t crc = 0;
  for (int i = 0; i < 4; ++i)
    crc |= uint32_t{static_cast<uint8_t>(file[file.size() - 4 + i])} << (8 * i);
  if (crc32c(body) != crc) return DataLoss("CRC-32C mismatch (a damaged file)");
  return body.substr(kMagic.size());
}

struct Parsed {
  RoundStateOwner owner;
  RoundSnapshot snapshot;
};

StatusOr<Parsed> parse(std::string_view body, uint64_t numel, const InnerStep& inner,
                       const SyncStrategy& sync) {
  StateReader r(body);
  Parsed p;
  ATOLL_ASSIGN_OR_RETURN(const std::string_view experiment, r.bytes());
  ATOLL_ASSIGN_OR_RETURN(const std::string_view node, r.bytes());
  ATOLL_ASSIGN_OR_RETURN(const std::string_view layout, r.bytes());
  p.owner = {std::string(experiment), std::string(node), std::string(layout)};
  ATOLL_ASSIGN_OR_RETURN(p.snapshot.round, r.u64());
  ATOLL_ASSIGN_OR_RETURN(const uint64_t overlap, r.u64());
  ATOLL_ASSIGN_OR_RETURN(const uint64_t has_local, r.u64());
  if (overlap > UINT32_MAX || has_local > 1) return DataLoss("bad header fields");
  p.snapshot.overlap_steps = static_cast<uint32_t>(overlap);
  if (has_local == 1) {
    ATOLL_ASSIGN_OR_RETURN(std::vector<float> local, r.floats(numel));
    p.snapshot.local.emplace();
    p.snapshot.local->vec() = std::move(local);
  }
  ATOLL_ASSIGN_OR_RETURN(const std::string_view inner_bytes, r.bytes());
  ATOLL_ASSIGN_OR_RETURN(const std::string_view sync_bytes, r.bytes());
  if (!r.done()) return DataLoss("bytes after the sync state");
  ATOLL_ASSIGN_OR_RETURN(p.snapshot.inner, inner.decode_state(inner_bytes));
  ATOLL_ASSIGN_OR_RETURN(p.snapshot.sync, sync.decode_state(sync_bytes));
  return p;
}

}  // namespace

Status write_round_state(const std::string& dir, const RoundStateOwner& owner,
                         const RoundSnapshot& snapshot, const InnerStep& inner,
                         const SyncStrategy& sync) {
  ATOLL_ASSIGN_OR_RETURN(const std::string inner_bytes, inner.encode_state(*snapshot.inner));
  ATOLL_ASSIGN_OR_RETURN(const std::string sync_bytes, sync.encode_state(*snapshot.sync));
  StateWriter w;
  w.bytes(owner.experiment_id);
  w.bytes(owner.node_id);
  w.bytes(owner.layout_fingerprint);
  w.u64(snapshot.round);
  w.u64(snapshot.overlap_steps);
  w.u64(snapshot.local ? 1 : 0);
  if (snapshot.local) w.floats(snapshot.local->vec());
  w.bytes(inner_bytes);
  w.bytes(sync_bytes);
  std::string file = std::string(kMagic) + w.take();
  put_crc(file);
  const std::string path = (fs::path(dir) / file_name(snapshot.round)).string();
  ATOLL_RETURN_IF_ERROR(write_file_atomic(path, file));
  for (const auto& [round, old] : state_files(dir)) {
    if (round + 1 >= snapshot.round) break;
    std::error_code ec;
    fs::remove(old, ec);  // a file left behind is skipped by round at the next start
  }
  return Status::Ok();
}

StatusOr<std::map<uint64_t, RoundSnapshot>> read_round_states(const std::string& dir,
                                                              const RoundStateOwner& owner,
                                                              uint64_t numel,
                                                              const InnerStep& inner,
                                                              const SyncStrategy& sync) {
  std::map<uint64_t, RoundSnapshot> out;
  // θ_local, AdamW's two moments and a residual, with room for the headers.
  const uint64_t max_bytes = 8 * numel * sizeof(float) + (uint64_t{1} << 20);
  for (const auto& [round, path] : state_files(dir)) {
    auto bytes = read_file_bounded(path.string(), max_bytes);
    if (!bytes.ok()) return bytes.status();
    auto parsed = checked_body(*bytes);
    StatusOr<Parsed> p = parsed.ok() ? parse(*parsed, numel, inner, sync) : parsed.status();
    if (!p.ok())
      return DataLoss("round state " + path.string() + ": " + p.status().message() +
                      ": delete the file (the node then trains on with a fresh optimizer state)");
    if (p->owner.experiment_id != owner.experiment_id || p->owner.node_id != owner.node_id ||
        p->owner.layout_fingerprint != owner.layout_fingerprint || p->snapshot.round != round)
      continue;
    out.emplace(round, std::move(p->snapshot));
  }
  return out;
}

}  // namespace atl::node
