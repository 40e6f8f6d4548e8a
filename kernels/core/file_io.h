// Whole-file reads and crash-safe writes (temp file + fsync + rename): a checkpoint on disk is
// either the old one or the new one, never half of each. The one file reader of every layer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/core/status.h"

namespace atl {

// Reads a whole file. NotFound when it does not exist; InvalidArgument, with one line saying so,
// when `path` is a directory (a model folder passed where a file belongs is a common slip).
StatusOr<std::string> read_file(const std::string& path);
// The same for a regular file of at most max_bytes; larger files are refused before reading.
StatusOr<std::string> read_file_bounded(const std::string& path, uint64_t max_bytes);
// Writes path atomically (path.tmp, fsync, rename, fsync dir); on failure path is untouched and
// path.tmp removed. Creates no directories.
Status write_file_atomic(const std::string& path, std::string_view bytes);

}  // namespace atl
