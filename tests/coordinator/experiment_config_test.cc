// Experiment config (TOML): defaults, round trip, and one clear line for each kind of mistake.
#include "coordinator/experiment_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "tools/temp_dir.h"

namespace atl::coordinator {
namespace {

std::string error_of(const std::string& toml) {
  auto c = parse_experiment_config(toml);
  if (c.ok()) return "OK";
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message().find('\n'), std::string::npos) << "must be one line";
  return c.status().message();
}

TEST(ExperimentConfig, EmptyFileGivesDocumentedDefaults) {
  auto c = parse_experiment_config("");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->name, "demo");
  EXPECT_DOUBLE_EQ(c->diloco.outer_lr, 0.7);
  EXPECT_DOUBLE_EQ(c->diloco.outer_momentum, 0.9);
  EXPECT_EQ(c->train.codec, "none");
  EXPECT_EQ(c->diloco.keep_params, 3u);
}

TEST(ExperimentConfig, ParsesEverySectionAndRoundTrips) {
  const char* text = R"(
name = "brown-4"
seed = 42
[model]
vocab = 256
dim = 64
layers = 2
heads = 4
ffn_hidden = 192
seq_len = 64
[train]
batch_size = 4
lr = 1e-3
min_lr = 0
warmup_steps = 5
codec = "topk:0.02+int4"
[diloco]
rounds = 3
inner_steps = 10
outer_lr = 1      # integers are accepted for floats
outer_momentum = 0.5
min_nodes = 2
max_nodes = 4
round_deadline_s = 30
[data]
source = "text"
paths = ["a.txt", "b dir"]
split = "iid"
)";
  auto c = parse_experiment_config(text);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->name, "brown-4");
  EXPECT_EQ(c->seed, 42u);
  EXPECT_EQ(c->model.dim, 64u);
  EXPECT_DOUBLE_EQ(c->diloco.outer_lr, 1.0);
  EXPECT_EQ(c->diloco.min_nodes, 2u);
  EXPECT_EQ(c->data.paths.size(), 2u);
  auto again = parse_experiment_config(to_toml(*c));
  ASSERT_TRUE(again.ok()) << again.status().to_string() << "\n" << to_toml(*c);
  EXPECT_EQ(to_toml(*again), to_toml(*c));
}

// Every string survives the stored TOML: each control character (NUL and DEL included), quotes,
// backslashes and UTF-8. TOML forbids control characters unescaped in a basic string, so a
// config holding one was once stored as TOML that no later start could read.
TEST(ExperimentConfig, AnyStringRoundTripsThroughTheStoredToml) {
  std::string every_ascii;
  for (int c = 0; c < 128; ++c) every_ascii += static_cast<char>(c);
  ExperimentConfig c;
  c.data.source = "text";
  c.data.paths = {every_ascii,
                  std::string("a\0b", 3),
                  "a\x01"
                  "b",
                  "tab\tnew\nline\r\f\b",
                  "q\"uote\\back",
                  "\x7f",
                  "é ∑ 🙂",
                  ""};
  c.lora.rank = 4;
  c.lora.base = "dir\x1f/base\".safetensors";
  c.lora.base_fingerprint = std::string(64, 'a');
  const std::string text = to_toml(c);
  auto back = parse_experiment_config(text);
  ASSERT_TRUE(back.ok()) << back.status().to_string() << "\n" << text;
  EXPECT_EQ(back->data.paths, c.data.paths);
  EXPECT_EQ(back->lora.base, c.lora.base);
  EXPECT_EQ(to_toml(*back), text);
  EXPECT_EQ(toml_string(std::string("a\0\x01\x1f\x7f\t\"\\z", 9)),
            "\"a\\u0000\\u0001\\u001F\\u007F\\t\\\"\\\\z\"");
}

