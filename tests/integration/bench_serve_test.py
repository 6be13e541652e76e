"""`ringmoe bench-serve` against the tiny model, closed and open loop, over
gRPC and over the OpenAI HTTP API: well-formed JSON, no errors, every
request and token counted."""
import json
import os
import subprocess
import unittest

import harness


class BenchServeTest(unittest.TestCase):
    def test_closed_and_open_loop(self):
        with harness.Server(os.path.join(harness.TINY, "mixtral")) as server:
            http = "127.0.0.1:%d" % server.http_port
            for mode in (["--concurrency=4"], ["--rate=40"],
                         ["--concurrency=4", "--api=openai", "--server", http]):
                target = [] if "--api=openai" in mode else ["--server", server.target]
                out = subprocess.run(
                    [os.environ["RINGMOE_CLI"], "bench-serve"] + target + [
                     "--num_requests=16", "--warmup_requests=2", "--prompt_tokens_min=4",
                     "--prompt_tokens_max=24", "--output_tokens_min=4",
                     "--output_tokens_max=12"] + mode,
                    capture_output=True, text=True, timeout=300)
                self.assertEqual(out.returncode, 0, out.stderr)
                report = json.loads(out.stdout)
                self.assertEqual((report["completed"], report["errors"]), (16, 0), report)
                self.assertEqual(report["api"], "openai" if "--api=openai" in mode else "grpc")
                self.assertGreater(report["output_tokens_per_s"], 0)
                self.assertGreaterEqual(report["output_tokens"], 16 * 4)
                self.assertLessEqual(report["output_tokens"], 16 * 12)
                if "--api=openai" in mode:
                    # An event per token: one gap per token after the first.
                    self.assertEqual(report["itl_s"]["count"],
                                     report["output_tokens"] - 16)
                for key in ("ttft_s", "itl_s", "e2e_s"):
                    s = report[key]
                    self.assertLessEqual(s["p50"], s["p90"])
                    self.assertLessEqual(s["p90"], s["p99"])
                self.assertLessEqual(report["ttft_s"]["p50"], report["e2e_s"]["p50"])
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    unittest.main()
