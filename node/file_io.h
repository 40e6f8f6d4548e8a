// Whole-file reads and crash-safe writes (temp file + fsync + rename): a checkpoint on disk is
// either the old one or the new one, never half of each.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/core/status.h"

namespace atl::node {

// Reads a file of at most max_bytes; larger files are refused before reading.
StatusOr<std::string> read_file_bounded(const std::string& path, uint64_t max_bytes);
// Writes path atomically (path.tmp, fsync, rename, fsync dir). Creates no directories.
Status write_file_atomic(const std::string& path, std::string_view bytes);

}  // namespace atl::node
