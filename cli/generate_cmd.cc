// `atoll generate --checkpoint F --prompt TEXT [--tokens N] [--temperature T] [--top-k K]
// [--seed S]`: continues the prompt with the checkpoint's model and its own tokenizer (bytes, an
// Atoll BPE, or a tokenizer.json, whichever the checkpoint carries: node::tokenizer_from_blob).
// --temperature 0 is greedy (the largest logit, the lowest id among equals) and deterministic;
// above 0 it samples, reproducibly for a given --seed.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/flags.h"
#include "node/checkpoint.h"
#include "node/peft_export.h"
#include "node/site_data.h"

namespace atl::cli {

int cmd_generate(const Args& args) {
  Flags flags("generate", {{"checkpoint", true, "checkpoint (.safetensors) to sample from", ""},
                           {"prompt", true, "text to continue", "The "},
                           {"tokens", true, "tokens to generate", "200"},
                           {"temperature", true, "sampling temperature (0 = greedy)", "0.8"},
                           {"top-k", true, "sample among the k most likely tokens (0 = all)", "40"},
                           {"seed", true, "sampling seed", "1"}});
  if (Status s = flags.parse(args); !s.ok()) return fail("generate", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto path = flags.get("checkpoint");
  if (!path) return fail("generate", "--checkpoint is required (a file written by atoll train)", 2);
  auto n = flags.get_int("tokens", 200, 1, 1 << 20);
  auto temp = flags.get_double("temperature", 0.8, 0, 100);
  auto top_k = flags.get_int("top-k", 40, 0, 1 << 20);
  auto seed = flags.get_int("seed", 1, 0, INT64_MAX);
  if (!n.ok()) return fail("generate", n.status().message(), 2);
  if (!temp.ok()) return fail("generate", temp.status().message(), 2);
  if (!top_k.ok()) return fail("generate", top_k.status().message(), 2);
  if (!seed.ok()) return fail("generate", seed.status().message(), 2);
  auto ck = node::load_checkpoint(*path);
  if (!ck.ok()) {
    const std::string& why = ck.status().message();
    return fail("generate", why.find(*path) == std::string::npos ? *path + ": " + why : why, 2);
  }
  if (ck->meta.token_ids_only)
    return fail("generate",
                *path +
                    " was trained on token ids without their tokenizer, so there is no text to "
                    "encode a prompt or decode tokens with: train with --tokenizer hf:PATH (the "
                    "ids' tokenizer)",
                2);
  auto tok = node::tokenizer_from_blob(ck->meta.tokenizer);
  if (!tok.ok()) return fail("generate", *path + ": its tokenizer: " + tok.status().message(), 2);
  const std::string prompt = flags.get_or("prompt", "The ");
  auto ids = (*tok)->encode(prompt);
  if (ids.empty()) return fail("generate", "--prompt is empty; give some text to continue", 2);
  if (*top_k > ck->meta.model.vocab)
    return fail("generate",
                "--top-k " + std::to_string(*top_k) + " is more than the model's " +
                    std::to_string(ck->meta.model.vocab) +
                    " tokens (give at most that, or 0 to sample among all)",
                2);
  algorithms::Llama model(ck->meta.model);
  const bool lora = algorithms::lora_enabled(ck->meta.lora);  // adapters over the frozen base
  if (lora)
    model.attach_lora(ck->meta.lora, std::make_shared<algorithms::ParamSet>(std::move(ck->params)));
  auto out = model.generate(lora ? ck->adapters : ck->params, ids, static_cast<int>(*n),
                            static_cast<float>(*temp), static_cast<int>(*top_k),
                            static_cast<uint64_t>(*seed));
  if (!out.ok()) return fail("generate", out.status().message());
  // The bytes as decoded, NUL bytes included (a %s would stop at the first one).
  const std::string text = prompt + (*tok)->decode(*out) + "\n";
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace atl::cli
