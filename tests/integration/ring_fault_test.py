"""The memory ring in the real server: moe-adder with a host memory budget
so small that every expert streams from disk. Answers stay right; a
checkpoint truncated underneath fails the requests that need it with a clear
error while the server stays healthy; once the file is restored, requests
succeed again. A budget below the minimum is refused at start-up with the
smallest budget that works."""
import os
import re
import shutil
import subprocess
import time
import unittest
import urllib.error
import urllib.request

import grpc

import harness
from ringmoe_client import Client


def wait_for_health(client, want, timeout=10):
    deadline = time.monotonic() + timeout
    while True:
        got = client.health()
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def http_get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class RingFaultTest(unittest.TestCase):
    def test_truncated_checkpoint_fails_requests_not_the_server(self):
        model = os.path.join(harness.tmpdir(), "moe-adder")
        shutil.copytree(harness.ADDER, model)
        weights = os.path.join(model, "model.safetensors")
        with open(weights, "rb") as f:
            original = f.read()

        # Too small a budget: refused, naming the minimum.
        tiny = subprocess.run([os.environ["RINGMOE_SERVER"], "--model", model,
                               "--host_memory_budget=1MiB", "--grpc_port=0",
                               "--metrics_port=0", "--http_port=0"], capture_output=True, text=True, timeout=60)
        self.assertNotEqual(tiny.returncode, 0)
        found = re.search(r"smallest budget that works is (\d+) bytes", tiny.stderr)
        self.assertIsNotNone(found, tiny.stderr)
        minimum = int(found.group(1))

        with harness.Server(model, "--host_memory_budget=%d" % minimum,
                            "--expert_cache=false", "--ring_mode=expert",
                            "--expert_metrics") as server, \
                Client(server.target) as client:
            info = client.model_info()
            self.assertEqual(info.placement.ring_slots, 2)
            self.assertEqual(info.placement.resident_experts, 0)
            self.assertEqual(info.placement.streamed_experts, 32)

            def add(prompt):
                return client.generate_text(text=prompt, max_tokens=6, temperature=0,
                                            timeout=60)

            self.assertEqual(add("37+485=").text, "522")
            # Opt-in per-expert counts: 9 prompt tokens and 3 fed-back
            # generated ones, each routed to 2 experts in each of 4 layers.
            self.assertEqual(server.metric("ringmoe_expert_tokens_total"), 12 * 2 * 4)
            self.assertIsNotNone(server.metric("ringmoe_expert_tokens_total", layer="3",
                                               expert="7"))
            self.assertGreater(server.metric("ringmoe_ring_bytes_moved_total",
                                             tier_pair="disk_to_host"), 0)

            with open(weights, "r+b") as f:
                f.truncate(len(original) // 3)
            with self.assertRaises(grpc.RpcError) as failure:
                add("123+456=")
            self.assertIn("short read", failure.exception.details())
            self.assertIn("model.safetensors", failure.exception.details())
            self.assertEqual(client.health(), "SERVING")
            self.assertGreater(server.metric("ringmoe_ring_load_errors_total"), 0)
            # Every step keeps failing: the probes take the instance out.
            for _ in range(2):
                with self.assertRaises(grpc.RpcError):
                    add("123+456=")
            self.assertEqual(wait_for_health(client, "NOT_SERVING"), "NOT_SERVING")
            status, _ = http_get(server.http + "/health")
            self.assertEqual(status, 503)
            self.assertIn("NOT_SERVING: engine steps keep failing", server.read_log())

            with open(weights, "r+b") as f:
                f.write(original)
            self.assertEqual(add("123+456=").text, "579")
            self.assertEqual(wait_for_health(client, "SERVING"), "SERVING")
            self.assertEqual(http_get(server.http + "/health")[0], 200)
            self.assertEqual(add("999+1=").text, "1000")
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    unittest.main()
