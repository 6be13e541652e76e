"""Expert parallelism on shapes the golden files do not hold: random
checkpoints (as random_shapes_test makes them) whose expert counts the 3
ranks do not divide — 5 gpt-oss experts, 8 DeepSeek-V3 experts in 2
groups, 7 Qwen2-MoE experts beside a shared one — give, under
`mpirun -np 3 ringmoe logits --expert_parallel` with attention replicated
and data-parallel, the logits file of one process byte for byte.

Usage: random_shapes_expert_parallel_test.py MPIRUN_TEST_SH RINGMOE"""
import os
import random
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import random_shapes_test as shapes  # noqa: E402

MPIRUN_TEST, RINGMOE = sys.argv[1], sys.argv[2]
RANKS = 3
MODELS = [
    ("gpt_oss", dict(hidden=64, layers=2, experts=5, top_k=2, intermediate=64, heads=4,
                     kv_heads=2, head_dim=16, sliding_window=3)),
    ("deepseek_v3", dict(hidden=96, layers=2, experts=8, top_k=3, intermediate=40, heads=3,
                         q_lora_rank=64, kv_lora_rank=24, nope=15, rope=6, v_dim=11,
                         shared_experts=1, groups=2, topk_groups=1, first_dense=1,
                         dense_intermediate=72)),
    ("Qwen2MoeForCausalLM", dict(hidden=48, layers=2, experts=7, top_k=3, intermediate=40,
                                 heads=6, kv_heads=3, head_dim=8, shared=56)),
]


class RandomShapesExpertParallelTest(unittest.TestCase):
    def test_ranks_give_the_one_process_logits(self):
        work = os.environ.get("TEST_TMPDIR", "/tmp")
        for index, (arch, shape) in enumerate(MODELS):
            vocab = 120 + 13 * index
            directory = os.path.join(work, arch)
            shapes.write_checkpoint(directory, arch, shape, vocab, 70 + index)
            rng = random.Random(index)
            ids = ",".join(str(rng.randrange(vocab)) for _ in range(40))
            engine = ["logits", "--model", directory, "--threads", "1", "--input_ids", ids]
            alone = os.path.join(directory, "alone.safetensors")
            run = subprocess.run([RINGMOE, *engine, "--out", alone], capture_output=True,
                                 text=True, timeout=300)
            self.assertEqual(run.returncode, 0, run.stderr)
            for attention in ("replicated", "data_parallel"):
                with self.subTest(model=arch, attention=attention):
                    spread = os.path.join(directory, attention + ".safetensors")
                    run = subprocess.run(
                        [MPIRUN_TEST, str(RANKS), RINGMOE, *engine, "--out", spread,
                         "--expert_parallel", "--expert_parallel_attention", attention],
                        capture_output=True, text=True, timeout=300)
                    self.assertEqual(run.returncode, 0, run.stdout[-2000:] + run.stderr[-2000:])
                    with open(alone, "rb") as a, open(spread, "rb") as b:
                        self.assertTrue(a.read() == b.read(), "%s differs from one process"
                                        % spread)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