TEST(ExperimentConfig, RobustSectionDefaultsParseRoundTripAndErrors) {
  auto d = parse_experiment_config("");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->robust.screen, "drop");
  EXPECT_DOUBLE_EQ(d->robust.norm_multiple, 5.0);
  EXPECT_DOUBLE_EQ(d->robust.max_norm, 0.0);
  EXPECT_DOUBLE_EQ(d->robust.replay_cosine, 0.99);
  EXPECT_DOUBLE_EQ(d->robust.stale_margin, 0.05);
  EXPECT_EQ(d->robust.aggregator, "mean");
  auto c = parse_experiment_config(
      "[robust]\nscreen = \"drop\"\nnorm_multiple = 4\nmax_norm = 1e3\nreplay_cosine = "
      "0.95\naggregator = "
      "\"trimmed-mean\"\ntrim_fraction = 0.25\nclip_multiple = 2.0\nkrum_byzantine = 2\n"
      "krum_keep = 3\nstale_margin = 0.2\n[diloco]\nmin_nodes = 5\nmax_nodes = 8\n");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(screen_options(*c).mode, algorithms::ScreenMode::kDrop);
  EXPECT_DOUBLE_EQ(screen_options(*c).max_norm, 1e3);
  EXPECT_EQ(aggregator_options(*c).kind, algorithms::AggregatorKind::kTrimmedMean);
  EXPECT_DOUBLE_EQ(aggregator_options(*c).trim_fraction, 0.25);
  EXPECT_EQ(aggregator_options(*c).krum_keep, 3u);
  EXPECT_DOUBLE_EQ(c->robust.replay_cosine, 0.95);
  EXPECT_DOUBLE_EQ(c->robust.stale_margin, 0.2);
  auto again = parse_experiment_config(to_toml(*c));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(to_toml(*again), to_toml(*c));

  EXPECT_NE(error_of("[robust]\nscreen = \"maybe\"\n").find("robust.screen"), std::string::npos);
  EXPECT_NE(
      error_of("[robust]\nnorm_multiple = 0.5\n").find("robust.norm_multiple = 0.5 must be >= 1"),
      std::string::npos);
  EXPECT_NE(error_of("[robust]\nmax_norm = -1\n").find("robust.max_norm"), std::string::npos);
  for (const char* bad : {"1.5", "-0.1"})
    EXPECT_NE(error_of(std::string("[robust]\nreplay_cosine = ") + bad + "\n")
                  .find("robust.replay_cosine = " + std::string(bad) +
                        " must be in [0, 1] (0 = no replay detection)"),
              std::string::npos)
        << bad;
  for (const char* bad : {"2.5", "-0.1"})
    EXPECT_NE(error_of(std::string("[robust]\nstale_margin = ") + bad + "\n")
                  .find("robust.stale_margin = " + std::string(bad) +
                        " must be in [0, 2] (a difference of two cosines; 0 = no stale "
                        "detection)"),
              std::string::npos)
        << bad;
  EXPECT_NE(error_of("[robust]\naggregator = \"average\"\n").find("robust.aggregator"),
            std::string::npos);
  EXPECT_NE(error_of("[robust]\ntrim_fraction = 0.5\n").find("robust.trim_fraction"),
            std::string::npos);
  EXPECT_NE(error_of("[robust]\nkrum_keep = 0\n").find("robust.krum_keep"), std::string::npos);
  // Krum needs 2f + 3 updates: max_nodes = 4 with f = 1 is refused, 5 is not.
  EXPECT_NE(error_of("[diloco]\nmax_nodes = 4\n[robust]\naggregator = \"krum\"\n")
                .find("robust.krum_byzantine = 1 needs at least 2 x krum_byzantine + 3 = 5 "
                      "updates a round, and diloco.max_nodes = 4 allows fewer"),
            std::string::npos);
  EXPECT_EQ(error_of("[diloco]\nmax_nodes = 5\n[robust]\naggregator = \"krum\"\n"), "OK");
  // A trimmed mean that cuts nothing from a round of min_nodes updates (⌊0.2 × 4⌋ = 0) was
  // silently the plain mean: refused with what would cut one.
  EXPECT_NE(error_of("[diloco]\nmin_nodes = 4\n[robust]\naggregator = \"trimmed-mean\"\n")
                .find("robust.trim_fraction = 0.2 cuts nothing from a round of "
                      "diloco.min_nodes = 4 updates (floor(trim_fraction x 4) = 0: such rounds "
                      "would be a plain mean); raise diloco.min_nodes to at least 5, or "
                      "trim_fraction to at least 0.25"),
            std::string::npos);
  EXPECT_EQ(error_of("[diloco]\nmin_nodes = 5\n[robust]\naggregator = \"trimmed-mean\"\n"), "OK");
  EXPECT_EQ(error_of("[diloco]\nmin_nodes = 4\n[robust]\naggregator = \"trimmed-mean\"\n"
                     "trim_fraction = 0.25\n"),
            "OK");
  EXPECT_NE(error_of("algorithm = \"hydra\"\n[robust]\naggregator = \"krum\"\n")
                .find("cannot be used with algorithm = \"hydra\""),
            std::string::npos);
  EXPECT_NE(error_of("[robust]\nnorm_multiplier = 3\n").find("did you mean robust.norm_multiple"),
            std::string::npos);
}

TEST(ExperimentConfig, HydraSectionParsesAndRoundTrips) {
  auto c = parse_experiment_config(
      "algorithm = \"hydra\"\n[model]\nffn_hidden = 96\n[hydra]\nreselect_every = 3\n"
      "min_coverage = 2\nffn_blocks = 6\nimportance_batches = 2\nmin_train_share = 0.25\n"
      "removal_penalty = 3.5\ntrained_layers = \"per_site\"\n");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(c->is_hydra());
  EXPECT_EQ(c->hydra.reselect_every, 3u);
  EXPECT_EQ(c->hydra.min_coverage, 2u);
  EXPECT_EQ(c->hydra.ffn_blocks, 6u);
  EXPECT_EQ(c->hydra.importance_batches, 2u);
  EXPECT_DOUBLE_EQ(c->hydra.min_train_share, 0.25);
  EXPECT_DOUBLE_EQ(c->hydra.removal_penalty, 3.5);
  EXPECT_EQ(c->hydra.trained_layers, "per_site");
  auto again = parse_experiment_config(to_toml(*c));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(to_toml(*again), to_toml(*c));
  EXPECT_EQ(again->hydra.trained_layers, "per_site");
  auto plain = parse_experiment_config("");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->is_hydra());
  EXPECT_EQ(plain->hydra.trained_layers, "global");  // old configs keep one trained layer set
  EXPECT_NE(error_of("[hydra]\ntrained_layers = \"each\"\n").find("hydra.trained_layers"),
            std::string::npos);
}

