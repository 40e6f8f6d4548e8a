#include "node/site_config.h"

#include "kernels/core/sha256.h"

namespace atl::node {

namespace {

algorithms::TrainerConfig trainer_from_spec(const atoll_pb::v1::TrainSpec& t, int seq) {
  algorithms::TrainerConfig c;
  c.batch = static_cast<int>(t.batch_size());
  c.seq = seq;
  c.lr = t.lr();
  c.min_lr = t.min_lr();
  c.warmup = t.warmup_steps();
  c.total_steps = static_cast<int64_t>(t.total_inner_steps());
  c.weight_decay = t.weight_decay();
  c.beta1 = t.beta1();
  c.beta2 = t.beta2();
  c.grad_clip = t.grad_clip();
  return c;
}

}  // namespace

uint64_t site_seed(uint64_t experiment_seed, const std::string& node_id) {
  auto d = sha256(node_id.data(), node_id.size());
  uint64_t h = 0;
  for (int i = 0; i < 8; ++i) h = (h << 8) | d[i];
  return experiment_seed ^ h;
}

algorithms::ModelConfig model_from_spec(const atoll_pb::v1::ModelSpec& m) {
  algorithms::ModelConfig c;
  c.vocab = static_cast<int>(m.vocab());
  c.dim = static_cast<int>(m.dim());
  c.layers = static_cast<int>(m.layers());
  c.heads = static_cast<int>(m.heads());
  c.ffn_hidden = static_cast<int>(m.ffn_hidden());
  c.seq_len = static_cast<int>(m.seq_len());
  c.rope_base = m.rope_base();
  c.norm_eps = m.norm_eps();
  c.kv_heads = static_cast<int>(m.kv_heads());
  c.tie_word_embeddings = !m.untied_head();
  c.attention_bias = m.attention_bias();
  if (m.moe_experts() > 0) {  // otherwise the defaults: a dense model
    c.moe_experts = static_cast<int>(m.moe_experts());
    c.moe_top_k = static_cast<int>(m.moe_top_k());
    c.moe_hidden = static_cast<int>(m.moe_hidden());
    c.moe_every = static_cast<int>(m.moe_every());
    c.moe_score = m.moe_score();
    c.moe_shared_hidden = static_cast<int>(m.moe_shared_hidden());
    c.moe_aux_coef = m.moe_aux_coef();
    c.moe_z_coef = m.moe_z_coef();
  }
  return c;
}

algorithms::ParamLayout theta_layout(const SiteConfig& site) {
  return site.lora_enabled() ? algorithms::make_lora_layout(site.lora, site.model)
                             : algorithms::make_layout(site.model);
}

StatusOr<SiteConfig> site_config_from_join(const atoll_pb::v1::JoinResponse& joined) {
  SiteConfig s;
  s.model = model_from_spec(joined.model());
  ATOLL_RETURN_IF_ERROR(algorithms::validate(s.model));
  s.train = trainer_from_spec(joined.train(), s.model.seq_len);
  ATOLL_ASSIGN_OR_RETURN(s.train.optimizer,
                         algorithms::parse_inner_optimizer(joined.train().optimizer()));
  if (s.train.optimizer == algorithms::InnerOptimizer::kMuon)
    s.train.muon_momentum = joined.train().muon_momentum();
  ATOLL_RETURN_IF_ERROR(algorithms::validate(s.train, s.model));
  s.seed = site_seed(joined.train().seed(), joined.node_id());
  if (!joined.train().precision().empty()) {
    ATOLL_ASSIGN_OR_RETURN(s.train.precision,
                           algorithms::parse_precision(joined.train().precision()));
  }
  s.train.precision_seed = s.seed;  // this node's own stochastic-rounding streams
  s.spec = joined.train();
  if (joined.lora().rank() > 0) {
    s.lora.rank = static_cast<int>(joined.lora().rank());
    s.lora.alpha = joined.lora().alpha();
    auto targets = algorithms::parse_lora_targets(joined.lora().targets());
    if (!targets.ok())
      return InvalidArgument("the coordinator's LoRA targets: " + targets.status().message());
    s.lora.targets = *targets;
    if (!joined.lora().base_dtype().empty()) {
      auto storage = algorithms::parse_base_storage(joined.lora().base_dtype());
      if (!storage.ok())
        return InvalidArgument("the coordinator's LoRA base_dtype: " + storage.status().message());
      s.lora.base_storage = *storage;
    }
    if (Status st = algorithms::validate(s.lora, s.model); !st.ok())
      return InvalidArgument("the coordinator's LoRA config: " + st.message());
    s.base_fingerprint = joined.base_fingerprint();
  }
  return s;
}

}  // namespace atl::node
