// A demo's progress loop: follows the embedded coordinator's events until the experiment
// finishes, asking the sites for a failure between events and watching Ctrl-C. What to print
// for a committed round is the caller's; the loop prints one line per rejected update, lost
// node and restarted round.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "cli/demo_sites.h"
#include "cli/event_queue.h"
#include "coordinator/service.h"

namespace atl::cli {

struct DemoEventHandlers {
  // Each committed round, in order (the event's record is set).
  std::function<void(const coordinator::Event&)> on_round_committed;
  // The experiment finished (kFinished); the loop returns after it.
  std::function<void(const coordinator::Event&)> on_finished;
};

// Returns nullopt once the experiment finished, else the command's exit code: 130 when
// interrupted (the store in store_dir keeps every committed round), 1 when a site failed or the
// experiment failed (one line on stderr). Does not wait for the sites to leave.
std::optional<int> follow_demo_events(const std::string& command, EventQueue& events,
                                      DemoSites& sites, const std::string& store_dir,
                                      const DemoEventHandlers& handlers);

}  // namespace atl::cli
