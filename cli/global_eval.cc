#include "cli/global_eval.h"

#include <algorithm>
#include <utility>

#include "node/evaluate.h"

namespace atl::cli {

StatusOr<std::unique_ptr<GlobalEvaluator>> GlobalEvaluator::create(
    const algorithms::ModelConfig& model, const GlobalEvalOptions& options) {
  auto spec = node::parse_data_spec(options.data_spec);
  if (!spec.ok()) return InvalidArgument("eval data: " + spec.status().message());
  ATOLL_ASSIGN_OR_RETURN(
      node::SiteData data,
      node::load_site_data_with_blob(*spec, options.tokenizer_blob, options.brown_dir));
  if (data.validation.size() == 0)
    return InvalidArgument("eval data '" + options.data_spec +
                           "' has no held-out validation documents");
  // Rounds are charted in bits per byte; a wrong byte count would chart wrong figures.
  if (!data.validation.bytes_countable)
    return InvalidArgument("eval data '" + options.data_spec +
                           "': token ids without their tokenizer have no byte count, so bits "
                           "per byte cannot be computed: evaluate with text data (brown, "
                           "text:, jsonl:), or use `atoll eval` for the loss per token");
  if (data.tokenizer->vocab_size() > model.vocab)
    return InvalidArgument("eval data: the tokenizer has " +
                           std::to_string(data.tokenizer->vocab_size()) +
                           " ids, the model's vocab is " + std::to_string(model.vocab));
  return std::unique_ptr<GlobalEvaluator>(new GlobalEvaluator(model, options, std::move(data)));
}

GlobalEvaluator::GlobalEvaluator(const algorithms::ModelConfig& model, GlobalEvalOptions options,
                                 node::SiteData data)
    : model_(model),
      options_(std::move(options)),
      data_(std::move(data)),
      llama_(model),
      theta_(algorithms::make_layout(model)) {}

void GlobalEvaluator::attach_lora(const algorithms::LoraConfig& lora,
                                  std::shared_ptr<const algorithms::FrozenBase> base) {
  llama_.attach_lora(lora, std::move(base));
  theta_ = algorithms::ParamSet(llama_.layout());
}

double GlobalEvaluator::bpb(const algorithms::ParamSet& params) {
  return node::evaluate_bpb(llama_, params, data_.validation, *data_.tokenizer, model_.seq_len,
                            options_.batch, options_.max_tokens)
      .bpb;
}

StatusOr<double> GlobalEvaluator::evaluate_and_publish(RunningCoordinator& rc,
                                                       const std::string& id, uint64_t rounds_done,
                                                       const std::vector<float>* committed,
                                                       std::optional<uint64_t> publish_x) {
  std::vector<float> stored;
  if (committed == nullptr) {
    ATOLL_ASSIGN_OR_RETURN(stored, rc.store->load_params(id, rounds_done));
    committed = &stored;
  }
  if (committed->size() != theta_.numel())
    return FailedPrecondition("θ after round " + std::to_string(rounds_done) + " has " +
                              std::to_string(committed->size()) + " parameters, the model " +
                              std::to_string(theta_.numel()));
  std::copy(committed->begin(), committed->end(), theta_.data());
  const double v = bpb(theta_);
  ATOLL_RETURN_IF_ERROR(
      rc.manager->publish_metric(id, publish_x.value_or(rounds_done), "val_bpb", v));
  if (rc.metrics) rc.metrics->set_validation_bpb(id, v);
  return v;
}

}  // namespace atl::cli
