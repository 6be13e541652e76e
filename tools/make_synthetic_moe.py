#!/usr/bin/python3
"""Writes a synthetic MoE checkpoint (config.json + safetensors) for
benchmarks: random weights in a real architecture's names, shapes and dtypes,
with routers skewed the way trained models' are (a few hot experts per layer
take most tokens).

--arch mixtral (the default): a Mixtral checkpoint, all BF16. Defaults
(hidden 2048, 16 layers, 8 experts of 1024, top-2, vocab 32000) give about
2.2 GB.

  /usr/bin/python3 tools/make_synthetic_moe.py --out ~/.cache/ringmoe/models/synthetic-mixtral

--arch deepseek_v3: a DeepSeek-V3 checkpoint in the Hugging Face names
(multi-head latent attention, a shared expert, sigmoid group-limited routing
with a selection bias, the first --first_dense layers dense), stored the way
the real one is: every attention and MLP linear weight (experts and shared
experts included) in FP8 e4m3 with a float32 `<name>_scale_inv` per 128x128
block (W = fp8 * scale_inv), embeddings, lm_head, norms and routers in BF16,
the routers' e_score_correction_bias in F32. Defaults (hidden 2048, 8 layers,
16 heads, q/kv LoRA ranks 768/512, head dims nope 128 rope 64 v 128, 64
experts of 512 plus 1 shared, top-8 of 8 groups limited to 4, one dense layer
of 4096, vocab 32000) give about 1.8 GB.

  /usr/bin/python3 tools/make_synthetic_moe.py --arch deepseek_v3 --out ~/.cache/ringmoe/models/synthetic-deepseek-v3

--arch gpt_oss: a gpt-oss checkpoint (GptOssForCausalLM) in the layout of
openai/gpt-oss-20b (see "gpt-oss" in shared/testdata/moe-tiny/README.md):
config.json with the real file's keys (attention biases, head_dim 64,
layer_types sliding_attention on even layers and full_attention on odd ones,
sliding window 128, YaRN factor 32, swiglu_limit 7, quantization_config
mxfp4); q/k/v/o biases and attention sinks (0.5 + N(0, 1)); a router with a
small bias; experts fused per layer, their matrices in MXFP4 as
`mlp.experts.gate_up_proj_blocks` / `_scales` and `down_proj_blocks` /
`_scales`, U8 [E, out, in/32, 16] and [E, out, in/32] (low nibble the even
input feature, E2M1 codes, unsigned E8M0 scales: w = fp4 * 2^(s - 127);
gate_up rows interleaved, 2i gate and 2i+1 up), with BF16 `_bias`es [E, out];
everything else BF16. Nibbles are uniform over the 16 codes and each block's
scale byte lies around 127 + log2(1 / (2.93 sqrt(fan_in))), spread +-1, so
the dequantized weights have std 1/sqrt(fan_in). Sharded like the real one
into files of at most --shard_gb (default 1) GB of weights, named with its
quirk reproduced: 0-based and "of" the last index (model-00000-of-00003 ...
model-00003-of-00003 for four files), plus a compact
model.safetensors.index.json (metadata.total_size, weight_map): find shards
through the index. Tensors run in the tiny real-layout example's order (per
layer: input_layernorm, q/k/v/o weight and bias, sinks,
post_attention_layernorm, router, experts) and may split a layer across
files; each file's header carries __metadata__ {"format": "pt"}. Defaults
(hidden 2880, 6 layers, 64 heads of 64, 8 kv heads, 32 experts of 2880,
top-4, vocab 32000 where the real one has 201088, eos 2, pad 1) give about
3.2 GB in 4 files, written in about 20 s; a layer is about 0.48 GB
(gpt-oss-20b's 24 layers would make it 12 GB).

  /usr/bin/python3 tools/make_synthetic_moe.py --arch gpt_oss --out ~/.cache/ringmoe/models/synthetic-gpt-oss

The skew: every token embedding shares one direction u, and each layer's
router rows for its hot experts have a component along u, so the hidden
state's u-component acts as a per-expert bias in the router logits.

Tensors are generated and written one at a time. Needs numpy only: run with
/usr/bin/python3.
"""
import argparse
import json
import os

