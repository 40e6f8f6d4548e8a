#include "cli/demo_events.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/signals.h"

namespace atl::cli {

std::optional<int> follow_demo_events(const std::string& cmd, EventQueue& events, DemoSites& sites,
                                      const std::string& store_dir,
                                      const DemoEventHandlers& handlers) {
  const auto* stop = install_stop_signals();
  for (;;) {
    if (stop->load()) {
      std::printf(
          "interrupted: the store in %s keeps every committed round; the same command with "
          "--store %s resumes it\n",
          store_dir.c_str(), std::filesystem::path(store_dir).parent_path().c_str());
      return stopped_exit_code();
    }
    if (auto failure = sites.failure()) return fail(cmd, *failure);
    auto e = events.pop(std::chrono::milliseconds(200));
    if (!e) continue;
    using K = coordinator::Event::Kind;
    if (e->kind == K::kRoundCommitted && e->record) {
      if (handlers.on_round_committed) handlers.on_round_committed(*e);
    } else if (e->kind == K::kFinished) {
      if (handlers.on_finished) handlers.on_finished(*e);
      return std::nullopt;
    } else if (e->kind == K::kFailed) {
      return fail(cmd, "experiment failed: " + e->message);
    } else if (e->kind == K::kStore) {
      std::printf("%s\n", e->message.c_str());
    } else if (e->kind == K::kUpdateRejected || e->kind == K::kNodeLost ||
               e->kind == K::kNodeRevoked || e->kind == K::kRoundRestarted) {
      std::printf("%s %s: %s\n", coordinator::event_kind_name(e->kind), e->node_id.c_str(),
                  e->message.c_str());
    }
  }
}

}  // namespace atl::cli
