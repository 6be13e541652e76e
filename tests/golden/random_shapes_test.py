"""The engine on shapes, seeds and lengths the golden files do not hold:
random Mixtral, gpt-oss (MXFP4) and DeepSeek-V3 (FP8, MLA) checkpoints from
tools/make_synthetic_moe.py (one of them turned into DeepSeek-V2 by its
config) and Qwen2-MoE, Qwen3-MoE and OLMoE ones written
here (odd head counts, head widths from 8 to 48, MLA
heads of odd width, windows of 1 to 64 tokens, top-1 to top-6 routing over
1 to 4 groups, shared experts or none, dense first layers), prompts of 1 to
200 tokens. `ringmoe logits` must be within 1e-4 (relative to each
position's largest logit, the goldens' criterion) of reference_models.py's
float64 forward at every position, and `ringmoe generate` (prefill, then
one decode step per token) must pick the reference's greedy tokens up to the
first near-tie. With the smallest RAM budget that runs (experts streamed
through the memory ring) the logits must be bitwise the resident ones, and
on three threads within the same tolerance. The reference is first held to every shipped golden of its
architectures, so a mistake there fails here rather than agreeing with the
engine."""
import json
import os
import random
import re
import subprocess
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_models  # noqa: E402

RINGMOE = os.environ.get("RINGMOE_CLI", "clients/cli/ringmoe")
TINY = "tests/testdata/moe-tiny"
TOLERANCE = 1e-4
GREEDY_TOKENS = 12

# make_synthetic_moe.py flags per model; each also gets --vocab and --seed.
MODELS = [
    ("mixtral", dict(hidden=96, layers=2, experts=5, top_k=2, intermediate=40, heads=6,
                     kv_heads=2), {}),
    ("mixtral", dict(hidden=64, layers=3, experts=3, top_k=1, intermediate=24, heads=2,
                     kv_heads=1), {"sliding_window": 6}),
    ("gpt_oss", dict(hidden=64, layers=3, experts=6, top_k=3, intermediate=96, heads=4,
                     kv_heads=1, head_dim=16, sliding_window=5), {}),
    ("gpt_oss", dict(hidden=96, layers=4, experts=4, top_k=4, intermediate=160, heads=2,
                     kv_heads=2, head_dim=48, sliding_window=1), {}),
    ("gpt_oss", dict(hidden=32, layers=2, experts=3, top_k=1, intermediate=32, heads=8,
                     kv_heads=4, head_dim=8, sliding_window=64), {}),
    ("deepseek_v3", dict(hidden=160, layers=3, experts=8, top_k=3, intermediate=48, heads=3,
                         q_lora_rank=96, kv_lora_rank=40, nope=24, rope=16, v_dim=20,
                         shared_experts=1, groups=4, topk_groups=2, first_dense=1,
                         dense_intermediate=200), {}),
    ("deepseek_v3", dict(hidden=256, layers=2, experts=12, top_k=6, intermediate=64, heads=5,
                         q_lora_rank=136, kv_lora_rank=160, nope=8, rope=4, v_dim=32,
                         shared_experts=2, groups=3, topk_groups=2, first_dense=0,
                         dense_intermediate=64), {}),
    ("deepseek_v3", dict(hidden=96, layers=2, experts=8, top_k=2, intermediate=40, heads=3,
                         q_lora_rank=64, kv_lora_rank=24, nope=15, rope=6, v_dim=11,
                         shared_experts=1, groups=2, topk_groups=1, first_dense=1,
                         dense_intermediate=72), {}),
    # DeepSeek-V2's routing on the same kind of checkpoint (its V3 selection
    # bias left unused): softmax scores, the groups with the best single
    # expert kept, weights not renormalised.
    ("deepseek_v3", dict(hidden=128, layers=2, experts=12, top_k=4, intermediate=32, heads=2,
                         q_lora_rank=64, kv_lora_rank=32, nope=16, rope=8, v_dim=16,
                         shared_experts=2, groups=4, topk_groups=2, first_dense=1,
                         dense_intermediate=96),
     {"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
      "scoring_func": "softmax", "topk_method": "group_limited_greedy",
      "norm_topk_prob": False, "routed_scaling_factor": 1.5}),
    # One head, one routed expert per token (its weight still normalised to
    # 1 before the scaling factor, as transformers' DeepseekV3MoE does).
    ("deepseek_v3", dict(hidden=80, layers=2, experts=4, top_k=1, intermediate=16, heads=1,
                         q_lora_rank=16, kv_lora_rank=8, nope=16, rope=2, v_dim=16,
                         shared_experts=0, groups=1, topk_groups=1, first_dense=0,
                         dense_intermediate=48), {}),
]
# Written by write_llama_moe below (make_synthetic_moe.py makes only the
# three above): architecture and shapes.
LLAMA_MOE_MODELS = [
    ("Qwen2MoeForCausalLM", dict(hidden=48, layers=2, experts=6, top_k=2, intermediate=40,
                                 heads=6, kv_heads=3, head_dim=8, shared=56)),
    ("Qwen3MoeForCausalLM", dict(hidden=64, layers=3, experts=5, top_k=3, intermediate=24,
                                 heads=4, kv_heads=1, head_dim=24)),
    ("OlmoeForCausalLM", dict(hidden=72, layers=2, experts=4, top_k=1, intermediate=32,
                              heads=3, kv_heads=3, head_dim=24)),
]
PROMPT_LENGTHS = [1, 9, 70, 200]
STREAMED_PROMPT_TOKENS = 70


