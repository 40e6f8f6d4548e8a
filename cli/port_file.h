// A server's bound address handed to the process that started it, through a file: the server
// writes "HOST:PORT\n" once it listens (`atoll node --role teacher --port-file PATH`), the
// parent waits for the file. The write is atomic (a temporary file renamed into place), so a
// reader sees nothing or the whole address.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "kernels/core/status.h"

namespace atl::cli {

Status write_port_file(const std::string& path, const std::string& address);

// Waits up to `timeout` for the file; `gone` (may be empty) is asked between looks and ends
// the wait with its message when the server has exited. DeadlineExceeded after the timeout.
StatusOr<std::string> wait_for_port_file(const std::string& path, std::chrono::seconds timeout,
                                         const std::function<std::optional<std::string>()>& gone);

}  // namespace atl::cli