TEST(ExperimentConfig, HydraForwardSharePowerParsesValidatesAndRoundTrips) {
  auto c = parse_experiment_config("algorithm = \"hydra\"\n[hydra]\nforward_share_power = 2.5\n");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->hydra.forward_share_power, 2.5);
  EXPECT_NE(to_toml(*c).find("forward_share_power = 2.5"), std::string::npos) << to_toml(*c);
  auto again = parse_experiment_config(to_toml(*c));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->hydra.forward_share_power, 2.5);
  // Unset: 0 (tokens alone), and the stored config reads as it did before the key existed.
  auto plain = parse_experiment_config("algorithm = \"hydra\"\n");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->hydra.forward_share_power, 0.0);
  EXPECT_EQ(to_toml(*plain).find("forward_share_power"), std::string::npos);
  // error_of checks one line; out of range names the range, not finite says so.
  for (const char* bad : {"8.5", "-1.0", "nan", "inf"}) {
    const std::string e = error_of(std::string("[hydra]\nforward_share_power = ") + bad + "\n");
    EXPECT_NE(e.find("hydra.forward_share_power"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find(std::isfinite(std::stod(bad)) ? "[0, 8]" : "must be a finite number"),
              std::string::npos)
        << bad << ": " << e;
  }
}

TEST(ExperimentConfig, OneLineErrorsNameTheKeyAndTheFix) {
  EXPECT_EQ(error_of("[diloco]\nouter_momentum = 1.5\n"),
            "config.toml: diloco.outer_momentum = 1.5 must be in [0, 1)");
  EXPECT_EQ(error_of("[diloco]\nouter_momentun = 0.5\n"),
            "config.toml: unknown key diloco.outer_momentun (did you mean diloco.outer_momentum?); "
            "known keys in [diloco]: rounds, inner_steps, outer_lr, outer_momentum, min_nodes, "
            "max_nodes, round_deadline_s, heartbeat_interval_s, lost_after_heartbeats, "
            "start_wait_s, keep_params, pull_codec, streaming_fragments, overlap_steps, "
            "merge_alpha, final_look_ahead");
  EXPECT_EQ(error_of("[model]\ndim = \"big\"\n"),
            "config.toml: model.dim = \"big\" must be an integer");
  EXPECT_EQ(error_of("[model]\ndim = 100\nheads = 3\n"),
            "config.toml: model.dim = 100 must be divisible by model.heads = 3");
  EXPECT_EQ(error_of("[train]\nlr = -1\n"), "config.toml: train.lr = -1 must be > 0");
  EXPECT_EQ(error_of("[diloco]\nmin_nodes = 5\nmax_nodes = 2\n"),
            "config.toml: diloco.max_nodes = 2 must be >= diloco.min_nodes = 5");
  // The range a key really has (rounds start at 1), not only its type's.
  EXPECT_EQ(error_of("[diloco]\nrounds = -3\n"),
            "config.toml: diloco.rounds = -3 must be an integer in [1, 4294967295]");
  EXPECT_EQ(error_of("[diloco]\ninner_steps = 9999999999999\n"),
            "config.toml: diloco.inner_steps = 9999999999999 must be an integer in [1, "
            "4294967295]");
  EXPECT_EQ(error_of("[model]\nvocab = -1\n"),
            "config.toml: model.vocab = -1 must be an integer in [2, 4294967295]");
  EXPECT_EQ(error_of("[train]\nwarmup_steps = -1\n"),
            "config.toml: train.warmup_steps = -1 must be an integer in [0, 4294967295]");
  EXPECT_EQ(error_of("name = \"a/b\"\n"),
            "config.toml: name = \"a/b\" must be 1-64 characters of [A-Za-z0-9._-], and not "
            "\".\" or \"..\"");
  // "." and ".." are characters of the set, but a browser resolves them out of a URL's path.
  for (const char* dots : {".", ".."})
    EXPECT_EQ(error_of("name = \"" + std::string(dots) + "\"\n"),
              "config.toml: name = \"" + std::string(dots) +
                  "\" must be 1-64 characters of [A-Za-z0-9._-], and not \".\" or \"..\"");
  EXPECT_TRUE(parse_experiment_config("name = \"...\"\n").ok());
  EXPECT_EQ(error_of("[data]\nsplit = \"random\"\n"),
            "config.toml: data.split = \"random\" must be \"genre\" or \"iid\"");
  EXPECT_EQ(error_of("[data]\nsource = \"text\"\n"),
            "config.toml: data.paths = [] must list at least one file or directory when "
            "data.source = \"text\"");
  EXPECT_EQ(error_of("bogus = 1\n")
                .rfind("config.toml: unknown key bogus; known keys: name, seed, algorithm, "
                       "[model], [train], [diloco], [hydra], [data]",
                       0),
            0u);
  EXPECT_EQ(error_of("model = 3\n"), "config.toml: model must be a table ([model])");
  // Hydra (docs/hydra.md).
  EXPECT_EQ(error_of("algorithm = \"hydro\"\n"),
            "config.toml: algorithm = \"hydro\" must be \"diloco\" or \"hydra\"");
  EXPECT_EQ(error_of("algorithm = \"hydra\"\n[hydra]\nffn_blocks = 5\n"),
            "config.toml: hydra.ffn_blocks = 5 must be >= 1 and divide model.ffn_hidden = 768");
  EXPECT_EQ(error_of("[hydra]\nreselect_every = 0\n"),
            "config.toml: hydra.reselect_every = 0 must be >= 1");
  EXPECT_NE(error_of("algorithm = \"hydra\"\n[diloco]\nstreaming_fragments = 2\ninner_steps = 50\n")
                .find("cannot be combined with Streaming DiLoCo"),
            std::string::npos);
  EXPECT_NE(error_of("algorithm = \"hydra\"\n[model]\nmoe_experts = 4\nmoe_hidden = 64\n")
                .find("\"hydra\" does not support MoE models yet"),
            std::string::npos);
  EXPECT_NE(error_of("algorithm = \"hydra\"\n[train]\nprecision = \"bf16\"\n")
                .find("\"hydra\" trains in fp32 only"),
            std::string::npos);
  const std::string syntax = error_of("[diloco\nrounds = 3\n");
  EXPECT_EQ(syntax.rfind("config.toml:1:", 0), 0u) << syntax;
  EXPECT_NE(syntax.find("TOML syntax error"), std::string::npos) << syntax;
}

