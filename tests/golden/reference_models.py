"""A second forward pass, in float64 numpy, for the architectures whose
semantics the moe-tiny README spells out (Mixtral, Qwen2-MoE, Qwen3-MoE,
OLMoE, gpt-oss, DeepSeek-V2/V3):
written from that text and transformers' modeling files, sharing nothing with
the C++ engine, and held to the shipped float64 goldens (random_shapes_test)
before it judges anything else. Weights are read from the checkpoint as
stored: BF16, F32, FP8 e4m3 with block scales, MXFP4 blocks and scales."""
import json
import math
import os
import struct

import numpy as np


def read_tensors(path):
    """Every tensor of one safetensors file as a numpy array (BF16 widened
    to float32; U8 and F8_E4M3 as raw bytes)."""
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        out = {}
        for name, t in header.items():
            if name == "__metadata__":
                continue
            begin, end = t["data_offsets"]
            f.seek(8 + size + begin)
            raw = f.read(end - begin)
            dtype = t["dtype"]
            if dtype == "BF16":
                a = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
            elif dtype == "F32":
                a = np.frombuffer(raw, np.float32)
            elif dtype in ("U8", "F8_E4M3"):
                a = np.frombuffer(raw, np.uint8)
            elif dtype == "I32":
                a = np.frombuffer(raw, np.int32)
            else:
                raise ValueError("%s: dtype %s" % (name, dtype))
            out[name] = a.reshape(t["shape"])
        return out


def load_model(directory):
    """(config, tensors) of a checkpoint directory, sharded or not."""
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    index = os.path.join(directory, "model.safetensors.index.json")
    files = ["model.safetensors"]
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    tensors = {}
    for name in files:
        tensors.update(read_tensors(os.path.join(directory, name)))
    return config, tensors


def rms_norm(x, weight, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def silu(x):
    return x / (1 + np.exp(-x))


def softmax_rows(scores):
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def rotate_half(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + np.concatenate([-x[..., half:], x[..., :half]], axis=-1) * sin


def fp8_e4m3(codes):
    u = codes.astype(np.int64)
    sign = np.where(u & 0x80, -1.0, 1.0)
    exponent, mantissa = (u >> 3) & 15, u & 7
    return sign * np.where(exponent == 0, mantissa / 8.0 * 2.0 ** -6,
                           (1 + mantissa / 8.0) * np.exp2(exponent - 7.0))


E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6])


def mxfp4(blocks, scales):
    """[..., out, G, 16] e2m1 pairs (low nibble first) and [..., out, G] e8m0
    scales -> [..., out, 32 G]."""
    values = np.stack([E2M1[blocks & 15], E2M1[blocks >> 4]], axis=-1)
    values = values.reshape(*blocks.shape[:-1], 32)
    values = values * np.exp2(scales.astype(np.float64) - 127)[..., None]
    return values.reshape(*blocks.shape[:-2], blocks.shape[-2] * 32)


class Weights:
    """The checkpoint's tensors in float64, each decoded once (experts are
    asked for once per token)."""

    def __init__(self, config, tensors):
        self.config, self.tensors, self.decoded = config, tensors, {}

    def __contains__(self, name):
        return name in self.tensors

    def __call__(self, name):
        if name not in self.decoded:
            self.decoded[name] = self.decode(name)
        return self.decoded[name]

    def decode(self, name):
        w = self.tensors[name]
        if name + "_scale_inv" in self.tensors:  # FP8 with block scales
            rows, cols = self.config["quantization_config"]["weight_block_size"]
            scale = self.tensors[name + "_scale_inv"].astype(np.float64)
            full = np.repeat(np.repeat(scale, rows, 0), cols, 1)
            return fp8_e4m3(w) * full[: w.shape[0], : w.shape[1]]
        return w.astype(np.float64)


def attend(q, k, v, scale, window=0, sinks=None):
    """Causal attention of one head: q [T, d], k [T, d], v [T, dv]; keys
    j with i - window < j <= i when window > 0; a sink logit joins each
    row's softmax denominator."""
    n = q.shape[0]
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    visible = j <= i
    if window:
        visible &= j > i - window
    s = np.where(visible, q @ k.T * scale, -np.inf)
    top = s.max(-1, keepdims=True)
    if sinks is not None:
        top = np.maximum(top, sinks)
    e = np.exp(s - top)
    denominator = e.sum(-1, keepdims=True)
    if sinks is not None:
        denominator = denominator + np.exp(sinks - top)
    return (e / denominator) @ v


