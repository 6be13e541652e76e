"""Streaming generation over gRPC (Python grpcio) equals offline
`ringmoe generate` and the golden greedy tokens, token for token: every
golden tiny model, one request at a time and 16 at once; and text in, text
out on the trained moe-adder model with its real tokenizer."""
import json
import os
import unittest
from concurrent.futures import ThreadPoolExecutor

import harness
from ringmoe_client import Client


def stream_ids(client, ids, max_tokens=16):
    """Token ids and finish reason of one streamed greedy generation."""
    got, last, messages = [], None, 0
    for r in client.generate(input_ids=ids, max_tokens=max_tokens, temperature=0,
                             ignore_eos=True, timeout=120):
        got.extend(r.token_ids)
        last = r
        messages += 1
    return got, last, messages


class TinyModelsTest(unittest.TestCase):
    def test_grpc_equals_offline_and_golden(self):
        for model in harness.TINY_MODELS:
            model_dir = os.path.join(harness.TINY, model)
            cases = harness.golden_cases(model)
            with harness.Server(model_dir) as server, Client(server.target) as client:
                for i, (ids, greedy, _) in enumerate(cases):
                    offline = harness.offline_generate(model_dir, ids, 16, "--ignore_eos")
                    self.assertEqual(offline["ids"], greedy, "%s case %d offline" % (model, i))
                    got, last, messages = stream_ids(client, ids)
                    self.assertEqual(got, offline["ids"], "%s case %d" % (model, i))
                    self.assertEqual(last.finish_reason, 2)  # LENGTH
                    self.assertEqual(last.usage.prompt_tokens, len(ids))
                    self.assertEqual(last.usage.completion_tokens, 16)
                    self.assertGreater(messages, 1, "tokens must stream")
                # 16 concurrent streams over the five cases.
                jobs = [cases[j % 5] for j in range(16)]
                with ThreadPoolExecutor(16) as pool:
                    results = list(pool.map(lambda c: stream_ids(client, c[0]), jobs))
                for j, ((ids, greedy, _), (got, last, _)) in enumerate(zip(jobs, results)):
                    self.assertEqual(got, greedy, "%s concurrent request %d" % (model, j))
                    self.assertEqual(last.finish_reason, 2)
                self.assertEqual(server.wait_metric("ringmoe_kv_cache_used_blocks", 0), 0)
                self.assertEqual(server.stop(), 0, server.read_log())

    def test_cli_generate_through_server(self):
        model_dir = os.path.join(harness.TINY, "qwen3_moe")
        ids, greedy, _ = harness.golden_cases("qwen3_moe")[3]
        with harness.Server(model_dir) as server:
            out = harness.offline_generate(model_dir, ids, 16, "--ignore_eos")
            import subprocess
            remote = subprocess.run(
                [os.environ["RINGMOE_CLI"], "generate", "--server", server.target,
                 "--input_ids", ",".join(map(str, ids)), "--max_tokens", "16",
                 "--ignore_eos", "--json"], capture_output=True, text=True, check=True)
            self.assertEqual(json.loads(remote.stdout), out)
            self.assertEqual(out["ids"], greedy)


class AdderTest(unittest.TestCase):
    def test_text_streaming_matches_reference(self):
        with open(os.path.join(harness.ADDER, "eval.jsonl")) as f:
            evals = [json.loads(line) for line in f][:24]
        with harness.Server(harness.ADDER) as server, Client(server.target) as client:
            self.assertEqual(client.tokenize("37+485="),
                             [1, 28705, 28770, 28787, 28806, 28781, 28783, 28782, 28746])
            self.assertEqual(client.detokenize([28782, 28750, 28750]), "522")

            def run(e):
                return client.generate_text(text=e["prompt"], max_tokens=8, temperature=0,
                                            timeout=120)

            with ThreadPoolExecutor(16) as pool:
                results = list(pool.map(run, evals))
            for e, r in zip(evals, results):
                self.assertEqual(r.token_ids, e["reference_greedy_ids"], e["prompt"])
                self.assertEqual(r.text, e["reference_text"], e["prompt"])
                self.assertEqual(r.finish_reason, "stop")
                self.assertEqual(r.prompt_tokens, len(e["input_ids"]))
            # Stop strings end the text before them; logprobs come per token.
            r = client.generate_text(text="37+485=", max_tokens=8, temperature=0,
                                     stop=["2"], logprobs=True)
            self.assertEqual((r.text, r.finish_reason), ("5", "stop"))
            self.assertEqual(len(r.logprobs), len(r.token_ids))
            self.assertTrue(all(lp <= 0 for lp in r.logprobs))
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    unittest.main()