TEST(ExperimentConfig, StreamingAndPullKeys) {
  auto c = parse_experiment_config("");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->diloco.pull_codec, "exact");
  EXPECT_EQ(c->diloco.streaming_fragments, 1u);
  EXPECT_EQ(c->diloco.overlap_steps, 0u);
  EXPECT_DOUBLE_EQ(c->diloco.merge_alpha, 0.5);
  EXPECT_FALSE(c->diloco.streaming());
  auto s = parse_experiment_config(
      "[diloco]\ninner_steps = 40\nstreaming_fragments = 4\noverlap_steps = 5\n"
      "merge_alpha = 0\npull_codec = \"sparse-delta\"\n");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_TRUE(s->diloco.streaming());
  EXPECT_EQ(s->diloco.steps_per_round(), 10u);
  auto again = parse_experiment_config(to_toml(*s));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(to_toml(*again), to_toml(*s));

  EXPECT_EQ(error_of("[diloco]\npull_codec = \"zip\"\n"),
            "config.toml: diloco.pull_codec = \"zip\" must be \"exact\", \"sparse-delta\", "
            "\"full\", \"bf16\" or a codec spec for the outer updates such as \"int8\" or "
            "\"nvfp4\" (not \"none\" or \"fp32\")");
  // A codec spec is a compressed broadcast; the identity codec is not one, nor is Hydra's.
  auto compressed = parse_experiment_config("[diloco]\npull_codec = \"topk:0.1+int4\"\n");
  ASSERT_TRUE(compressed.ok()) << compressed.status().to_string();
  EXPECT_EQ(compressed->diloco.pull_codec, "topk:0.1+int4");
  EXPECT_NE(error_of("[diloco]\npull_codec = \"none\"\n").find("(not \"none\" or \"fp32\")"),
            std::string::npos);
  EXPECT_EQ(error_of("algorithm = \"hydra\"\n[model]\nffn_hidden = 96\n[diloco]\n"
                     "pull_codec = \"int8\"\n"),
            "config.toml: diloco.pull_codec = \"int8\" (a compressed broadcast) is not supported "
            "with algorithm = \"hydra\"; use \"exact\", \"sparse-delta\", \"full\" or \"bf16\"");
  EXPECT_EQ(error_of("[diloco]\ninner_steps = 50\nstreaming_fragments = 3\n"),
            "config.toml: diloco.inner_steps = 50 must be a multiple of "
            "diloco.streaming_fragments = 3 (each round syncs one fragment after inner_steps / "
            "fragments steps)");
  EXPECT_EQ(error_of("[diloco]\nstreaming_fragments = 0\n"),
            "config.toml: diloco.streaming_fragments = 0 must be in [1, 38] (1 = plain DiLoCo; "
            "at most one fragment per tensor of the model)");
  EXPECT_EQ(error_of("[diloco]\ninner_steps = 20\nstreaming_fragments = 4\noverlap_steps = 6\n"),
            "config.toml: diloco.overlap_steps = 6 must be <= diloco.inner_steps / "
            "diloco.streaming_fragments = 5 (the inner steps of one round)");
  EXPECT_EQ(error_of("[diloco]\nmerge_alpha = 1\n"),
            "config.toml: diloco.merge_alpha = 1 must be in [0, 1) (0 = replace the local "
            "fragment by the global one)");
}

