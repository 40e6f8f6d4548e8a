// `atoll bench distill-loss`: time and peak extra memory of the fused, tiled distillation loss
// against the unfused loss that materializes the N×V logits (the variants and how they are
// measured: measure/distill_loss.h). This file turns flags into the setup and prints the report.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "algorithms/distill/loss.h"
#include "cli/bench_common.h"
#include "cli/flags.h"
#include "measure/distill_loss.h"

namespace atl::cli {

namespace {

namespace dst = atl::algorithms::distill;

// Parses "256x8,64x4" into (R, S) pairs.
StatusOr<std::vector<std::pair<int, int>>> parse_tiles(const std::string& s) {
  std::vector<std::pair<int, int>> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t end = std::min(s.find(',', pos), s.size());
    const std::string item = s.substr(pos, end - pos);
    int r = 0, sh = 0;
    char extra = 0;
    if (std::sscanf(item.c_str(), "%dx%d%c", &r, &sh, &extra) != 2 || r <= 0 || sh <= 0)
      return InvalidArgument("--tiles: '" + item + "' is not ROWSxSHARDS (e.g. 256x8)");
    out.emplace_back(r, sh);
    pos = end + 1;
  }
  return out;
}

std::vector<FlagSpec> bench_flags() {
  return {{"n", true, "rows N (tokens)", "2048"},
          {"dim", true, "student hidden size C", "256"},
          {"teacher-dim", true, "teacher hidden size", "256"},
          {"vocab", true, "vocabulary V", "32768"},
          {"alpha", true, "KL weight", "0.5"},
          {"tau", true, "temperature", "2"},
          {"tiles", true, "fused tilings ROWSxSHARDS, comma-separated", "256x8,256x1"},
          {"topk", true, "top-k variant's k (0: skip it)", "64"},
          {"reference", false, "also time the plain reference loss (slow)", ""},
          {"reps", true, "timed repetitions per variant (after one warm-up)", "3"},
          {"threads", true, "threads (0 = all cores)", "0"},
          {"seed", true, "seed of the synthetic inputs", "0"},
          {"json", false, "print one JSON line", ""}};
}

using Setup = measure::DistillLossSetup;
using Variant = measure::DistillLossVariant;

// The flags, checked.
StatusOr<Setup> read_setup(const Flags& flags) {
  Setup st;
  ATOLL_ASSIGN_OR_RETURN(const int64_t n, flags.get_int("n", 2048, 1, 1 << 20));
  ATOLL_ASSIGN_OR_RETURN(const int64_t dim, flags.get_int("dim", 256, 1, 1 << 16));
  ATOLL_ASSIGN_OR_RETURN(const int64_t tdim, flags.get_int("teacher-dim", 256, 1, 1 << 16));
  ATOLL_ASSIGN_OR_RETURN(const int64_t vocab, flags.get_int("vocab", 32768, 2, 1 << 20));
  ATOLL_ASSIGN_OR_RETURN(const double alpha, flags.get_double("alpha", 0.5, 0.0, 1.0));
  ATOLL_ASSIGN_OR_RETURN(const double tau, flags.get_double("tau", 2.0, 1e-3, 1e3));
  ATOLL_ASSIGN_OR_RETURN(const int64_t topk, flags.get_int("topk", 64, 0, 1 << 20));
  ATOLL_ASSIGN_OR_RETURN(st.reps, flags.get_int("reps", 3, 1, 1000));
  ATOLL_ASSIGN_OR_RETURN(const int64_t threads, flags.get_int("threads", 0, 0, 1024));
  ATOLL_ASSIGN_OR_RETURN(const int64_t seed, flags.get_int("seed", 0, 0, 1LL << 62));
  ATOLL_ASSIGN_OR_RETURN(st.tiles, parse_tiles(flags.get_or("tiles", "256x8,256x1")));
  st.N = static_cast<int>(n);
  st.C = static_cast<int>(dim);
  st.Ct = static_cast<int>(tdim);
  st.V = static_cast<int>(vocab);
  st.base = dst::LossConfig{alpha, tau, 256, 8};
  st.k = static_cast<int>(topk);
  st.threads = static_cast<int>(threads);
  st.seed = static_cast<uint64_t>(seed);
  st.reference = flags.has("reference");
  ATOLL_RETURN_IF_ERROR(measure::validate(st));
  return st;
}

void print_json(const measure::DistillLossReport& r, const Setup& st) {
  const std::vector<Variant>& vs = r.variants;
  std::printf(
      "{\"bench\":\"distill_loss\",\"n\":%d,\"dim\":%d,\"teacher_dim\":%d,\"vocab\":%d,"
      "\"alpha\":%g,\"tau\":%g,\"threads\":%d,\"reps\":%lld,\"topk_build_ms\":%.1f,"
      "\"variants\":[",
      st.N, st.C, st.Ct, st.V, st.base.alpha, st.base.tau, r.threads,
      static_cast<long long>(st.reps), r.topk_build_ms);
  for (size_t i = 0; i < vs.size(); ++i) {
    const Variant& v = vs[i];
    std::printf(
        "%s{\"variant\":\"%s\",\"rows\":%d,\"shards\":%d,\"k\":%d,\"ms\":%.1f,"
        "\"extra_bytes\":%zu,\"maxrss_growth_bytes\":%lld,\"loss\":%.6f}",
        i ? "," : "", v.name.c_str(), v.R, v.S, v.k, v.ms, v.extra_bytes, v.rss_growth, v.loss);
  }
  std::printf("]}\n");
}

void print_table(const measure::DistillLossReport& r, const Setup& st) {
  const std::vector<Variant>& vs = r.variants;
  std::printf(
      "distill loss N=%d C=%d Ct=%d V=%d alpha=%g tau=%g threads=%d (fwd+bwd, median of "
      "%lld)\n",
      st.N, st.C, st.Ct, st.V, st.base.alpha, st.base.tau, r.threads,
      static_cast<long long>(st.reps));
  for (const Variant& v : vs)
    std::printf(
        "  %-11s R=%-5d S=%-3d k=%-4d %9.1f ms  extra %8.1f MiB  peak RSS +%8.1f MiB  "
        "loss %.6f\n",
        v.name.c_str(), v.R, v.S, v.k, v.ms, v.extra_bytes / 1048576.0, v.rss_growth / 1048576.0,
        v.loss);
  if (st.k > 0) std::printf("  top-k targets built in %.1f ms (teacher side)\n", r.topk_build_ms);
}

}  // namespace

int bench_distill_loss(const Args& args) {
  Flags flags("bench distill-loss", bench_flags());
  if (Status s = flags.parse(args); !s.ok()) return fail("bench distill-loss", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto setup = read_setup(flags);
  if (!setup.ok()) return fail("bench distill-loss", setup.status().message(), 2);
  auto report = measure::measure_distill_loss(*setup);
  if (!report.ok()) return fail("bench distill-loss", report.status().message());
  if (flags.has("json"))
    print_json(*report, *setup);
  else
    print_table(*report, *setup);
  return 0;
}

}  // namespace atl::cli