def llama_moe(config, tensors, ids):
    """Mixtral, Qwen2-MoE, Qwen3-MoE and OLMoE: GQA with rotate-half RoPE
    (q/k/v biases where the checkpoint has them; q/k RMSNorm per head where
    its weight is head_dim wide, over the whole projection where it is
    wider), an optional sliding window, a softmax router whose top-k
    probabilities are renormalised where the architecture says so, SwiGLU
    experts and Qwen2-MoE's sigmoid-gated shared expert."""
    w = Weights(config, tensors)
    mixtral_names = config["architectures"][0] == "MixtralForCausalLM"
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    eps, k = config["rms_norm_eps"], config["num_experts_per_tok"]
    renormalise = True if mixtral_names else bool(config.get("norm_topk_prob"))
    window = config.get("sliding_window") or 0
    if config.get("use_sliding_window") is False:
        window = 0
    n = len(ids)
    inv = config.get("rope_theta", 10000.0) ** (-np.arange(0, head_dim, 2) / head_dim)
    angles = np.arange(n)[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(angles)] * 2, -1)[:, None]
    sin = np.concatenate([np.sin(angles)] * 2, -1)[:, None]
    x = tensors["model.embed_tokens.weight"][ids].astype(np.float64)
    for layer in range(config["num_hidden_layers"]):
        p = "model.layers.%d." % layer
        h = rms_norm(x, w(p + "input_layernorm.weight"), eps)

        def project(name, count):
            y = h @ w(p + "self_attn.%s_proj.weight" % name).T
            if p + "self_attn.%s_proj.bias" % name in w:
                y = y + w(p + "self_attn.%s_proj.bias" % name)
            norm = p + "self_attn.%s_norm.weight" % name
            if norm in w and w(norm).shape[0] != head_dim:  # the whole vector
                y = rms_norm(y, w(norm), eps)
            y = y.reshape(n, count, head_dim)
            if norm in w and w(norm).shape[0] == head_dim:  # each head
                y = rms_norm(y, w(norm), eps)
            return y

        q = rotate_half(project("q", heads), cos, sin)
        kk = rotate_half(project("k", kv_heads), cos, sin)
        v = project("v", kv_heads)
        out = np.stack([attend(q[:, a], kk[:, a // (heads // kv_heads)],
                               v[:, a // (heads // kv_heads)], head_dim ** -0.5, window)
                        for a in range(heads)], axis=1)
        x = x + out.reshape(n, heads * head_dim) @ w(p + "self_attn.o_proj.weight").T
        h = rms_norm(x, w(p + "post_attention_layernorm.weight"), eps)
        moe_prefix = p + ("block_sparse_moe." if mixtral_names else "mlp.")
        probabilities = softmax_rows(h @ w(moe_prefix + "gate.weight").T)
        moe = np.zeros_like(x)
        for t in range(n):
            top = np.argsort(-probabilities[t], kind="stable")[:k]
            weights = probabilities[t, top]
            if renormalise:
                weights = weights / weights.sum()
            for e, weight in zip(top, weights):
                expert = moe_prefix + "experts.%d." % e
                if mixtral_names:
                    act = silu(w(expert + "w1.weight") @ h[t]) * (w(expert + "w3.weight") @ h[t])
                    moe[t] += weight * (w(expert + "w2.weight") @ act)
                else:
                    act = silu(w(expert + "gate_proj.weight") @ h[t]) * \
                        (w(expert + "up_proj.weight") @ h[t])
                    moe[t] += weight * (w(expert + "down_proj.weight") @ act)
        shared = p + "mlp.shared_expert."
        if shared + "gate_proj.weight" in w:
            act = silu(h @ w(shared + "gate_proj.weight").T) * (h @ w(shared + "up_proj.weight").T)
            gate = 1 / (1 + np.exp(-(h @ w(p + "mlp.shared_expert_gate.weight").T)))
            moe = moe + gate * (act @ w(shared + "down_proj.weight").T)
        x = x + moe
    return rms_norm(x, w("model.norm.weight"), eps) @ w("lm_head.weight").T


def yarn_inverse_frequencies(config, dim, factor, truncate):
    """transformers' _compute_yarn_parameters' inverse frequencies."""
    scaling, base = config["rope_scaling"], config["rope_theta"]
    original = scaling.get("original_max_position_embeddings") or config["max_position_embeddings"]

    def correction(rotations):
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction(scaling.get("beta_fast") or 32), correction(scaling.get("beta_slow") or 1)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2) - low) / (high - low), 0, 1)
    base_frequencies = base ** (-np.arange(0, dim, 2) / dim)
    return base_frequencies / factor * ramp + base_frequencies * (1 - ramp)