TEST(ExperimentConfig, TrainPrecision) {
  auto d = parse_experiment_config("");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->train.precision, "fp32");
  EXPECT_EQ(trainer_config(*d, 10).precision, algorithms::Precision::kFp32);
  auto c = parse_experiment_config("seed = 9\n[train]\nprecision = \"nvfp4\"\n");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const auto t = trainer_config(*c, 10);
  EXPECT_EQ(t.precision, algorithms::Precision::kNvfp4);
  EXPECT_EQ(t.precision_seed, 9u);
  auto again = parse_experiment_config(to_toml(*c));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->train.precision, "nvfp4");
  EXPECT_EQ(error_of("[train]\nprecision = \"fp16\"\n"),
            "config.toml: train.precision = \"fp16\" must be one of \"fp32\", \"bf16\", \"fp8\", "
            "\"mxfp8\", \"nvfp4\"");
}

TEST(ExperimentConfig, TrainOptimizer) {
  auto d = parse_experiment_config("");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->train.optimizer, "adamw");
  EXPECT_EQ(trainer_config(*d, 10).optimizer, algorithms::InnerOptimizer::kAdamW);
  EXPECT_EQ(to_toml(*d).find("optimizer"), std::string::npos) << "the default is not written";
  auto c = parse_experiment_config("[train]\noptimizer = \"muon\"\nmuon_momentum = 0.9\n");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const auto t = trainer_config(*c, 10);
  EXPECT_EQ(t.optimizer, algorithms::InnerOptimizer::kMuon);
  EXPECT_EQ(t.muon_momentum, 0.9);
  auto again = parse_experiment_config(to_toml(*c));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->train.optimizer, "muon");
  EXPECT_EQ(again->train.muon_momentum, 0.9);
  EXPECT_EQ(error_of("[train]\noptimizer = \"lion\"\n"),
            "config.toml: train.optimizer = \"lion\" must be \"adamw\" or \"muon\"");
  EXPECT_EQ(error_of("[train]\noptimizer = \"\"\n"),
            "config.toml: train.optimizer = \"\" must be \"adamw\" or \"muon\"");
  EXPECT_EQ(error_of("[train]\noptimizer = \"muon\"\nmuon_momentum = 1\n"),
            "config.toml: train.muon_momentum = 1 must be in [0, 1)");
  EXPECT_EQ(error_of("algorithm = \"hydra\"\n[train]\noptimizer = \"muon\"\n"),
            "config.toml: train.optimizer = \"muon\" is not available with algorithm = "
            "\"hydra\" yet; set train.optimizer = \"adamw\"");
  EXPECT_EQ(error_of("[train]\noptimizer = \"muon\"\n[lora]\nrank = 4\n"),
            "config.toml: train.optimizer = \"muon\" is not available for LoRA adapters yet; set "
            "train.optimizer = \"adamw\" or remove [lora]");
}

TEST(ExperimentConfig, FinalLookAhead) {
  auto d = parse_experiment_config("");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->diloco.final_look_ahead);
  EXPECT_EQ(to_toml(*d).find("final_look_ahead"), std::string::npos) << "the default is not written";
  auto c = parse_experiment_config("[diloco]\nfinal_look_ahead = false\n");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_FALSE(c->diloco.final_look_ahead);
  auto again = parse_experiment_config(to_toml(*c));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_FALSE(again->diloco.final_look_ahead);
  auto hydra = parse_experiment_config(
      "algorithm = \"hydra\"\n[diloco]\nfinal_look_ahead = false\n");
  ASSERT_TRUE(hydra.ok()) << hydra.status().to_string();
  EXPECT_FALSE(hydra->diloco.final_look_ahead);
}

