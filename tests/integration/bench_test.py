"""`ringmoe bench` on the tiny model: DESIGN.md's keys, decode in rounds
between bandwidth probes with the median of the rounds' ratios, and clear
errors for flags that cannot work."""
import json
import os
import subprocess
import unittest

import harness

MODEL = os.path.join(harness.TINY, "mixtral")


def bench(*flags, env=None):
    return subprocess.run(
        [os.environ["RINGMOE_CLI"], "bench", "--model", MODEL, "--prompt_tokens=8",
         "--bench_repetitions=1", "--threads=2"] + list(flags),
        capture_output=True, text=True, timeout=600,
        env=dict(os.environ, **(env or {})))


class BenchTest(unittest.TestCase):
    def test_rounds_between_probes(self):
        out = bench("--gen_tokens=6", "--bench_rounds=3")
        self.assertEqual(out.returncode, 0, out.stderr)
        r = json.loads(out.stdout)
        for key in ("prefill_tokens_per_s", "decode_tokens_per_s",
                    "weight_bytes_per_token", "bandwidth_bytes_per_s",
                    "decode_ceiling_ratio"):
            self.assertGreater(r[key], 0, key)
        checkpoint = os.path.getsize(os.path.join(MODEL, "model.safetensors"))
        self.assertLess(r["weight_bytes_per_token"], checkpoint)
        probes = r["bandwidth_probes_bytes_per_s"]
        rounds = r["decode_round_ceiling_ratios"]
        self.assertEqual((len(probes), len(rounds)), (4, 3))
        self.assertEqual(r["bandwidth_bytes_per_s"], sorted(probes)[2])
        self.assertEqual(r["decode_ceiling_ratio"], sorted(rounds)[1])

    def test_kernel_paths(self):
        # The share of weight bytes each instruction-set path read, as the
        # dispatch chose it: all scalar when forced, one int8 path per phase
        # otherwise (AVX-512 for decode only where the CPU has it).
        out = bench("--gen_tokens=2", "--bench_rounds=1", "--weight_dtype=int8",
                    env={"RINGMOE_FORCE_SCALAR": "1"})
        self.assertEqual(out.returncode, 0, out.stderr)
        paths = json.loads(out.stdout)["kernel_paths"]
        self.assertEqual(paths, {"prefill_products": {"scalar": 1.0},
                                 "decode_products": {"scalar": 1.0},
                                 "attention": "scalar"})
        out = bench("--gen_tokens=2", "--bench_rounds=1", "--weight_dtype=int8")
        self.assertEqual(out.returncode, 0, out.stderr)
        r = json.loads(out.stdout)
        paths = r["kernel_paths"]
        for phase in ("prefill_products", "decode_products"):
            self.assertAlmostEqual(sum(paths[phase].values()), 1.0, msg=phase)
        if "avx2" not in r["cpu_features"]:
            self.assertEqual(paths["attention"], "scalar")
        else:
            self.assertEqual(paths["attention"], "avx2")
            # Products of up to 8 rows (all of the 8-token prompt's, and
            # decode's) against int8 weights run on AVX-512 where the CPU
            # has it (the bf16 ones of one row, decode's attention, on
            # AVX2); more rows on AVX2.
            if "avx512_vnni" in r["cpu_features"]:
                self.assertGreater(paths["prefill_products"]["avx512"], 0.5)
                self.assertGreater(paths["decode_products"]["avx512"], 0.1)
                out = bench("--gen_tokens=2", "--bench_rounds=1",
                            "--weight_dtype=int8", "--prompt_tokens=40")
                self.assertEqual(out.returncode, 0, out.stderr)
                longer = json.loads(out.stdout)["kernel_paths"]
                self.assertGreater(longer["prefill_products"]["avx2"],
                                   paths["prefill_products"]["avx2"])
            else:
                self.assertEqual(paths["prefill_products"], {"avx2": 1.0})
                self.assertEqual(paths["decode_products"], {"avx2": 1.0})

    def test_bf16_activations(self):
        # Prefill products of 8 or more rows of bf16 weights (here those of
        # attention) and decode products of one row (every bf16 weight) round
        # their activations to bf16 where the CPU has AVX512-BF16, beside
        # their own ceiling; nothing else changes path.
        # int8 (which adds one-level int8 activations for mxfp4 products) is
        # taken and reported; anything but f32, bf16 or int8 is refused,
        # naming the flag.
        out = bench("--gen_tokens=2", "--bench_rounds=1", "--prompt_tokens=32",
                    "--activation_precision=bf16")
        self.assertEqual(out.returncode, 0, out.stderr)
        r = json.loads(out.stdout)
        self.assertEqual(r["activation_precision"], "bf16")
        paths = r["kernel_paths"]
        if "avx512_bf16" in r["cpu_features"]:
            self.assertGreater(paths["prefill_products"]["avx512_bf16"], 0.1)
            self.assertEqual(paths["decode_products"], {"avx512_bf16": 1.0})
            self.assertGreater(r["peak_bf16_flops_per_s"], r["peak_flops_per_s"])
            self.assertGreater(r["prefill_bf16_peak_ratio"], 0)
        else:
            self.assertNotIn("avx512_bf16", paths["prefill_products"])
            self.assertNotIn("avx512_bf16", paths["decode_products"])
            self.assertEqual(r["peak_bf16_flops_per_s"], 0)
        out = bench("--gen_tokens=2", "--bench_rounds=1",
                    "--activation_precision=int8")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(json.loads(out.stdout)["activation_precision"], "int8")
        out = bench("--gen_tokens=2", "--bench_rounds=1",
                    "--activation_precision=fp8")
        self.assertEqual(out.returncode, 1)
        self.assertIn("--activation_precision=fp8: expected f32, bf16 or int8",
                      out.stderr)

    def test_weight_prefetch(self):
        # Forced, the choice is reported per format with no figures; the
        # outputs do not depend on it; anything else is refused, naming
        # the flag.
        for choice in ("software", "hardware"):
            out = bench("--gen_tokens=2", "--bench_rounds=1",
                        "--weight_prefetch=" + choice)
            self.assertEqual(out.returncode, 0, out.stderr)
            r = json.loads(out.stdout)
            self.assertTrue(r["weight_prefetch"])
            for entry in r["weight_prefetch"].values():
                self.assertEqual(entry["chosen"], choice)
                self.assertEqual(entry["software_bytes_per_s"], 0)
        out = bench("--gen_tokens=2", "--bench_rounds=1",
                    "--weight_prefetch=nta")
        self.assertEqual(out.returncode, 1)
        self.assertIn("--weight_prefetch=nta: expected auto, software or "
                      "hardware", out.stderr)

    def test_competing_processes(self):
        # The neighbours spin for the whole run and are gone after it.
        out = bench("--gen_tokens=2", "--bench_rounds=1",
                    "--competing_processes=2")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(json.loads(out.stdout)["competing_processes"], 2)
        # Forked children keep the bench's command line.
        left = subprocess.run(["pgrep", "-f", "--", "--competing_processes=2"],
                              capture_output=True, text=True)
        self.assertEqual(left.stdout.strip(), "", "competitors left running")
        out = bench("--gen_tokens=2", "--bench_rounds=1",
                    "--competing_processes=-1")
        self.assertEqual(out.returncode, 1)
        self.assertIn("--competing_processes must not be negative", out.stderr)

    def test_bad_rounds_are_refused(self):
        out = bench("--gen_tokens=2", "--bench_rounds=5")
        self.assertEqual(out.returncode, 1)
        self.assertIn("--bench_rounds (5) exceeds --gen_tokens (2)", out.stderr)
        out = bench("--gen_tokens=2", "--bench_rounds=0")
        self.assertEqual(out.returncode, 1)
        self.assertIn("must be positive", out.stderr)

    def test_bad_ring_section_size_is_refused(self):
        out = bench("--gen_tokens=2", "--bench_rounds=1",
                    "--ring_section_experts=-2")
        self.assertEqual(out.returncode, 1)
        self.assertIn("--ring_section_experts must be >= 0", out.stderr)


if __name__ == "__main__":
    unittest.main()
