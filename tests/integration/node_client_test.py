"""A second, independent client: Node.js with @grpc/grpc-js (from the npm
registry) streams greedy generations from the real server, one at a time and
16 at once, and must get the golden tokens of every case."""
import json
import os
import subprocess
import unittest

import harness

NODE_DIR = harness.NODE_DIR


class NodeClientTest(unittest.TestCase):
    def test_node_grpc_js_streams_golden_tokens(self):
        modules = harness.node_modules()
        model = "qwen2_moe"
        cases = harness.golden_cases(model)
        jobs = [{"input_ids": cases[j % 5][0], "max_tokens": 16} for j in range(16)]
        cases_path = os.path.join(harness.tmpdir(), "cases.json")
        with open(cases_path, "w") as f:
            json.dump(jobs, f)
        with harness.Server(os.path.join(harness.TINY, model)) as server:
            out = subprocess.run(
                ["node", os.path.join(NODE_DIR, "generate_client.js"), server.target, "proto",
                 cases_path], capture_output=True, text=True, timeout=300,
                env=dict(os.environ, NODE_PATH=modules))
            self.assertEqual(out.returncode, 0, out.stderr)
            got = json.loads(out.stdout)
            self.assertTrue(got["live"])
            for mode in ("sequential", "concurrent"):
                for j, r in enumerate(got[mode]):
                    self.assertEqual(r["ids"], cases[j % 5][1], "%s %d" % (mode, j))
                    self.assertEqual(r["finish_reason"], "FINISH_REASON_LENGTH")
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    unittest.main()