def gpt_oss(config, tensors, ids):
    """GptOssForCausalLM as the moe-tiny README states it."""
    w = Weights(config, tensors)
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    kv_heads = config["num_key_value_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    eps = config["rms_norm_eps"]
    k = config.get("num_experts_per_tok") or config["experts_per_token"]
    limit = config.get("swiglu_limit", 7.0)
    scaling = config["rope_scaling"]
    factor = scaling["factor"]
    if scaling.get("original_max_position_embeddings"):
        factor = config["max_position_embeddings"] / scaling["original_max_position_embeddings"]
    inv = yarn_inverse_frequencies(config, head_dim, factor, scaling.get("truncate", True))
    attention_factor = scaling.get("attention_factor") or (
        0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)
    n = len(ids)
    angles = np.arange(n)[:, None] * inv[None, :]
    cos = (np.concatenate([np.cos(angles)] * 2, -1) * attention_factor)[:, None]
    sin = (np.concatenate([np.sin(angles)] * 2, -1) * attention_factor)[:, None]
    x = tensors["model.embed_tokens.weight"][ids].astype(np.float64)
    for layer in range(config["num_hidden_layers"]):
        p = "model.layers.%d." % layer
        h = rms_norm(x, w(p + "input_layernorm.weight"), eps)

        def project(name, count):
            return (h @ w(p + "self_attn.%s.weight" % name).T
                    + w(p + "self_attn.%s.bias" % name)).reshape(n, count, head_dim)

        q = rotate_half(project("q_proj", heads), cos, sin)
        kk = rotate_half(project("k_proj", kv_heads), cos, sin)
        v = project("v_proj", kv_heads)
        sinks = w(p + "self_attn.sinks")
        window = config["sliding_window"] if config["layer_types"][layer] == "sliding_attention" else 0
        out = np.stack([attend(q[:, a], kk[:, a // (heads // kv_heads)],
                               v[:, a // (heads // kv_heads)], head_dim ** -0.5, window,
                               sinks[a]) for a in range(heads)], axis=1)
        x = x + out.reshape(n, heads * head_dim) @ w(p + "self_attn.o_proj.weight").T \
            + w(p + "self_attn.o_proj.bias")
        h = rms_norm(x, w(p + "post_attention_layernorm.weight"), eps)
        logits = h @ w(p + "mlp.router.weight").T + w(p + "mlp.router.bias")
        if p + "mlp.experts.gate_up_proj_blocks" in w:
            gate_up = mxfp4(tensors[p + "mlp.experts.gate_up_proj_blocks"],
                            tensors[p + "mlp.experts.gate_up_proj_scales"])
            down = mxfp4(tensors[p + "mlp.experts.down_proj_blocks"],
                         tensors[p + "mlp.experts.down_proj_scales"])
        else:  # transformers' dense [E, in, out] layout
            gate_up = np.swapaxes(w(p + "mlp.experts.gate_up_proj"), 1, 2)
            down = np.swapaxes(w(p + "mlp.experts.down_proj"), 1, 2)
        gate_up_bias = w(p + "mlp.experts.gate_up_proj_bias")
        down_bias = w(p + "mlp.experts.down_proj_bias")
        moe = np.zeros_like(x)
        for t in range(n):
            top = np.argsort(-logits[t], kind="stable")[:k]
            weights = softmax_rows(logits[t, top])
            for e, weight in zip(top, weights):
                gu = gate_up[e] @ h[t] + gate_up_bias[e]
                gate, up = np.minimum(gu[0::2], limit), np.clip(gu[1::2], -limit, limit)
                glu = gate / (1 + np.exp(-1.702 * gate))
                moe[t] += weight * (down[e] @ ((up + 1) * glu) + down_bias[e])
        x = x + moe
    return rms_norm(x, w("model.norm.weight"), eps) @ w("lm_head.weight").T


def deepseek(config, tensors, ids):
    """DeepseekV3ForCausalLM / DeepseekV2ForCausalLM: MLA with interleaved
    YaRN RoPE on the rope dims, grouped sigmoid (V3) or softmax (V2)
    routing, shared experts, the first layers dense."""
    w = Weights(config, tensors)
    heads, eps = config["num_attention_heads"], config["rms_norm_eps"]
    nope, rope, v_dim = (config["qk_nope_head_dim"], config["qk_rope_head_dim"],
                         config["v_head_dim"])
    rank = config["kv_lora_rank"]
    scaling = config["rope_scaling"]
    factor = scaling["factor"]

    def mscale(m):
        return 0.1 * m * math.log(factor) + 1.0 if factor > 1 else 1.0

    inv = yarn_inverse_frequencies(config, rope, factor, True)
    attention_factor = mscale(scaling.get("mscale", 1)) / mscale(scaling.get("mscale_all_dim", 1))
    scale = (nope + rope) ** -0.5 * mscale(scaling.get("mscale_all_dim", 0)) ** 2
    n = len(ids)
    angles = np.arange(n)[:, None] * inv[None, :]
    cos, sin = np.cos(angles) * attention_factor, np.sin(angles) * attention_factor

    def rotate_pairs(x):  # dims (2i, 2i + 1) rotated together
        out = np.empty_like(x)
        out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
        out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
        return out

    def mlp(prefix, x):
        return (silu(x @ w(prefix + "gate_proj.weight").T) * (x @ w(prefix + "up_proj.weight").T)) \
            @ w(prefix + "down_proj.weight").T

    experts, k = config["n_routed_experts"], config["num_experts_per_tok"]
    groups, kept_groups = config.get("n_group") or 1, config.get("topk_group") or 1
    method = config.get("topk_method", "greedy")
    x = tensors["model.embed_tokens.weight"][ids].astype(np.float64)
    for layer in range(config["num_hidden_layers"]):
        p = "model.layers.%d." % layer
        h = rms_norm(x, w(p + "input_layernorm.weight"), eps)
        if config.get("q_lora_rank"):
            q = rms_norm(h @ w(p + "self_attn.q_a_proj.weight").T,
                         w(p + "self_attn.q_a_layernorm.weight"), 1e-6) \
                @ w(p + "self_attn.q_b_proj.weight").T
        else:
            q = h @ w(p + "self_attn.q_proj.weight").T
        q = q.reshape(n, heads, nope + rope)
        compressed = h @ w(p + "self_attn.kv_a_proj_with_mqa.weight").T
        kv = (rms_norm(compressed[:, :rank], w(p + "self_attn.kv_a_layernorm.weight"), 1e-6)
              @ w(p + "self_attn.kv_b_proj.weight").T).reshape(n, heads, nope + v_dim)
        k_rope = rotate_pairs(compressed[:, rank:])
        out = np.stack([
            attend(np.concatenate([q[:, a, :nope], rotate_pairs(q[:, a, nope:])], -1),
                   np.concatenate([kv[:, a, :nope], k_rope], -1), kv[:, a, nope:], scale)
            for a in range(heads)], axis=1)
        x = x + out.reshape(n, heads * v_dim) @ w(p + "self_attn.o_proj.weight").T
        h = rms_norm(x, w(p + "post_attention_layernorm.weight"), eps)
        if layer < config["first_k_dense_replace"]:
            x = x + mlp(p + "mlp.", h)
            continue
        logits = h @ w(p + "mlp.gate.weight").T
        y = mlp(p + "mlp.shared_experts.", h) if config.get("n_shared_experts") else np.zeros_like(h)
        bias_name = p + "mlp.gate.e_score_correction_bias"
        for t in range(n):
            if config.get("scoring_func", "softmax") == "sigmoid":
                scores = 1 / (1 + np.exp(-logits[t]))
            else:
                scores = softmax_rows(logits[t])
            # The selection bias belongs to V3's noaux_tc (V2 has none).
            choice = scores + (w(bias_name) if method == "noaux_tc" else 0)
            if method in ("noaux_tc", "group_limited_greedy"):
                per_group = choice.reshape(groups, experts // groups)
                group_scores = (np.sort(per_group, -1)[:, -2:].sum(-1) if method == "noaux_tc"
                                else per_group.max(-1))
                kept = np.zeros(groups, bool)
                kept[np.argsort(-group_scores, kind="stable")[:kept_groups]] = True
                choice = np.where(np.repeat(kept, experts // groups), choice, -np.inf)
            top = np.argsort(-choice, kind="stable")[:k]
            weights = scores[top]
            if config.get("norm_topk_prob"):
                weights = weights / (weights.sum() + 1e-20)
            weights = weights * config.get("routed_scaling_factor", 1.0)
            for e, weight in zip(top, weights):
                y[t] += weight * mlp(p + "mlp.experts.%d." % e, h[t:t + 1])[0]
        x = x + y
    return rms_norm(x, w("model.norm.weight"), eps) @ w("lm_head.weight").T


FORWARD = {
    "MixtralForCausalLM": llama_moe,
    "Qwen2MoeForCausalLM": llama_moe,
    "Qwen3MoeForCausalLM": llama_moe,
    "OlmoeForCausalLM": llama_moe,
    "GptOssForCausalLM": gpt_oss,
    "DeepseekV3ForCausalLM": deepseek,
    "DeepseekV2ForCausalLM": deepseek,
}


def forward(config, tensors, ids):
    """Logits [T, vocab] of `ids` run as one prompt."""
    return FORWARD[config["architectures"][0]](config, tensors, np.asarray(ids))