TEST(ExperimentConfig, CheckListsEveryErrorAndParseReturnsTheFirst) {
  // An unknown key, a wrong type and range errors in three sections; heads = 0 and
  // streaming_fragments = 0 must not lead to a division (their dependent checks are skipped).
  const char* text = R"(
[model]
heads = 0
depth = 3
[train]
lr = "fast"
beta1 = 1.5
[diloco]
rounds = 0
streaming_fragments = 0
)";
  const ConfigCheck check = check_experiment_config(text);
  std::vector<std::string> got;
  for (const Status& s : check.errors) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    got.push_back(s.message());
  }
  const std::vector<std::string> want_prefixes = {
      "config.toml: unknown key model.depth",
      "config.toml: train.lr = ",
      "config.toml: model.heads = 0 must be >= 1",
      "config.toml: train.beta1 = 1.5 must be in [0, 1)",
      "config.toml: diloco.rounds = 0 must be >= 1",
      "config.toml: diloco.streaming_fragments = 0 must be in [1, 38]",
  };
  ASSERT_EQ(got.size(), want_prefixes.size()) << ::testing::PrintToString(got);
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(got[i].substr(0, want_prefixes[i].size()), want_prefixes[i]) << got[i];
  // parse_experiment_config: the first of them, as before.
  EXPECT_EQ(error_of(text), got.front());
  // A valid config has none; a syntax error is the only one.
  EXPECT_TRUE(check_experiment_config("name = \"ok\"\n").errors.empty());
  const ConfigCheck syntax = check_experiment_config("name = \n[model]\nheads = 0\n");
  ASSERT_EQ(syntax.errors.size(), 1u);
  EXPECT_NE(syntax.errors[0].message().find("TOML syntax error"), std::string::npos);
  // validate_experiment_config returns the first of experiment_config_errors.
  ExperimentConfig c;
  c.diloco.rounds = 0;
  c.train.beta1 = 1.5;
  const std::vector<Status> errors = experiment_config_errors(c, "x");
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(validate_experiment_config(c, "x").message(), errors[0].message());
  EXPECT_EQ(errors[0].message(), "x: train.beta1 = 1.5 must be in [0, 1)");
  EXPECT_EQ(errors[1].message(), "x: diloco.rounds = 0 must be >= 1");
}

// A file with several errors names every one, a line each (the command line said only the
// first, the API all of them).
TEST(ExperimentConfig, AMisspelledSectionIsSuggested) {
  EXPECT_NE(error_of("[dilocco]\nrounds = 3\n")
                .find("config.toml: unknown key dilocco (did you mean [diloco]?); known keys: "),
            std::string::npos)
      << error_of("[dilocco]\nrounds = 3\n");
}

TEST(ExperimentConfig, AFileWithSeveralErrorsNamesThemAll) {
  testing::TempDir dir;
  const std::string path = dir / "exp.toml";
  std::ofstream(path) << "[diloco]\nouter_momentum = 1.5\nrounds = 0\n";
  auto c = load_experiment_config(path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(),
            "exp.toml: diloco.rounds = 0 must be >= 1\n"
            "exp.toml: diloco.outer_momentum = 1.5 must be in [0, 1)");
}