import numpy as np

# Shape defaults per architecture for the flags both share; a flag given on
# the command line wins.
ARCH_DEFAULTS = {
    "mixtral": dict(hidden=2048, layers=16, experts=8, top_k=2,
                    intermediate=1024, heads=16, vocab=32000),
    "deepseek_v3": dict(hidden=2048, layers=8, experts=64, top_k=8,
                        intermediate=512, heads=16, vocab=32000),
    "gpt_oss": dict(hidden=2880, layers=6, experts=32, top_k=4,
                    intermediate=2880, heads=64, vocab=32000),
}
# --kv_heads defaults (deepseek_v3 has none: its MLA uses --heads).
KV_HEADS_DEFAULTS = {"mixtral": 4, "gpt_oss": 8}

FP8_MAX = 448.0
FP8_BLOCK = 128


def to_bf16(a):
    """float32 -> bfloat16 bits, round to nearest even."""
    bits = a.astype(np.float32).view(np.uint32)
    bits = bits + 0x7FFF + ((bits >> 16) & 1)
    return (bits >> 16).astype(np.uint16)


def to_e4m3(x):
    """float32 with |x| <= 448 -> nearest float8 e4m3fn codes (uint8), ties to
    the even code; larger magnitudes saturate to 448. Never a NaN code.
    From the float32 bits: normal values (>= 2^-6) keep three mantissa bits,
    rounded to nearest even; subnormal ones are multiples of 2^-9."""
    mag = np.minimum(np.abs(x), np.float32(448.0)).astype(np.float32)
    bits = mag.view(np.uint32)
    rounded = (bits + np.uint32(0x7FFFF) + ((bits >> np.uint32(20)) & np.uint32(1))) \
        & np.uint32(0xFFF00000)
    normal = ((((rounded >> np.uint32(23)).astype(np.int32) - (127 - 7)) << 3)
              | ((rounded >> np.uint32(20)) & np.uint32(7)).astype(np.int32))
    subnormal = np.rint(mag * np.float32(2.0 ** 9)).astype(np.int32)
    code = np.minimum(np.where(mag < np.float32(2.0 ** -6), subnormal, normal), 0x7E)
    return (code | (np.signbit(x) & (code != 0)) * 0x80).astype(np.uint8)


