// The store's large float arrays (θ versions, the outer momentum, the broadcast's error
// feedback) as files of their own, next to RocksDB rather than in it.
//
// Why: a value in RocksDB is copied into the write batch, the write-ahead log and the memtable,
// then written again by the flush (and by compactions): at 51.7M parameters that made a commit
// of θ, momentum and error feedback (620 MB) take 7-11 s on a 2-core host, most of the round.
// A file is written once from the caller's memory and synced; the RocksDB batch that commits
// the round names it, so a round is still all-or-nothing (store.h).
//
// File = "ATB1" | numel (u64 LE) | SHA-256 of the data (32 bytes) | numel fp32 LE: the layout a
// blob had inside RocksDB, so both decode the same way.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/core/status.h"

namespace atl::coordinator {

// The header of v's blob (its SHA-256 computed here).
std::string blob_header(std::span<const float> v);

// An in-memory blob (header + data) -> its floats; DATA_LOSS naming `what` if it is corrupt.
StatusOr<std::vector<float>> decode_blob(std::string_view blob, const std::string& what);

struct BlobWriteError {
  Status status;
  bool no_space = false;  // ENOSPC or EDQUOT: the disk is full
};

// Writes v's blob to `path` (created with mode 0600, replaced if present), then fdatasync()s it
// when `sync`. On failure the partial file is removed; the error names `what`.
BlobWriteError write_blob_file(const std::string& path, std::span<const float> v, bool sync,
                               const std::string& what);
// Reads and verifies the blob at `path`. NOT_FOUND if the file does not exist, DATA_LOSS if it
// is corrupt, IO_ERROR if it cannot be read.
StatusOr<std::vector<float>> read_blob_file(const std::string& path, const std::string& what);

// fsync() of a directory, so that the files created in it survive a crash.
Status sync_directory(const std::string& dir);

}  // namespace atl::coordinator