TEST(ExperimentConfig, MissingFileIsNotFound) {
  auto c = load_experiment_config("no/such/config.toml");
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace atl::coordinator

namespace atl::coordinator {
namespace {

const char* kLoraConfig = R"(
name = "ft"
seed = 9
[model]
dim = 32
layers = 2
heads = 2
ffn_hidden = 64
seq_len = 16
[lora]
rank = 4
alpha = 8.0
targets = "v,q,down"
base = "base.safetensors"
)";

TEST(ExperimentConfigLora, ParsesCanonicalizesAndRoundTrips) {
  auto c = parse_experiment_config(kLoraConfig);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(c->is_lora());
  const algorithms::LoraConfig l = lora_config(*c);
  EXPECT_EQ(l.rank, 4);
  EXPECT_DOUBLE_EQ(l.alpha, 8.0);
  EXPECT_EQ(l.targets, (std::vector<std::string>{"q", "v", "down"}));
  // θ is the adapter set: Σ r·(in + out) over 3 targets and 2 layers, far below the model.
  const algorithms::ModelConfig m = model_config(*c);
  EXPECT_EQ(theta_layout(*c).numel(), static_cast<size_t>(algorithms::count_lora_params(l, m)));
  EXPECT_EQ(theta_layout(*c).numel(), 2u * 4 * ((32 + 32) + (32 + 32) + (64 + 32)));
  EXPECT_LT(theta_layout(*c).numel() * 5, static_cast<size_t>(algorithms::count_params(m)));
  auto again = parse_experiment_config(to_toml(*c));
  ASSERT_TRUE(again.ok()) << again.status().to_string() << "\n" << to_toml(*c);
  EXPECT_EQ(to_toml(*again), to_toml(*c));
  EXPECT_NE(to_toml(*c).find("[lora]\nrank = 4\n"), std::string::npos) << to_toml(*c);
  // Without [lora] the canonical text has no such section (stored configs read as before).
  auto plain = parse_experiment_config("");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(to_toml(*plain).find("[lora]"), std::string::npos);
  EXPECT_EQ(to_toml(*plain).find("kv_heads"), std::string::npos);
}

TEST(ExperimentConfigLora, InitialThetaIsPeftInitFromTheSeed) {
  auto c = parse_experiment_config(kLoraConfig);
  ASSERT_TRUE(c.ok());
  const algorithms::ParamSet a = initial_theta(*c);
  const algorithms::ParamSet b = initial_theta(*c);
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  algorithms::ParamSet expect(theta_layout(*c));
  algorithms::init_lora_params(expect, lora_config(*c), model_config(*c), c->seed);
  EXPECT_EQ(a.fingerprint(), expect.fingerprint());
  double a_abs = 0, b_abs = 0;
  for (const auto& v : a.layout().views()) {
    const float* p = a.data() + v.offset;
    double sum = 0;
    for (size_t i = 0; i < v.numel(); ++i) sum += std::abs(p[i]);
    (v.name.find("lora_A") != std::string::npos ? a_abs : b_abs) += sum;
  }
  EXPECT_GT(a_abs, 0.0);
  EXPECT_EQ(b_abs, 0.0);  // B = 0: a fresh adapter leaves the base unchanged
}

TEST(ExperimentConfigLora, BadValuesAreOneLineEach) {
  auto with = [](const std::string& lora) {
    return std::string("[model]\ndim = 32\nlayers = 2\nheads = 2\nffn_hidden = 64\n[lora]\n") +
           lora;
  };
  EXPECT_NE(error_of(with("rank = 5000\nbase = \"b\"\n"))
                .find("lora.rank = 5000 must be in [1, 4096] (0 = no adapters)"),
            std::string::npos);
  EXPECT_NE(error_of(with("rank = 4\ntargets = \"q,x\"\nbase = \"b\"\n"))
                .find("lora.targets = \"q,x\" LoRA target 'x' is not one of q, k, v, o, gate, "
                      "up, down"),
            std::string::npos);
  EXPECT_NE(error_of(with("rank = 4\n")).find("lora.base = \"\" must name the base checkpoint"),
            std::string::npos);
  EXPECT_NE(error_of(with("rank = 4\nalpha = 0\nbase = \"b\"\n"))
                .find("lora.alpha = 0 must be finite and > 0"),
            std::string::npos);
  EXPECT_NE(error_of(with("base = \"b\"\n")).find("lora.rank = 0 turns LoRA off"),
            std::string::npos);
  EXPECT_NE(error_of(with("rank = 4\nbase = \"b\"\nbase_fingerprint = \"abc\"\n"))
                .find("lora.base_fingerprint = \"abc\" must be 64 lowercase hex digits"),
            std::string::npos);
  EXPECT_NE(error_of("algorithm = \"hydra\"\n" + with("rank = 4\nbase = \"b\"\n"))
                .find("cannot be used with algorithm = \"hydra\""),
            std::string::npos);
  EXPECT_NE(error_of(with("rnk = 4\n")).find("unknown key lora.rnk (did you mean lora.rank?)"),
            std::string::npos);
}

TEST(ExperimentConfigLora, StreamingFragmentsCountAdapterTensors) {
  // 2 layers x 1 target x (A, B) = 4 tensors of θ.
  const std::string base =
      "[model]\ndim = 32\nlayers = 2\nheads = 2\nffn_hidden = 64\n"
      "[lora]\nrank = 2\ntargets = \"q\"\nbase = \"b\"\n[diloco]\ninner_steps = 8\n";
  EXPECT_EQ(error_of(base + "streaming_fragments = 4\n"), "OK");
  EXPECT_NE(error_of(base + "streaming_fragments = 8\n")
                .find("diloco.streaming_fragments = 8 must be in [1, 4]"),
            std::string::npos);
}

TEST(ExperimentConfigLora, BaseModelFieldsReplaceTheModelSection) {
  auto c = parse_experiment_config(kLoraConfig);
  ASSERT_TRUE(c.ok());
  algorithms::ModelConfig base;
  base.vocab = 300;
  base.dim = 48;
  base.layers = 3;
  base.heads = 4;
  base.kv_heads = 2;
  base.ffn_hidden = 96;
  base.tie_word_embeddings = false;
  base.attention_bias = true;
  base.seq_len = 1024;
  set_model_section(*c, base);
  const algorithms::ModelConfig m = model_config(*c);
  EXPECT_EQ(m.kv_heads, 2);
  EXPECT_FALSE(m.tie_word_embeddings);
  EXPECT_TRUE(m.attention_bias);
  EXPECT_EQ(m.dim, 48);
  EXPECT_EQ(m.seq_len, 16);  // the experiment's
  auto again = parse_experiment_config(to_toml(*c));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_TRUE(algorithms::model_differences(model_config(*again), m).empty());
}

// MoE sizes out of range name their key; a model too large through its experts names them.
TEST(ExperimentConfig, MoeBoundsNameTheKey) {
  EXPECT_EQ(error_of("[model]\nmoe_experts = 100000\nmoe_hidden = 1000\n"),
            "config.toml: model.moe_experts = 100000 must be <= 4096");
  EXPECT_EQ(error_of("[model]\nmoe_experts = 8\nmoe_hidden = 2000000\n"),
            "config.toml: model.moe_hidden = 2000000 must be <= 1048576");
  const std::string big = error_of("[model]\nmoe_experts = 4096\nmoe_hidden = 1048576\n");
  EXPECT_NE(big.find("more than the 268435456 an experiment may have"), std::string::npos) << big;
  EXPECT_NE(big.find("model.moe_experts, model.moe_hidden"), std::string::npos) << big;
}

// A size that does not fit the model's int is refused naming the key (it read as -1), and a
// value's control bytes are echoed as \xNN.
TEST(ExperimentConfig, HugeModelSizesAndControlBytesGiveAReadableLine) {
  EXPECT_NE(error_of("[model]\nvocab = 4294967295\n")
                .find("model.vocab = 4294967295 must be <= 2147483647"),
            std::string::npos);
  EXPECT_NE(error_of("[model]\nmoe_experts = 4\nmoe_hidden = 32\nmoe_aux_coef = -1e-9\n")
                .find("got -1e-09"),
            std::string::npos);
  const std::string named = error_of("name = \"a\\u0007b\"\n");
  EXPECT_NE(named.find("name = \"a\\u0007b\""), std::string::npos) << named;
  EXPECT_EQ(named.find('\a'), std::string::npos);
}

// Keys of a section the experiment does not use are accepted (a stored config must restart) and
// named at the start of a run, each group with the key that would make them act.
TEST(ExperimentConfig, SettingsOfAnUnusedFeatureAreNamedAsIgnored) {
  auto plain = parse_experiment_config("");
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(ignored_settings(*plain).empty());
  EXPECT_TRUE(ignored_settings(*parse_experiment_config(to_toml(*plain))).empty())
      << "the canonical text's default sections are not settings";
  auto c = parse_experiment_config(
      "[model]\nmoe_top_k = 1\n[hydra]\nffn_blocks = 2\nmin_coverage = 2\n"
      "trained_layers = \"per_site\"\n[lora]\nbase_dtype = \"bf16\"\n"
      "[secagg]\nclip_range = -5.0\n");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const std::vector<std::string> lines = ignored_settings(*c);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0],
            "config: hydra.min_coverage, hydra.ffn_blocks and hydra.trained_layers are set but "
            "ignored: algorithm = \"diloco\" (set algorithm = \"hydra\" to train subnetworks; "
            "docs/hydra.md)");
  EXPECT_EQ(lines[1].rfind("config: model.moe_top_k is set but ignored: model.moe_experts = 0", 0),
            0u)
      << lines[1];
  EXPECT_EQ(lines[2].rfind("config: lora.base_dtype is set but ignored: lora.rank = 0", 0), 0u)
      << lines[2];
  EXPECT_EQ(
      lines[3].rfind("config: secagg.clip_range is set but ignored: secagg.enabled = false", 0), 0u)
      << lines[3];
  // The same keys where the feature is on are settings, not notes.
  auto hydra = parse_experiment_config("algorithm = \"hydra\"\n[hydra]\nffn_blocks = 2\n");
  ASSERT_TRUE(hydra.ok()) << hydra.status().to_string();
  EXPECT_TRUE(ignored_settings(*hydra).empty());
}