def write_llama_moe(directory, arch, shape, vocab, seed):
    """A random checkpoint of Qwen2-MoE, Qwen3-MoE or OLMoE in Hugging Face's
    names and config keys, BF16 (rounded to nearest even), as the moe-tiny
    README describes them."""
    rng = np.random.default_rng(seed)
    h, d = shape["hidden"], shape["head_dim"]
    q_width, kv_width = shape["heads"] * d, shape["kv_heads"] * d
    tensors = {"model.embed_tokens.weight": rng.normal(0, 0.05, (vocab, h)),
               "model.norm.weight": 1 + rng.normal(0, 0.1, h),
               "lm_head.weight": rng.normal(0, h ** -0.5, (vocab, h))}
    for layer in range(shape["layers"]):
        p = "model.layers.%d." % layer
        for name, rows, cols in [("q", q_width, h), ("k", kv_width, h), ("v", kv_width, h),
                                 ("o", h, q_width)]:
            tensors[p + "self_attn.%s_proj.weight" % name] = rng.normal(0, cols ** -0.5,
                                                                        (rows, cols))
            if arch == "Qwen2MoeForCausalLM" and name != "o":
                tensors[p + "self_attn.%s_proj.bias" % name] = rng.normal(0, 0.1, rows)
        if arch == "Qwen3MoeForCausalLM":
            tensors[p + "self_attn.q_norm.weight"] = 1 + rng.normal(0, 0.1, d)
            tensors[p + "self_attn.k_norm.weight"] = 1 + rng.normal(0, 0.1, d)
        if arch == "OlmoeForCausalLM":
            tensors[p + "self_attn.q_norm.weight"] = 1 + rng.normal(0, 0.1, q_width)
            tensors[p + "self_attn.k_norm.weight"] = 1 + rng.normal(0, 0.1, kv_width)
        tensors[p + "input_layernorm.weight"] = 1 + rng.normal(0, 0.1, h)
        tensors[p + "post_attention_layernorm.weight"] = 1 + rng.normal(0, 0.1, h)
        tensors[p + "mlp.gate.weight"] = rng.normal(0, 2 * h ** -0.5, (shape["experts"], h))
        mlps = [("mlp.experts.%d." % e, shape["intermediate"]) for e in range(shape["experts"])]
        if "shared" in shape:
            mlps.append(("mlp.shared_expert.", shape["shared"]))
            tensors[p + "mlp.shared_expert_gate.weight"] = rng.normal(0, h ** -0.5, (1, h))
        for prefix, inner in mlps:
            tensors[p + prefix + "gate_proj.weight"] = rng.normal(0, h ** -0.5, (inner, h))
            tensors[p + prefix + "up_proj.weight"] = rng.normal(0, h ** -0.5, (inner, h))
            tensors[p + prefix + "down_proj.weight"] = rng.normal(0, inner ** -0.5, (h, inner))
    header, blobs, offset = {}, [], 0
    for name, value in tensors.items():
        bits = np.asarray(value, np.float32).view(np.uint32).astype(np.uint64)
        bf16 = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16).tobytes()
        header[name] = {"dtype": "BF16", "shape": list(np.shape(value)),
                        "data_offsets": [offset, offset + len(bf16)]}
        blobs.append(bf16)
        offset += len(bf16)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "model.safetensors"), "wb") as f:
        f.write(len(encoded).to_bytes(8, "little") + encoded + b"".join(blobs))
    config = {"architectures": [arch], "hidden_size": h, "num_hidden_layers": shape["layers"],
              "num_attention_heads": shape["heads"], "num_key_value_heads": shape["kv_heads"],
              "head_dim": d, "vocab_size": vocab, "max_position_embeddings": 512,
              "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
              "tie_word_embeddings": False, "num_experts": shape["experts"],
              "num_experts_per_tok": shape["top_k"], "bos_token_id": 1, "eos_token_id": 2,
              "norm_topk_prob": arch == "Qwen3MoeForCausalLM"}
    if arch == "OlmoeForCausalLM":
        config["intermediate_size"] = shape["intermediate"]
    else:
        config.update({"moe_intermediate_size": shape["intermediate"],
                       "intermediate_size": 4 * h, "decoder_sparse_step": 1,
                       "mlp_only_layers": [], "use_sliding_window": False})
    if "shared" in shape:
        config["shared_expert_intermediate_size"] = shape["shared"]
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def write_checkpoint(directory, arch, shape, vocab, seed, config_edits=None):
    """A random checkpoint: `arch` a make_synthetic_moe.py --arch (its flags
    in `shape`) or a class name write_llama_moe knows; `config_edits`
    override config.json's keys."""
    if arch.endswith("ForCausalLM"):
        write_llama_moe(directory, arch, shape, vocab, seed)
    else:
        command = ["/usr/bin/python3", "tools/make_synthetic_moe.py", "--arch", arch, "--out",
                   directory, "--vocab", str(vocab), "--seed", str(seed)]
        for key, value in shape.items():
            command += ["--" + key, str(value)]
        subprocess.run(command, check=True, capture_output=True, timeout=300)
    if config_edits:
        path = os.path.join(directory, "config.json")
        with open(path) as f:
            config = json.load(f)
        config.update(config_edits)
        with open(path, "w") as f:
            json.dump(config, f, indent=2)


