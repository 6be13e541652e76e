"""Continuous batching on shapes the golden files do not hold: the real
server, given random gpt-oss, DeepSeek-V3 and Qwen3-MoE checkpoints (as
//tests/golden:random_shapes_test makes them), answers 12 concurrent greedy
requests of 1 to 80 prompt tokens with at most 5 sequences running, so
prefill chunks and decode rows of different sequences share steps, expert
row blocks and KV-cache pages; every request must get the tokens the float64
reference (tests/golden/reference_models.py) decodes for it alone, up to a
near-tie."""
import os
import random
import sys
import unittest
from concurrent.futures import ThreadPoolExecutor

import harness

sys.path.insert(0, "tests/golden")
import random_shapes_test as shapes  # noqa: E402
import reference_models  # noqa: E402

MODELS = [
    ("gpt_oss", dict(hidden=64, layers=3, experts=6, top_k=3, intermediate=96, heads=4,
                     kv_heads=1, head_dim=16, sliding_window=5)),
    ("deepseek_v3", dict(hidden=96, layers=2, experts=8, top_k=2, intermediate=40, heads=3,
                         q_lora_rank=64, kv_lora_rank=24, nope=15, rope=6, v_dim=11,
                         shared_experts=1, groups=2, topk_groups=1, first_dense=1,
                         dense_intermediate=72)),
    ("Qwen3MoeForCausalLM", dict(hidden=64, layers=3, experts=5, top_k=3, intermediate=24,
                                 heads=4, kv_heads=1, head_dim=24)),
]
REQUESTS = 12
NEW_TOKENS = 8


class RandomShapesServingTest(unittest.TestCase):
    def test_concurrent_requests_get_the_reference_tokens(self):
        from ringmoe_client import Client
        for index, (arch, shape) in enumerate(MODELS):
            with self.subTest(model=arch):
                vocab = 150 + 11 * index
                directory = os.path.join(harness.tmpdir(), arch)
                shapes.write_checkpoint(directory, arch, shape, vocab, 40 + index)
                config, tensors = reference_models.load_model(directory)
                rng = random.Random(index)
                prompts = [[rng.randrange(vocab) for _ in range(rng.randint(1, 80))]
                           for _ in range(REQUESTS)]
                with harness.Server(directory, "--max_running_sequences=5") as server, \
                        Client(server.target, timeout=300) as client:
                    def run(prompt):
                        return client.generate_text(input_ids=prompt, max_tokens=NEW_TOKENS,
                                                    temperature=0, ignore_eos=True).token_ids
                    with ThreadPoolExecutor(REQUESTS) as pool:
                        results = list(pool.map(run, prompts))
                    self.assertEqual(server.stop(), 0, server.read_log())
                for prompt, tokens in zip(prompts, results):
                    self.assertEqual(len(tokens), NEW_TOKENS)
                    shapes.expect_greedy(self, config, tensors, prompt, list(tokens))


if __name__ == "__main__":
    unittest.main()
