#include "node/node_runner.h"

#include "kernels/cpu/ops.h"
#include "node/coordinator_client.h"
#include "node/gpu_trainer.h"
#include "node/site_worker.h"
#include "node/teacher_client.h"
#include "transport/tls/credentials.h"

namespace atl::node {

Status run_node(const NodeOptions& opt) {
  // Before joining: a GPU flag this build or machine cannot honour is one line, not a join.
  ATOLL_RETURN_IF_ERROR(resolve_devices(opt.device, opt.devices).status());

  ClientOptions co;
  co.target = opt.coordinator;
  co.node_name = opt.name;
  co.log = opt.log;
  SiteWorkerOptions wo;
  if (opt.insecure) {
    co.tls = transport::insecure_client_credentials();
    if (!opt.distill.teachers.empty()) wo.teacher_tls = transport::insecure_client_credentials();
  } else {
    ATOLL_ASSIGN_OR_RETURN(co.tls,
                           transport::client_credentials(opt.tls_dir, opt.name, opt.server_name));
    if (!opt.distill.teachers.empty()) {
      // The node's certificate, checked against the teachers' server name.
      ATOLL_ASSIGN_OR_RETURN(
          wo.teacher_tls, site_teacher_credentials(opt.tls_dir, opt.name, opt.distill.server_name));
    }
  }
  CoordinatorClient client(co);
  // Process-global: set here, once, not by the worker (in-process simulations run many).
  kernels::cpu::set_num_threads(opt.threads);

  wo.name = opt.name;
  wo.coordinator = opt.coordinator;
  wo.data_spec = opt.data_spec;
  wo.brown_dir = opt.brown_dir;
  wo.holdout = opt.holdout;
  wo.val_data_spec = opt.val_data_spec;
  wo.val_tokens = opt.val_tokens;
  wo.data = opt.data;
  wo.device = opt.device;
  wo.devices = opt.devices;
  wo.threads = opt.threads;
  wo.budget = opt.budget;
  wo.give_up_after_s = opt.give_up_after_s;
  wo.state_dir = opt.state_dir;
  wo.keep_best = opt.keep_best;
  wo.base = opt.base;
  wo.base_exclusive = opt.base_exclusive;
  wo.stop = opt.stop;
  wo.log = opt.log;
  wo.metrics = opt.metrics;
  wo.distill = opt.distill;
  return run_site_worker(client, wo);
}

}  // namespace atl::node