def expect_greedy(test, config, tensors, prompt, tokens):
    """Each of `tokens` (greedy after `prompt`) is the reference's argmax,
    up to the first step whose best two logits are too close to tell."""
    sequence = list(prompt)
    for step, token in enumerate(tokens):
        logits = reference_models.forward(config, tensors, sequence)[-1]
        best, runner_up = np.sort(logits)[-1], np.sort(logits)[-2]
        if best - runner_up <= 10 * TOLERANCE * np.abs(logits).max():
            return  # a near-tie: either token is right
        test.assertEqual(token, int(logits.argmax()), "step %d after %s" % (step, prompt))
        sequence.append(token)


def relative_errors(got, want):
    return np.abs(got - want).max(-1) / np.abs(want).max(-1)


class RandomShapesTest(unittest.TestCase):
    def test_reference_reproduces_the_shipped_goldens(self):
        for name in ["mixtral", "mixtral_sharded", "qwen2_moe", "qwen3_moe", "olmoe", "gpt_oss",
                     "gpt_oss_bf16", "deepseek_v3", "deepseek_v3_fp8", "deepseek_v2_lite"]:
            with self.subTest(model=name):
                directory = os.path.join(TINY, name)
                config, tensors = reference_models.load_model(directory)
                golden = reference_models.read_tensors(os.path.join(directory, "golden.safetensors"))
                case = 0
                while "case%d.input_ids" % case in golden:
                    want = golden["case%d.logits" % case].astype(np.float64)
                    got = reference_models.forward(config, tensors,
                                                   golden["case%d.input_ids" % case])
                    self.assertLess(relative_errors(got, want).max(), 1e-6, (name, case))
                    case += 1
                self.assertGreater(case, 0)

    def test_random_checkpoints_match_the_reference(self):
        work = os.environ.get("TEST_TMPDIR", "/tmp")
        models = MODELS + [(arch, shape, {}) for arch, shape in LLAMA_MOE_MODELS]
        for index, (arch, flags, config_edits) in enumerate(models):
            vocab = 100 + 37 * index
            directory = os.path.join(work, "%s_%d" % (arch, index))
            write_checkpoint(directory, arch, flags, vocab, index + 1, config_edits)
            config, tensors = reference_models.load_model(directory)
            rng = random.Random(index)
            label = "%s %s %s" % (arch, flags, config_edits)
            for length in PROMPT_LENGTHS:
                with self.subTest(model=label, prompt_tokens=length):
                    ids = [rng.randrange(vocab) for _ in range(length)]
                    out = os.path.join(directory, "logits.safetensors")
                    run = subprocess.run(
                        [RINGMOE, "logits", "--model", directory, "--input_ids",
                         ",".join(map(str, ids)), "--out", out],
                        capture_output=True, text=True, timeout=300)
                    self.assertEqual(run.returncode, 0, run.stderr)
                    got = next(iter(reference_models.read_tensors(out).values()))
                    got = got.astype(np.float64).reshape(length, -1)
                    want = reference_models.forward(config, tensors, ids)
                    self.assertLessEqual(relative_errors(got, want).max(), TOLERANCE)
                    if length != STREAMED_PROMPT_TOKENS:
                        continue
                    # The smallest RAM budget that runs (the refusal of a
                    # 1-byte budget names it): experts stream through the
                    # memory ring, bitwise the resident result; three
                    # threads split the work differently, within the
                    # tolerance.
                    ring = ["--ring_slots", "3", "--prefetch_depth", "2"]
                    refused = subprocess.run(
                        [RINGMOE, "logits", "--model", directory, "--input_ids", "1", "--out",
                         os.path.join(directory, "unused.safetensors"), "--host_memory_budget",
                         "1", *ring], capture_output=True, text=True, timeout=300)
                    smallest = re.search(r"smallest budget that works is (\d+)", refused.stderr)
                    self.assertIsNotNone(smallest, refused.stderr)
                    for extra, bitwise in [(["--host_memory_budget", smallest.group(1), *ring],
                                            True),
                                           (["--threads", "3"], False)]:
                        other = os.path.join(directory, "other.safetensors")
                        run = subprocess.run(
                            [RINGMOE, "logits", "--model", directory, "--input_ids",
                             ",".join(map(str, ids)), "--out", other, *extra],
                            capture_output=True, text=True, timeout=300)
                        self.assertEqual(run.returncode, 0, run.stderr)
                        with open(out, "rb") as a, open(other, "rb") as b:
                            same = a.read() == b.read()
                        if bitwise:
                            self.assertTrue(same, extra)
                        else:
                            values = next(iter(reference_models.read_tensors(other).values()))
                            values = values.astype(np.float64).reshape(length, -1)
                            self.assertLessEqual(relative_errors(values, want).max(), TOLERANCE)
            with self.subTest(model=label, greedy=True):
                prompt = [rng.randrange(vocab) for _ in range(25)]
                run = subprocess.run(
                    [RINGMOE, "generate", "--model", directory, "--input_ids",
                     ",".join(map(str, prompt)), "--max_tokens", str(GREEDY_TOKENS), "--json"],
                    capture_output=True, text=True, timeout=300)
                self.assertEqual(run.returncode, 0, run.stderr)
                expect_greedy(self, config, tensors, prompt, json.loads(run.stdout)["ids"])


if __name__ == "__main__":
    unittest.main()