def block_scale_shape(shape):
    return tuple(-(-n // FP8_BLOCK) for n in shape)


def quantize_fp8(w):
    """[out, in] float32 -> (e4m3 codes [out, in], scale_inv [ceil(out/128),
    ceil(in/128)] float32) with w ~= decode(codes) * scale_inv per block."""
    rows, cols = w.shape
    br, bc = block_scale_shape(w.shape)
    padded = np.zeros((br * FP8_BLOCK, bc * FP8_BLOCK), np.float32)
    padded[:rows, :cols] = w
    blocks = padded.reshape(br, FP8_BLOCK, bc, FP8_BLOCK)
    amax = np.abs(blocks).max(axis=(1, 3))
    scale = np.where(amax > 0, amax / FP8_MAX, 1.0).astype(np.float32)
    codes = to_e4m3(blocks / scale[:, None, :, None])
    codes = codes.reshape(br * FP8_BLOCK, bc * FP8_BLOCK)[:rows, :cols]
    return np.ascontiguousarray(codes), scale


# Safetensors dtype -> bytes per element, in the order the safetensors
# library lays tensors out (widest alignment first, so each stays aligned).
DTYPE_SIZES = {"F32": 4, "BF16": 2, "F8_E4M3": 1}


def write_checkpoint(out, tensors):
    """tensors: (name, shape, kind, make) in generation order; kind is "BF16"
    (make gives float32, stored rounded to bfloat16), "F32", or "FP8" (make
    gives float32 [out, in], stored as F8_E4M3 `name` plus F32
    `name_scale_inv`). Lays the file out F32, then BF16, then F8 tensors (each
    group in generation order), then generates the tensors one at a time,
    writing each at its offset. Returns the data size in bytes."""
    entries = []  # (name, dtype, shape) in generation order
    for name, shape, kind, _ in tensors:
        if kind == "FP8":
            entries.append((name, "F8_E4M3", tuple(shape)))
            entries.append((name + "_scale_inv", "F32", block_scale_shape(shape)))
        else:
            entries.append((name, kind, tuple(shape)))
    header, offsets, offset = {}, {}, 0
    for dtype in DTYPE_SIZES:
        for name, d, shape in entries:
            if d != dtype:
                continue
            size = int(np.prod(shape)) * DTYPE_SIZES[dtype]
            header[name] = {"dtype": dtype, "shape": list(shape),
                            "data_offsets": [offset, offset + size]}
            offsets[name] = offset
            offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)

    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(len(blob).to_bytes(8, "little"))
        f.write(blob)
        base = f.tell()

        def put(name, data):
            f.seek(base + offsets[name])
            f.write(data.tobytes())

        for name, shape, kind, make in tensors:
            a = make()
            assert a.shape == tuple(shape), (name, a.shape, shape)
            if kind == "FP8":
                codes, scale = quantize_fp8(a)
                put(name, codes)
                put(name + "_scale_inv", scale.astype("<f4"))
            elif kind == "F32":
                put(name, a.astype("<f4"))
            else:
                put(name, to_bf16(a).astype("<u2"))
        f.seek(0, os.SEEK_END)
        assert f.tell() == base + offset
    return offset


# MXFP4 (OCP microscaling, as gpt-oss stores its experts): 32 weights per
# block, each an FP4 E2M1 nibble, times one E8M0 power-of-two scale per block.
MXFP4_BLOCK = 32
# Mean square of the 16 E2M1 codes (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
# negatives), i.e. of a nibble drawn uniformly.
E2M1_MEAN_SQUARE = (0 + 0.25 + 1 + 2.25 + 4 + 9 + 16 + 36) / 8


def mxfp4_blocks(rng, rows_shape, fan_in):
    """Random MXFP4 blocks [*rows_shape, fan_in/32, 16] (uint8): every byte,
    hence every nibble, uniform."""
    shape = tuple(rows_shape) + (fan_in // MXFP4_BLOCK, MXFP4_BLOCK // 2)
    return rng.integers(0, 256, shape, dtype=np.uint8)


def mxfp4_scales(rng, rows_shape, fan_in):
    """Random E8M0 scale bytes [*rows_shape, fan_in/32] for uniform nibbles,
    so that the dequantized weights' variance is 1/fan_in: s = k + d + b with
    d in {-1, 0, 0, +1} (the spread) and b a coin with P(b = 1) = p, k and p
    chosen so that E[4^(s - 127)] * E2M1_MEAN_SQUARE = 1/fan_in exactly."""
    shape = tuple(rows_shape) + (fan_in // MXFP4_BLOCK,)
    spread = (4.0 ** -1 + 1 + 1 + 4) / 4  # E[4^d]
    x = 1.0 / (fan_in * E2M1_MEAN_SQUARE * spread)  # wanted E[4^(k + b - 127)]
    k = int(np.floor(np.log(x) / np.log(4)))
    p = (x / 4.0 ** k - 1) / 3  # E[4^b] = 1 + 3p
    d = np.array([-1, 0, 0, 1], np.int16)[rng.integers(0, 4, shape, dtype=np.uint8)]
    b = rng.random(shape, dtype=np.float32) < p
    return np.clip(127 + k + d + b, 0, 254).astype(np.uint8)


def write_sharded(out, tensors, shard_bytes):
    """tensors: (name, shape, kind, make) in generation order; kind is "BF16"
    (make gives float32, stored rounded to bfloat16) or "U8" (make gives
    uint8). Splits them, in order, into files of at most shard_bytes of data
    (a larger tensor gets a file of its own), named like openai/gpt-oss-20b's
    shards (0-based, "of" the last index), each laid out in generation order
    with header __metadata__ {"format": "pt"}; then generates the tensors one
    at a time, appending each to its file, and writes the compact
    model.safetensors.index.json. Returns (data size in bytes, file names)."""
    sizes = {"BF16": 2, "U8": 1}
    shards, size = [[]], 0  # shards: lists of (name, shape, kind, make, nbytes)
    for name, shape, kind, make in tensors:
        nbytes = int(np.prod(shape)) * sizes[kind]
        if shards[-1] and size + nbytes > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append((name, tuple(shape), kind, make, nbytes))
        size += nbytes
    last = len(shards) - 1
    files = [f"model-{k:05d}-of-{last:05d}.safetensors" for k in range(len(shards))]

    os.makedirs(out, exist_ok=True)
    weight_map, total = {}, 0
    for file, shard in zip(files, shards):
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for name, shape, kind, _, nbytes in shard:
            header[name] = {"dtype": kind, "shape": list(shape),
                            "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
            weight_map[name] = file
        blob = json.dumps(header, separators=(",", ":")).encode()
        blob += b" " * (-len(blob) % 8)
        with open(os.path.join(out, file), "wb") as f:
            f.write(len(blob).to_bytes(8, "little"))
            f.write(blob)
            for name, shape, kind, make, nbytes in shard:
                a = make()
                assert a.shape == shape, (name, a.shape, shape)
                if kind == "U8":
                    assert a.dtype == np.uint8, (name, a.dtype)
                    f.write(np.ascontiguousarray(a).data)
                else:
                    f.write(to_bf16(a).astype("<u2").data)
            assert f.tell() == 8 + len(blob) + offset
        total += offset
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    return total, files


def mixtral(args, normal, embedding, router):
    h, inter, head_dim = args.hidden, args.intermediate, args.hidden // args.heads
    ones = lambda: np.ones(h, np.float32)
    tensors = [("model.embed_tokens.weight", (args.vocab, h), "BF16", embedding)]
    for l in range(args.layers):
        pre = f"model.layers.{l}."
        kv = args.kv_heads * head_dim
        tensors += [
            (pre + "input_layernorm.weight", (h,), "BF16", ones),
            (pre + "post_attention_layernorm.weight", (h,), "BF16", ones),
            (pre + "self_attn.q_proj.weight", (h, h), "BF16", lambda: normal((h, h))),
            (pre + "self_attn.k_proj.weight", (kv, h), "BF16", lambda: normal((kv, h))),
            (pre + "self_attn.v_proj.weight", (kv, h), "BF16", lambda: normal((kv, h))),
            (pre + "self_attn.o_proj.weight", (h, h), "BF16", lambda: normal((h, h))),
            (pre + "block_sparse_moe.gate.weight", (args.experts, h), "BF16",
             lambda l=l: router(l)),
        ]
        for e in range(args.experts):
            ex = pre + f"block_sparse_moe.experts.{e}."
            tensors += [
                (ex + "w1.weight", (inter, h), "BF16", lambda: normal((inter, h))),
                (ex + "w3.weight", (inter, h), "BF16", lambda: normal((inter, h))),
                (ex + "w2.weight", (h, inter), "BF16", lambda: normal((h, inter))),
            ]
    tensors += [("model.norm.weight", (h,), "BF16", lambda: np.ones(h, np.float32)),
                ("lm_head.weight", (args.vocab, h), "BF16",
                 lambda: normal((args.vocab, h)))]

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
    return tensors, config


def deepseek_v3(args, normal, embedding, router, rng):
    h, heads = args.hidden, args.heads
    moe_inter, dense_inter = args.intermediate, args.dense_intermediate
    shared_inter = moe_inter * args.shared_experts
    qk_dim = args.nope + args.rope

    def linear(name, rows, cols):
        return (name, (rows, cols), "FP8", lambda: normal((rows, cols)))

    def ones(name, n):
        return (name, (n,), "BF16", lambda: np.ones(n, np.float32))

    def mlp(pre, inter):
        return [linear(pre + "gate_proj.weight", inter, h),
                linear(pre + "up_proj.weight", inter, h),
                linear(pre + "down_proj.weight", h, inter)]

    tensors = [("model.embed_tokens.weight", (args.vocab, h), "BF16", embedding)]
    for l in range(args.layers):
        pre = f"model.layers.{l}."
        at = pre + "self_attn."
        tensors += [
            ones(pre + "input_layernorm.weight", h),
            ones(pre + "post_attention_layernorm.weight", h),
            linear(at + "q_a_proj.weight", args.q_lora_rank, h),
            ones(at + "q_a_layernorm.weight", args.q_lora_rank),
            linear(at + "q_b_proj.weight", heads * qk_dim, args.q_lora_rank),
            linear(at + "kv_a_proj_with_mqa.weight", args.kv_lora_rank + args.rope, h),
            ones(at + "kv_a_layernorm.weight", args.kv_lora_rank),
            linear(at + "kv_b_proj.weight", heads * (args.nope + args.v_dim),
                   args.kv_lora_rank),
            linear(at + "o_proj.weight", h, heads * args.v_dim),
        ]
        if l < args.first_dense:
            tensors += mlp(pre + "mlp.", dense_inter)
            continue
        tensors += [
            (pre + "mlp.gate.weight", (args.experts, h), "BF16", lambda l=l: router(l)),
            (pre + "mlp.gate.e_score_correction_bias", (args.experts,), "F32",
             lambda: rng.standard_normal(args.experts, dtype=np.float32) * 0.01),
        ]
        for e in range(args.experts):
            tensors += mlp(pre + f"mlp.experts.{e}.", moe_inter)
        if args.shared_experts > 0:
            tensors += mlp(pre + "mlp.shared_experts.", shared_inter)
    tensors += [("model.norm.weight", (h,), "BF16", lambda: np.ones(h, np.float32)),
                ("lm_head.weight", (args.vocab, h), "BF16",
                 lambda: normal((args.vocab, h)))]

    config = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "hidden_size": h,
        "intermediate_size": dense_inter,
        "moe_intermediate_size": moe_inter,
        "num_hidden_layers": args.layers,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "n_routed_experts": args.experts,
        "n_shared_experts": args.shared_experts,
        "num_experts_per_tok": args.top_k,
        "n_group": args.groups,
        "topk_group": args.topk_groups,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.5,
        "first_k_dense_replace": args.first_dense,
        "moe_layer_freq": 1,
        "q_lora_rank": args.q_lora_rank,
        "kv_lora_rank": args.kv_lora_rank,
        "qk_nope_head_dim": args.nope,
        "qk_rope_head_dim": args.rope,
        "v_head_dim": args.v_dim,
        "vocab_size": args.vocab,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000,
        "rope_scaling": {
            "type": "yarn",
            "factor": 40,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
        "tie_word_embeddings": False,
        "hidden_act": "silu",
        "bos_token_id": 0,
        "eos_token_id": 1,
        "num_nextn_predict_layers": 0,
        "attention_bias": False,
        "quantization_config": {
            "activation_scheme": "dynamic",
            "fmt": "e4m3",
            "quant_method": "fp8",
            "weight_block_size": [FP8_BLOCK, FP8_BLOCK],
        },
        "torch_dtype": "bfloat16",
    }
    return tensors, config


def gpt_oss(args, normal, embedding, router, rng):
    h, inter, n_exp = args.hidden, args.intermediate, args.experts
    q_dim, kv_dim = args.heads * args.head_dim, args.kv_heads * args.head_dim

    def bf16(name, shape, make=None):
        return (name, tuple(shape), "BF16", make or (lambda: normal(shape)))

    def ones(name, n):
        return bf16(name, (n,), lambda: np.ones(n, np.float32))

    def experts(pre, rows, fan_in):
        rows_shape = (n_exp, rows)
        return [
            (pre + "_blocks", rows_shape + (fan_in // MXFP4_BLOCK, MXFP4_BLOCK // 2),
             "U8", lambda: mxfp4_blocks(rng, rows_shape, fan_in)),
            (pre + "_scales", rows_shape + (fan_in // MXFP4_BLOCK,),
             "U8", lambda: mxfp4_scales(rng, rows_shape, fan_in)),
            bf16(pre + "_bias", rows_shape),
        ]

    tensors = [bf16("model.embed_tokens.weight", (args.vocab, h), embedding)]
    for l in range(args.layers):
        pre = f"model.layers.{l}."
        at = pre + "self_attn."
        tensors += [ones(pre + "input_layernorm.weight", h)]
        for proj, rows, cols in (("q", q_dim, h), ("k", kv_dim, h),
                                 ("v", kv_dim, h), ("o", h, q_dim)):
            tensors += [bf16(at + proj + "_proj.weight", (rows, cols)),
                        bf16(at + proj + "_proj.bias", (rows,))]
        tensors += [
            bf16(at + "sinks", (args.heads,),
                 lambda: 0.5 + rng.standard_normal(args.heads, dtype=np.float32)),
            ones(pre + "post_attention_layernorm.weight", h),
            bf16(pre + "mlp.router.weight", (n_exp, h), lambda l=l: router(l)),
            bf16(pre + "mlp.router.bias", (n_exp,),
                 lambda: rng.standard_normal(n_exp, dtype=np.float32) * 0.01),
        ]
        tensors += experts(pre + "mlp.experts.gate_up_proj", 2 * inter, h)
        tensors += experts(pre + "mlp.experts.down_proj", h, inter)
    tensors += [ones("model.norm.weight", h),
                bf16("lm_head.weight", (args.vocab, h))]

    # The keys of openai/gpt-oss-20b's config.json, in its (sorted) order.
    config = {
        "architectures": ["GptOssForCausalLM"],
        "attention_bias": True,
        "attention_dropout": 0.0,
        "eos_token_id": 2,
        "experts_per_token": args.top_k,
        "head_dim": args.head_dim,
        "hidden_act": "silu",
        "hidden_size": h,
        "initial_context_length": 4096,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "layer_types": ["sliding_attention" if l % 2 == 0 else "full_attention"
                        for l in range(args.layers)],
        "max_position_embeddings": 131072,
        "model_type": "gpt_oss",
        "num_attention_heads": args.heads,
        "num_experts_per_tok": args.top_k,
        "num_hidden_layers": args.layers,
        "num_key_value_heads": args.kv_heads,
        "num_local_experts": n_exp,
        "output_router_logits": False,
        "pad_token_id": 1,
        "quantization_config": {
            "modules_to_not_convert": [
                "model.layers.*.self_attn",
                "model.layers.*.mlp.router",
                "model.embed_tokens",
                "lm_head",
            ],
            "quant_method": "mxfp4",
        },
        "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "factor": 32.0,
            "original_max_position_embeddings": 4096,
            "rope_type": "yarn",
            "truncate": False,
        },
        "rope_theta": 150000,
        "router_aux_loss_coef": 0.9,
        "sliding_window": args.sliding_window,
        "swiglu_limit": 7.0,
        "tie_word_embeddings": False,
        "transformers_version": "4.55.0.dev0",
        "use_cache": True,
        "vocab_size": args.vocab,
    }
    return tensors, config


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--arch", choices=sorted(ARCH_DEFAULTS), default="mixtral")
    per_arch = lambda key: "default " + ", ".join(
        f"{d[key]} ({a})" for a, d in ARCH_DEFAULTS.items())
    p.add_argument("--hidden", type=int, help=per_arch("hidden"))
    p.add_argument("--layers", type=int, help=per_arch("layers"))
    p.add_argument("--experts", type=int, help="routed experts per layer; " +
                   per_arch("experts"))
    p.add_argument("--top_k", type=int, help=per_arch("top_k"))
    p.add_argument("--intermediate", type=int,
                   help="expert intermediate size (moe_intermediate_size for "
                        "deepseek_v3); " + per_arch("intermediate"))
    p.add_argument("--heads", type=int, help=per_arch("heads"))
    p.add_argument("--kv_heads", type=int, help="mixtral and gpt_oss; default " +
                   ", ".join(f"{n} ({a})" for a, n in KV_HEADS_DEFAULTS.items()))
    p.add_argument("--vocab", type=int, help=per_arch("vocab"))
    p.add_argument("--hot_experts", type=int, default=3,
                   help="experts per layer that the router favours")
    p.add_argument("--seed", type=int, default=0)
    ds = p.add_argument_group("deepseek_v3 only")
    ds.add_argument("--q_lora_rank", type=int, default=768)
    ds.add_argument("--kv_lora_rank", type=int, default=512)
    ds.add_argument("--nope", type=int, default=128, help="qk_nope_head_dim")
    ds.add_argument("--rope", type=int, default=64, help="qk_rope_head_dim")
    ds.add_argument("--v_dim", type=int, default=128, help="v_head_dim")
    ds.add_argument("--shared_experts", type=int, default=1, help="n_shared_experts")
    ds.add_argument("--groups", type=int, default=8, help="n_group")
    ds.add_argument("--topk_groups", type=int, default=4, help="topk_group")
    ds.add_argument("--first_dense", type=int, default=1,
                    help="first_k_dense_replace: leading layers with a dense MLP")
    ds.add_argument("--dense_intermediate", type=int, default=4096,
                    help="intermediate_size of the dense layers")
    go = p.add_argument_group("gpt_oss only")
    go.add_argument("--head_dim", type=int, default=64)
    go.add_argument("--sliding_window", type=int, default=128,
                    help="window of the sliding_attention (even) layers")
    go.add_argument("--shard_gb", type=float, default=1.0,
                    help="most weight data per safetensors file, in GB (1e9 bytes)")
    args = p.parse_args(argv)
    for key, value in ARCH_DEFAULTS[args.arch].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.kv_heads is None:
        args.kv_heads = KV_HEADS_DEFAULTS.get(args.arch)
    if args.arch == "gpt_oss":
        for key in ("hidden", "intermediate"):
            if getattr(args, key) <= 0 or getattr(args, key) % MXFP4_BLOCK:
                p.error(f"--{key} must be a positive multiple of {MXFP4_BLOCK} "
                        "(the MXFP4 block)")
        if args.kv_heads < 1 or args.heads % args.kv_heads:
            p.error("--heads must be a multiple of --kv_heads")
        if not 1 <= args.top_k <= args.experts:
            p.error("--top_k must be in [1, --experts]")
        if args.shard_gb <= 0:
            p.error("--shard_gb must be positive")
    if args.arch == "deepseek_v3":
        if args.groups < 1 or args.experts % args.groups:
            p.error("--experts must be a multiple of --groups")
        if args.experts // args.groups < 2:
            p.error("noaux_tc scores a group by its top two experts: "
                    "--experts must be at least 2 * --groups")
        if not 1 <= args.topk_groups <= args.groups:
            p.error("--topk_groups must be in [1, --groups]")
        if args.top_k > args.topk_groups * (args.experts // args.groups):
            p.error("--top_k exceeds the experts in --topk_groups groups")
    return args


def build(args):
    """(tensors, config) for args; the tensors' generators share one RNG and
    must run in list order."""
    h = args.hidden
    rng = np.random.default_rng(args.seed)
    u = rng.standard_normal(h).astype(np.float32)
    u /= np.linalg.norm(u)
    std = 0.02

    def normal(shape):
        return rng.standard_normal(shape, dtype=np.float32) * std

    def embedding():
        # The shared direction, about as large as the random part.
        return normal((args.vocab, h)) + u * (std * np.sqrt(h))

    def router(layer):
        layer_rng = np.random.default_rng(args.seed * 1000 + layer)
        w = normal((args.experts, h))
        hot = layer_rng.permutation(args.experts)[: args.hot_experts]
        for rank, e in enumerate(hot):
            w[e] += u * (0.08 / (rank + 1))
        return w

    if args.arch == "deepseek_v3":
        return deepseek_v3(args, normal, embedding, router, rng)
    if args.arch == "gpt_oss":
        return gpt_oss(args, normal, embedding, router, rng)
    return mixtral(args, normal, embedding, router)


def main():
    args = parse_args()
    tensors, config = build(args)
    if args.arch == "gpt_oss":
        size, files = write_sharded(args.out, tensors, int(args.shard_gb * 1e9))
        where = (files[0] if len(files) == 1 else
                 f"{len(files)} files, {files[0]} .. {files[-1]}")
    else:
        size = write_checkpoint(args.out, tensors)
        where = "model.safetensors"
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    print(f"wrote {args.out}: {size / 1e9:.2f} GB of weights ({size} bytes) in {where}")


if __name__ == "__main__":
    main()
