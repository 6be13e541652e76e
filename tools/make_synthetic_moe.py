#!/usr/bin/python3
"""Writes a synthetic Mixtral checkpoint (config.json + model.safetensors,
BF16) for benchmarking the CPU path: random weights in real Mixtral names and
shapes, with routers skewed the way trained models' are (a few hot experts
per layer take most tokens).

The skew: every token embedding shares one direction u, and each layer's
router rows for its hot experts have a component along u, so the hidden
state's u-component acts as a per-expert bias in the router logits.

Defaults (hidden 2048, 16 layers, 8 experts of 1024, top-2, vocab 32000)
give about 2.2 GB. Needs numpy: run with /usr/bin/python3.

  /usr/bin/python3 tools/make_synthetic_moe.py --out ~/.cache/ringmoe/models/synthetic-mixtral
"""
import argparse
import json
import os

import numpy as np


def to_bf16(a):
    """float32 -> bfloat16 bits, round to nearest even."""
    bits = a.astype(np.float32).view(np.uint32)
    bits = bits + 0x7FFF + ((bits >> 16) & 1)
    return (bits >> 16).astype(np.uint16)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--top_k", type=int, default=2)
    p.add_argument("--intermediate", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv_heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--hot_experts", type=int, default=3,
                   help="experts per layer that the router favours")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    h, inter, head_dim = args.hidden, args.intermediate, args.hidden // args.heads
    rng = np.random.default_rng(args.seed)
    u = rng.standard_normal(h).astype(np.float32)
    u /= np.linalg.norm(u)
    std = 0.02

    def normal(shape):
        return rng.standard_normal(shape, dtype=np.float32) * std

    def embedding():
        # The shared direction, about as large as the random part.
        return normal((args.vocab, h)) + u * (std * np.sqrt(h))

    def router(layer_rng):
        w = normal((args.experts, h))
        hot = layer_rng.permutation(args.experts)[: args.hot_experts]
        for rank, e in enumerate(hot):
            w[e] += u * (0.08 / (rank + 1))
        return w

    # (name, shape, generator): generated one at a time while writing.
    tensors = [("model.embed_tokens.weight", (args.vocab, h), embedding)]
    for l in range(args.layers):
        pre = f"model.layers.{l}."
        tensors += [
            (pre + "input_layernorm.weight", (h,), lambda: np.ones(h, np.float32)),
            (pre + "post_attention_layernorm.weight", (h,), lambda: np.ones(h, np.float32)),
            (pre + "self_attn.q_proj.weight", (h, h), lambda: normal((h, h))),
            (pre + "self_attn.k_proj.weight", (args.kv_heads * head_dim, h),
             lambda: normal((args.kv_heads * head_dim, h))),
            (pre + "self_attn.v_proj.weight", (args.kv_heads * head_dim, h),
             lambda: normal((args.kv_heads * head_dim, h))),
            (pre + "self_attn.o_proj.weight", (h, h), lambda: normal((h, h))),
            (pre + "block_sparse_moe.gate.weight", (args.experts, h),
             lambda l=l: router(np.random.default_rng(args.seed * 1000 + l))),
        ]
        for e in range(args.experts):
            ex = pre + f"block_sparse_moe.experts.{e}."
            tensors += [
                (ex + "w1.weight", (inter, h), lambda: normal((inter, h))),
                (ex + "w3.weight", (inter, h), lambda: normal((inter, h))),
                (ex + "w2.weight", (h, inter), lambda: normal((h, inter))),
            ]
    tensors += [("model.norm.weight", (h,), lambda: np.ones(h, np.float32)),
                ("lm_head.weight", (args.vocab, h), lambda: normal((args.vocab, h)))]

    header, offset = {}, 0
    for name, shape, _ in tensors:
        size = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "model.safetensors"), "wb") as f:
        f.write(len(blob).to_bytes(8, "little"))
        f.write(blob)
        for _, shape, make in tensors:
            a = make()
            assert a.shape == tuple(shape)
            f.write(to_bf16(a).tobytes())

    config = {
        "architectures": ["MixtralForCausalLM"],
        "model_type": "mixtral",
        "hidden_size": h,
        "intermediate_size": inter,
        "num_hidden_layers": args.layers,
        "num_attention_heads": args.heads,
        "num_key_value_heads": args.kv_heads,
        "num_local_experts": args.experts,
        "num_experts_per_tok": args.top_k,
        "vocab_size": args.vocab,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "hidden_act": "silu",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16",
    }
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    print(f"wrote {args.out}: {offset / 1e9:.2f} GB of weights")


if __name__ == "__main__":
    main()
