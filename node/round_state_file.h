// A node's round state on disk (`atoll node --state-dir DIR`): the RoundSnapshot of the start of
// a round (node/round_snapshot.h), so that a node *process* that crashes and is started again
// redoes the interrupted round from the same state as the uninterrupted run, bit for bit.
//
// When files are written (node/site_worker.cc):
//   - after round r's update is computed and before it is pushed: the state the next round
//     starts from, as round r + 1 (with Streaming DiLoCo θ_local and the overlapped steps too);
//   - when a round starts afresh and no file for it was written yet (the first round after a
//     join, a round that does not follow the last one).
// So whatever the coordinator asks of a restarted node — round r again (its update never
// arrived, or the round was restarted) or round r + 1 (round r committed) — a file holds its
// start. As round r + 1 is written the files of rounds below r are deleted: only r and r + 1
// can be asked for. Each file is written atomically (temp file, fsync, rename, fsync of the
// directory: node/file_io.h) and ends with a CRC-32C of its bytes; a damaged file is refused, not
// used.
//
// File round-<R>.state, one directory per node:
//   "ATLRSTA1"  magic (8 bytes)
//   then StateWriter fields (node/state_bytes.h): experiment id, node id, layout fingerprint
//   (bytes each); round R, overlapped steps, whether θ_local follows (u64 each); θ_local (numel
//   floats, if it follows); the inner step's state and the sync strategy's state (bytes each,
//   InnerStep::encode_state / SyncStrategy::encode_state)
//   CRC-32C of everything before it (4 bytes, little-endian)
// Size: for plain DiLoCo with AdamW about 2·numel floats, + numel with a residual; Streaming
// adds θ_local (numel floats).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "kernels/core/status.h"
#include "node/inner_step.h"
#include "node/round_snapshot.h"
#include "node/sync_strategy.h"

namespace atl::node {

// A node's --state-dir before it joins: created when missing, refused in one line when it is a
// file or cannot be created (the node would otherwise find out after joining and train without
// crash safety). The directory's file "data" records what the node trains on (`identity`: its
// --data and a SHA-256 of its training tokens), written on first use; a directory that records
// other data is refused, since a state resumed over other data is not the uninterrupted run.
Status claim_state_dir(const std::string& dir, const std::string& identity);

// The host a --state-dir's states were written on: the directory's file "host" records `host`
// (kernels::cpu::backend_description(): the CPU, OpenBLAS's kernels and the build's vector
// width, what decides the bits besides the code). When it recorded another one, that host is
// returned and the file now names this one: a node resumed there continues its rounds, but
// not bit for bit as the uninterrupted run (docs/coordinator.md, "On one host").
std::optional<std::string> note_state_dir_host(const std::string& dir, const std::string& host);

// Whose state a file holds: a file written for another experiment, node or model is not used.
struct RoundStateOwner {
  std::string experiment_id;
  std::string node_id;
  std::string layout_fingerprint;
};

// Writes `snapshot` to dir/round-<snapshot.round>.state (crash-safe) and deletes the files of
// rounds below snapshot.round − 1. FAILED_PRECONDITION when `inner` or `sync` cannot encode
// their state (Hydra, a GPU's); IO_ERROR naming the file when the disk refuses.
Status write_round_state(const std::string& dir, const RoundStateOwner& owner,
                         const RoundSnapshot& snapshot, const InnerStep& inner,
                         const SyncStrategy& sync);

// The round states in `dir` written for `owner`, by round (none when the directory is empty or
// missing). Files of another owner are left out; a damaged file (bad magic, CRC, sizes) is an
// error naming it. numel: θ's element count.
StatusOr<std::map<uint64_t, RoundSnapshot>> read_round_states(const std::string& dir,
                                                              const RoundStateOwner& owner,
                                                              uint64_t numel,
                                                              const InnerStep& inner,
                                                              const SyncStrategy& sync);

}  // namespace atl::node