// A key that to_toml writes only away from its default reads as the value the config means on
// both sides of a change, never "(not set)": stored forward_share_power = 2.0, given 0.0 (the
// default, left out of to_toml) is `2.0 -> 0.0`; likewise the other such keys, both ways.
TEST(ExperimentConfig, ConfigChangesNameTheDefaultAKeyLeftOutMeans) {
  ExperimentConfig stored;
  stored.name = "x";
  stored.algorithm = "hydra";
  stored.hydra.forward_share_power = 2.0;
  ExperimentConfig given = stored;
  given.hydra.forward_share_power = 0.0;
  ASSERT_EQ(to_toml(given).find("forward_share_power"), std::string::npos);
  EXPECT_EQ(config_changes(stored, given),
            std::vector<std::string>{"hydra.forward_share_power 2.0 -> 0.0"});
  EXPECT_EQ(config_changes(given, stored),
            std::vector<std::string>{"hydra.forward_share_power 0.0 -> 2.0"});

  ExperimentConfig plain;
  plain.name = "x";
  ExperimentConfig changed = plain;
  changed.model.kv_heads = 1;
  changed.model.tie_word_embeddings = false;
  changed.model.attention_bias = true;
  changed.train.muon_momentum = 0.9;
  changed.diloco.final_look_ahead = false;
  EXPECT_EQ(config_changes(changed, plain),
            (std::vector<std::string>{
                "model.kv_heads 1 -> 0", "model.tie_word_embeddings false -> true",
                "model.attention_bias true -> false", "train.muon_momentum 0.9 -> 0.95",
                "diloco.final_look_ahead false -> true"}));
  EXPECT_EQ(config_changes(plain, changed).size(), 5u);
  EXPECT_TRUE(config_changes(plain, plain).empty());
}

}  // namespace
}  // namespace atl::coordinator
