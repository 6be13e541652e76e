"""`ringmoe bench` on the tiny model: DESIGN.md's keys, decode in rounds
between bandwidth probes with the median of the rounds' ratios, and clear
errors for flags that cannot work."""
import json
import os
import subprocess
import unittest

import harness

MODEL = os.path.join(harness.TINY, "mixtral")


def bench(*flags):
    return subprocess.run(
        [os.environ["RINGMOE_CLI"], "bench", "--model", MODEL, "--prompt_tokens=8",
         "--bench_repetitions=1", "--threads=2"] + list(flags),
        capture_output=True, text=True, timeout=600)


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

    def test_bad_rounds_are_refused(self):
        out = bench("--gen_tokens=2", "--bench_rounds=5")
        self.assertEqual(out.returncode, 1)
        self.assertIn("--bench_rounds (5) exceeds --gen_tokens (2)", out.stderr)
        out = bench("--gen_tokens=2", "--bench_rounds=0")
        self.assertEqual(out.returncode, 1)
        self.assertIn("must be positive", out.stderr)


if __name__ == "__main__":
    unittest.main()
