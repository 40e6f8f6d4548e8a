// `atoll import hf DIR --out CKPT`, `atoll export hf CKPT --out DIR [--dtype bf16]
// [--merge-lora]` and `atoll export peft CKPT --out DIR`: Hugging Face Llama-family model
// directories in and out of Atoll checkpoints, and LoRA adapters out as PEFT (docs/model.md).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "cli/commands.h"
#include "cli/flags.h"
#include "node/checkpoint.h"
#include "node/hf_model.h"
#include "node/peft_export.h"
#include "node/site_data.h"

namespace atl::cli {

namespace {

// The one positional argument after the format word "hf", or a usage error.
StatusOr<std::string> hf_source(const Flags& flags, const char* what) {
  const auto& pos = flags.positional();
  if (pos.size() != 2 || pos[0] != "hf")
    return InvalidArgument(std::string("usage: atoll ") + flags.command() + " hf " + what +
                           " --out PATH (hf is the only format)");
  return pos[1];
}

// Whether two paths name one file: the same inode (a hard link, a symlink, ./x and x), or, for
// a path that does not exist yet, the same place once normalised.
bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::equivalent(a, b, ec)) return true;
  const fs::path ca = fs::weakly_canonical(a, ec);
  if (ec) return false;
  const fs::path cb = fs::weakly_canonical(b, ec);
  return !ec && ca == cb;
}

}  // namespace

int cmd_import(const Args& args) {
  Flags flags("import", {{"out", true, "checkpoint file to write (.safetensors)", ""},
                         {"seq-len", true,
                          "context length of the model (default: max_position_embeddings)", ""}});
  flags.allow_positional(2);  // hf DIR
  if (Status s = flags.parse(args); !s.ok()) return fail("import", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto dir = hf_source(flags, "DIR");
  if (!dir.ok()) return fail("import", dir.status().message(), 2);
  auto out = flags.get("out");
  if (!out) return fail("import", "--out is required (the checkpoint file to write)", 2);
  auto seq = flags.get_int("seq-len", 0, 0, 1 << 20);
  if (!seq.ok()) return fail("import", seq.status().message(), 2);
  auto model = node::import_hf_dir(*dir, static_cast<int>(*seq));
  // A folder the import refuses (its config, weights or tokenizer files) is the user's input: 2.
  if (!model.ok())
    return fail("import", model.status().message(),
                model.status().code() == StatusCode::kInvalidArgument ? 2 : 1);
  // Writing over a source would replace the model's own weights (or config) with the checkpoint.
  for (const std::string& source : model->files)
    if (same_file(*out, source))
      return fail("import",
                  "--out " + *out + " is " + source +
                      ", a file the import reads: write the checkpoint outside the model folder "
                      "or under another name",
                  2);
  if (Status s = node::save_checkpoint(*out, model->meta, model->params, nullptr); !s.ok())
    return fail("import", s.message());
  const auto& m = model->meta.model;
  std::printf("imported %s: %lld parameters, %d layers, dim %d, heads %d (kv %d), vocab %d -> %s\n",
              model->meta.extra["hf.architecture"].c_str(),
              static_cast<long long>(model->params.numel()), m.layers, m.dim, m.heads,
              algorithms::num_kv_heads(m), m.vocab, out->c_str());
  return 0;
}

namespace {

// `atoll export peft CKPT --out DIR`: adapter_config.json + adapter_model.safetensors.
int export_peft(const std::string& ckpt, const std::string& out) {
  auto ck = node::load_checkpoint(ckpt);
  if (!ck.ok()) return fail("export", ck.status().message());
  if (Status s = node::export_peft_dir(*ck, out); !s.ok())
    return fail("export", ckpt + ": " + s.message());
  std::printf(
      "exported %s -> %s (adapter_config.json, adapter_model.safetensors: r %d, alpha %g, "
      "targets %s, %zu parameters)\n",
      ckpt.c_str(), out.c_str(), ck->meta.lora.rank, ck->meta.lora.alpha,
      algorithms::lora_targets_csv(ck->meta.lora).c_str(), ck->adapters.numel());
  return 0;
}

}  // namespace

int cmd_export(const Args& args) {
  Flags flags("export", {{"out", true, "directory to write (created if missing)", ""},
                         {"dtype", true, "tensor dtype: fp32 or bf16", "fp32"},
                         {"merge-lora", false,
                          "hf: fold a LoRA checkpoint's adapters into the weights", ""}});
  flags.allow_positional(2);  // hf CKPT, peft CKPT
  if (Status s = flags.parse(args); !s.ok()) return fail("export", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  const auto& pos = flags.positional();
  auto out = flags.get("out");
  if (pos.size() == 2 && pos[0] == "peft") {
    if (!out) return fail("export", "--out is required (the directory to write)", 2);
    // PEFT adapters are written as F32 and never merged: these flags would be silently ignored.
    if (flags.has("dtype"))
      return fail("export", "--dtype is for export hf: export peft writes F32 adapters (drop it)",
                  2);
    if (flags.has("merge-lora"))
      return fail("export",
                  "--merge-lora is for export hf: export peft writes the adapters alone (drop it, "
                  "or use atoll export hf CKPT --merge-lora for the merged model)",
                  2);
    return export_peft(pos[1], *out);
  }
  auto ckpt = hf_source(flags, "CKPT");
  if (!ckpt.ok())
    return fail("export", ckpt.status().message() + "; or: atoll export peft CKPT --out DIR", 2);
  if (!out) return fail("export", "--out is required (the directory to write)", 2);
  const std::string dtype_text = flags.get_or("dtype", "fp32");
  if (dtype_text != "fp32" && dtype_text != "bf16")
    return fail("export", "--dtype must be fp32 or bf16, got '" + dtype_text + "'", 2);
  auto ck = node::load_checkpoint(*ckpt);
  if (!ck.ok()) return fail("export", ck.status().message());
  const bool lora = algorithms::lora_enabled(ck->meta.lora);
  if (lora && !flags.has("merge-lora"))
    return fail("export",
                *ckpt +
                    " has LoRA adapters: pass --merge-lora to write the merged "
                    "model, or use `atoll export peft` for the adapters alone",
                2);
  if (!lora && flags.has("merge-lora"))
    return fail("export", *ckpt + " has no LoRA adapters to merge (drop --merge-lora)", 2);
  if (lora) {
    auto merged = node::merge_lora_checkpoint(*ck);
    if (!merged.ok()) return fail("export", merged.status().message());
    ck = std::move(merged);
  }
  const auto dtype = dtype_text == "bf16" ? algorithms::DType::kBF16 : algorithms::DType::kF32;
  std::vector<std::string> written;
  if (Status s = node::export_hf_dir(*ck, *out, dtype, &written); !s.ok())
    return fail("export", s.message());
  std::string files;
  for (const std::string& name : written)
    files +=
        (files.empty() ? "" : ", ") + name + (name == "model.safetensors" ? " " + dtype_text : "");
  const bool tokenizer =
      std::find(written.begin(), written.end(), "tokenizer.json") != written.end();
  std::printf("exported %s -> %s (%s%s)\n", ckpt->c_str(), out->c_str(), files.c_str(),
              tokenizer ? ""
                        : "; no tokenizer.json: Atoll's BPE has no exact Hugging Face form, so "
                          "atoll import hf cannot read this folder back");
  return 0;
}

}  // namespace atl::cli
