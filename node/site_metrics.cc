#include "node/site_metrics.h"

#include <algorithm>

namespace atl::node {

const std::vector<double>& site_round_buckets() {
  static const std::vector<double> b = {0.5, 1,   2.5, 5,    10,   30,  60,
                                        120, 300, 600, 1800, 3600, 7200};
  return b;
}

namespace {

constexpr const char* kBytesHelp =
    "Payload bytes between this node and the coordinator: up = updates pushed, down = "
    "parameters pulled.";
constexpr const char* kWireHelp =
    "Wall seconds of the pulls (down) and pushes (up) on the wire: a pull from the call to its "
    "last chunk, a push from the call to the coordinator's answer less its work after the "
    "payload.";

}  // namespace

SiteMetrics::SiteMetrics()
    : steps_(registry_.counter("atoll_node_inner_steps_total", "Inner training steps taken.")),
      tokens_(registry_.counter("atoll_node_tokens_total", "Training tokens of the inner steps.")),
      rounds_(registry_.counter("atoll_node_rounds_total", "Rounds whose update was pushed.")),
      train_seconds_(registry_.counter("atoll_node_inner_step_seconds_total",
                                       "Wall seconds spent in inner steps (compute).")),
      bytes_up_(registry_.counter("atoll_node_bytes_total", kBytesHelp, {{"direction", "up"}})),
      bytes_down_(registry_.counter("atoll_node_bytes_total", kBytesHelp, {{"direction", "down"}})),
      wire_up_seconds_(registry_.counter("atoll_node_transfer_seconds_total", kWireHelp,
                                         {{"direction", "up"}})),
      wire_down_seconds_(registry_.counter("atoll_node_transfer_seconds_total", kWireHelp,
                                           {{"direction", "down"}})),
      loss_(registry_.gauge("atoll_node_loss", "Training loss (nats) of the latest inner step.")),
      round_gauge_(registry_.gauge("atoll_node_round", "The round being trained.")),
      round_seconds_(registry_.histogram("atoll_node_round_duration_seconds",
                                         "Inner training time of each round pushed.",
                                         site_round_buckets())) {
  transport::metrics::add_process_metrics(registry_);
}

void SiteMetrics::joined(const std::string& experiment_id, const std::string& node_id) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    experiment_ = experiment_id;
  }
  registry_.set_info("atoll_node_info", "The experiment this node joined and its id (value 1).",
                     {{"experiment", experiment_id}, {"node", node_id}});
}

void SiteMetrics::inner_step(uint64_t round, double loss, uint64_t tokens) {
  steps_.add();
  tokens_.add(static_cast<double>(tokens));
  loss_.set(loss);
  round_gauge_.set(static_cast<double>(round));
  round_.store(static_cast<int64_t>(round), std::memory_order_relaxed);
}

void SiteMetrics::trained(double seconds) {
  train_seconds_.add(seconds);
}

void SiteMetrics::pulled(uint64_t bytes) {
  bytes_down_.add(static_cast<double>(bytes));
}

void SiteMetrics::pushed(uint64_t bytes) {
  bytes_up_.add(static_cast<double>(bytes));
}

void SiteMetrics::transfer_seconds(double pull_total, double push_total) {
  std::lock_guard<std::mutex> lk(mu_);
  if (pull_total > pull_seconds_seen_) wire_down_seconds_.add(pull_total - pull_seconds_seen_);
  if (push_total > push_seconds_seen_) wire_up_seconds_.add(push_total - push_seconds_seen_);
  pull_seconds_seen_ = std::max(pull_seconds_seen_, pull_total);
  push_seconds_seen_ = std::max(push_seconds_seen_, push_total);
}

void SiteMetrics::round_done(double train_seconds, std::optional<double> site_val_bpb) {
  // The observation first: a scrape in between sees the histogram's count at most one ahead of
  // the rounds, never behind.
  round_seconds_.observe(train_seconds);
  rounds_.add();
  // Registered with the first value: a site without validation data has no such series.
  if (site_val_bpb)
    registry_
        .gauge("atoll_node_site_validation_bits_per_byte",
               "Bits per byte on the site's own validation data of the θ its latest round "
               "started from.")
        .set(*site_val_bpb);
}

std::string SiteMetrics::experiment() const {
  std::lock_guard<std::mutex> lk(mu_);
  return experiment_;
}

std::optional<uint64_t> SiteMetrics::round() const {
  const int64_t r = round_.load(std::memory_order_relaxed);
  if (r < 0) return std::nullopt;
  return static_cast<uint64_t>(r);
}

}  // namespace atl::node
