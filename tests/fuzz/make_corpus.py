#!/usr/bin/env python3
"""Writes the seed corpora of the config, tokenizer, chat_template,
kserve_request and openai_request fuzzers (safetensors has its own script).

Seeds are real inputs derived from tests/testdata plus small handmade ones.
Seeds named valid_* must be accepted and invalid_* refused (the replay tests
check both); other names carry no promise. regression_* seeds (crash inputs
found by fuzzing) are not written here and are kept when this runs again.

  /usr/bin/python3 tests/fuzz/make_corpus.py

The KServe seeds need the generated grpc_service_pb2 module: build
//clients/python:ringmoe_client first (the script finds it in bazel-bin).
"""
import glob
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TESTDATA = os.path.join(ROOT, "tests", "testdata")
TOKENIZERS = os.path.join(TESTDATA, "tokenizers")


def write_corpus(name, seeds):
    out = os.path.join(HERE, "corpus", name)
    os.makedirs(out, exist_ok=True)
    for old in os.listdir(out):
        if not old.startswith("regression_"):
            os.remove(os.path.join(out, old))
    for seed_name, data in seeds.items():
        if isinstance(data, str):
            data = data.encode()
        with open(os.path.join(out, seed_name), "wb") as f:
            f.write(data)
    print(f"{name}: {len(seeds)} seeds")


def dumps(value):
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def read(path):
    with open(path, "rb") as f:
        return f.read()


# --- config.json -------------------------------------------------------------

def config_seeds():
    seeds = {}
    for path in sorted(glob.glob(os.path.join(TESTDATA, "*", "config.json")) +
                       glob.glob(os.path.join(TESTDATA, "moe-tiny", "*",
                                              "config.json"))):
        model = os.path.basename(os.path.dirname(path))
        seeds[f"valid_{model}.json"] = read(path)
    base = json.loads(read(os.path.join(TESTDATA, "moe-tiny", "qwen3_moe",
                                        "config.json")))

    def variant(**changes):
        c = dict(base)
        for k, v in changes.items():
            if v is None:
                c.pop(k, None)
            else:
                c[k] = v
        return json.dumps(c, indent=1)

    seeds["invalid_not_json.json"] = '{"architectures": ['
    seeds["invalid_array.json"] = "[1, 2]"
    seeds["invalid_no_architectures.json"] = variant(architectures=None)
    seeds["invalid_unknown_architecture.json"] = variant(
        architectures=["LlamaForCausalLM"])
    seeds["invalid_negative_layers.json"] = variant(num_hidden_layers=-2)
    seeds["invalid_huge_hidden.json"] = variant(hidden_size=2**62)
    seeds["invalid_kv_heads.json"] = variant(num_key_value_heads=3)
    seeds["invalid_topk.json"] = variant(num_experts_per_tok=9)
    seeds["invalid_rope_scaling.json"] = variant(
        rope_scaling={"rope_type": "yarn", "factor": -1})
    seeds["invalid_quantization.json"] = variant(
        quantization_config={"quant_method": "gptq"})
    seeds["invalid_eps_string.json"] = variant(rms_norm_eps="1e-6")
    seeds["valid_yarn.json"] = variant(
        rope_scaling={"rope_type": "yarn", "factor": 4.0,
                      "original_max_position_embeddings": 128})
    return seeds


# --- tokenizer.json ----------------------------------------------------------

def shrink_tokenizer(path, keep, added_keep):
    """The real tokenizer's pipeline with its first `keep` ids and the merges
    among them; added tokens whose content is in `added_keep` (or all below
    `keep`) renumbered after the vocabulary."""
    t = json.loads(read(path))
    model = t["model"]
    vocab = {tok: i for tok, i in model["vocab"].items() if i < keep}
    merges = []
    for m in model["merges"]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    model["vocab"] = vocab
    model["merges"] = merges
    added = []
    next_id = keep
    for tok in t["added_tokens"]:
        if tok["id"] < keep:
            added.append(tok)
        elif tok["content"] in added_keep:
            tok = dict(tok, id=next_id)
            next_id += 1
            added.append(tok)
    t["added_tokens"] = added
    return dumps(t)


def small_config(path, keys):
    c = json.loads(read(path))
    out = {}
    for k in keys:
        if k in c:
            v = c[k]
            out[k] = v["content"] if isinstance(v, dict) else v
    return dumps(out)


def tokenizer_seeds():
    seeds = {}
    minimal = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2,
                                                  "<unk>": 3},
                         "merges": ["a b"], "unk_token": "<unk>"}}
    seeds["valid_minimal.json"] = dumps(minimal)
    seeds["valid_minimal_config.json"] = dumps(minimal) + "\0" + dumps(
        {"bos_token": "<unk>", "add_bos_token": True})
    byte_fallback = {
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "},
             "content": "\u2581"}]},
        "pre_tokenizer": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"},
             "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "added_tokens": [{"id": 0, "content": "<unk>", "special": True,
                          "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False}],
        "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": True,
                  "fuse_unk": True,
                  "vocab": dict([("<unk>", 0)] +
                                [(f"<0x{i:02X}>", i + 1) for i in range(256)] +
                                [("\u2581", 257), ("h", 258), ("i", 259),
                                 ("hi", 260), ("\u2581hi", 261)]),
                  "merges": ["h i", "\u2581 hi"]}}
    seeds["valid_byte_fallback.json"] = dumps(byte_fallback)
    with_added = json.loads(dumps(minimal))
    with_added["added_tokens"] = [
        {"id": 4, "content": "<|im_start|>", "special": True},
        {"id": 5, "content": " x ", "special": False, "lstrip": False,
         "rstrip": False, "single_word": False}]
    seeds["valid_added_tokens.json"] = dumps(with_added)
    split = json.loads(dumps(minimal))
    split["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}]}
    seeds["split_byte_level.json"] = dumps(split)
    seeds["invalid_not_json.json"] = '{"model": '
    seeds["invalid_unigram.json"] = dumps({"model": {"type": "Unigram",
                                                     "vocab": []}})
    bad_merge = json.loads(dumps(minimal))
    bad_merge["model"]["merges"].append(["b", "c"])
    seeds["invalid_merge_outside_vocab.json"] = dumps(bad_merge)
    bad_regex = json.loads(dumps(split))
    bad_regex["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {
        "Regex": "(unclosed"}
    seeds["invalid_regex.json"] = dumps(bad_regex)
    bad_type = json.loads(dumps(with_added))
    bad_type["added_tokens"][0]["content"] = 7
    seeds["invalid_added_token_type.json"] = dumps(bad_type)
    lstrip = json.loads(dumps(with_added))
    lstrip["added_tokens"][1]["lstrip"] = True
    seeds["invalid_added_token_lstrip.json"] = dumps(lstrip)
    seeds["invalid_config_token.json"] = dumps(minimal) + "\0" + dumps(
        {"bos_token": "<s>"})

    # Real pipelines (normalizers, regexes, post-processors, decoders) on a
    # few hundred tokens, with their tokenizer_config.json.
    config_keys = ["bos_token", "eos_token", "add_bos_token", "add_eos_token",
                   "tokenizer_class"]
    for name, keep, added in [
            ("qwen3", 600, {"<|im_start|>", "<|im_end|>", "<|endoftext|>"}),
            ("mistral", 700, set()),
            ("deepseek_v3", 600, {"<｜begin▁of▁sentence｜>",
                                  "<｜end▁of▁sentence｜>"})]:
        directory = os.path.join(TOKENIZERS, name)
        tokenizer = shrink_tokenizer(os.path.join(directory, "tokenizer.json"),
                                     keep, added)
        config = small_config(os.path.join(directory, "tokenizer_config.json"),
                              config_keys)
        seeds[f"valid_{name}_small.json"] = tokenizer + "\0" + config
    return seeds


# --- chat templates ----------------------------------------------------------

def chat_template_seeds():
    seeds = {}
    sources = {}
    specials = {}
    for name in ["qwen3", "deepseek_v3", "mistral", "gpt_oss"]:
        directory = os.path.join(TOKENIZERS, name)
        config = json.loads(read(os.path.join(directory,
                                              "tokenizer_config.json")))
        tokens = {}
        for k in ["bos_token", "eos_token", "unk_token", "pad_token"]:
            v = config.get(k)
            if isinstance(v, dict):
                v = v.get("content")
            if isinstance(v, str):
                tokens[k] = v
        specials[name] = tokens
        if isinstance(config.get("chat_template"), str):
            sources[(name, "tokenizer_config.json")] = config["chat_template"]
        for path in glob.glob(os.path.join(directory, "*.jinja")):
            sources[(name, os.path.basename(path))] = read(path).decode()
    for (name, template), source in sorted(sources.items()):
        cases = [json.loads(line) for line in open(
            os.path.join(TOKENIZERS, name, "chat_templates.jsonl"))]
        cases = [c for c in cases if c["template"] == template]
        # The first case, one with tools, one with template_kwargs, one the
        # template refuses: different paths through the template.
        picked = {}
        for c in cases:
            kind = ("error" if "error" in c else
                    "tools" if c.get("tools") else
                    "kwargs" if c.get("template_kwargs") else "plain")
            picked.setdefault(kind, c)
        stem = template.replace(".jinja", "").replace("tokenizer_config.json",
                                                      "config")
        for kind, c in sorted(picked.items()):
            conversation = {"messages": c["messages"],
                            "add_generation_prompt": c["add_generation_prompt"],
                            "special_tokens": specials[name]}
            for k in ["tools", "template_kwargs"]:
                if c.get(k) is not None:
                    conversation[k] = c[k]
            seeds[f"{name}_{stem}_{kind}"] = (source + "\0" +
                                              dumps(conversation))
    conversation = dumps({"messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"}],
        "add_generation_prompt": True})
    handmade = {
        "valid_loop": "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}"
                      "{% if not loop.last %}\n{% endif %}{% endfor %}"
                      "{% if add_generation_prompt %}<|assistant|>{% endif %}",
        "valid_macro": "{% macro say(m) %}{{ m['role'] | upper }}: "
                       "{{ m['content'] | trim }}{% endmacro %}"
                       "{{ bos_token }}{% for m in messages %}{{ say(m) }}"
                       "{% endfor %}",
        "valid_namespace": "{% set ns = namespace(n=0) %}{% for m in messages "
                           "%}{% set ns.n = ns.n + m.content | length %}"
                           "{% endfor %}{{ ns.n }} {{ messages | tojson }}"
                           " {{ strftime_now('%Y-%m-%d') }}",
        "valid_filters": "{{ messages[0].content | replace('B', 'b') | "
                         "title }}{{ messages | map(attribute='role') | "
                         "join(',') }}{{ range(3) | list }}{{ 'x' * 3 }}"
                         "{{ messages[-1].content[1:] }}{{ 7 // 2 }}",
        "invalid_unclosed": "{% for m in messages %}{{ m.content }}",
        "invalid_unknown_filter": "{{ messages | frobnicate }}",
        "invalid_raise": "{{ raise_exception('no system messages') }}",
        "invalid_steps": "{% for i in range(100000) %}{{ i }}{% endfor %}",
        "invalid_recursion": "{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}"
                             "{{ r(0) }}",
        "invalid_doubling": "{% set s = namespace(v='xx') %}{% for i in "
                            "range(40) %}{% set s.v = s.v ~ s.v %}{% endfor %}"
                            "{{ s.v }}",
    }
    for name, source in handmade.items():
        seeds[name] = source + "\0" + conversation
    seeds["valid_no_conversation"] = "{{ messages[0].content }}"
    seeds["invalid_conversation_json"] = "x\0{\"messages\": [}"
    return seeds


# --- OpenAI bodies -------------------------------------------------------------

CHAT = b"\x01"  # selector: bit 0 the endpoint, bits 1-2 the chat format
CHAT_THINK = b"\x03"
CHAT_HARMONY = b"\x07"
COMPLETIONS = b"\x00"


def openai_seeds():
    user = {"role": "user", "content": "What is 2+2?"}
    tool = {"type": "function", "function": {
        "name": "get_weather", "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}}, "required": ["city"]}}}
    bodies = {
        "valid_chat_minimal": (CHAT, {"messages": [user]}),
        "valid_chat_full": (CHAT, {
            "model": "fuzz-model", "messages": [
                {"role": "system", "content": "Be brief."}, user,
                {"role": "assistant", "content": "4"},
                {"role": "user", "content": [{"type": "text",
                                              "text": "And 3+3?"}]}],
            "max_completion_tokens": 16, "temperature": 0.7, "top_p": 0.9,
            "top_k": 40, "min_p": 0.05, "seed": 7, "n": 2,
            "stop": ["\n\n", "END"], "presence_penalty": 0.5,
            "frequency_penalty": 0.2, "repetition_penalty": 1.1,
            "logprobs": True, "top_logprobs": 3, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": False,
            "chat_template_kwargs": {"enable_thinking": False}}),
        "valid_chat_tools": (CHAT, {
            "messages": [user, {"role": "assistant", "content": None,
                                "tool_calls": [{"id": "call_1",
                                                "type": "function",
                                                "function": {
                                                    "name": "get_weather",
                                                    "arguments":
                                                    "{\"city\": \"Paris\"}"}}]},
                         {"role": "tool", "tool_call_id": "call_1",
                          "content": "sunny"}],
            "tools": [tool], "tool_choice": "auto"}),
        "valid_chat_reasoning": (CHAT_THINK, {
            "messages": [user, {"role": "assistant", "content": "4",
                                "reasoning_content": "2+2 is 4"}, user]}),
        "valid_chat_harmony": (CHAT_HARMONY, {
            "messages": [user], "reasoning_effort": "low"}),
        "valid_completion": (COMPLETIONS, {"prompt": "Once upon a time",
                                           "max_tokens": 8}),
        "valid_completion_batch": (COMPLETIONS, {
            "model": "fuzz-model", "prompt": ["a", "b"], "n": 3, "echo": True,
            "logprobs": 2, "stop": "\n", "temperature": 0}),
        "valid_completion_ids": (COMPLETIONS, {"prompt": [1, 2, 3]}),
        "valid_completion_id_batch": (COMPLETIONS, {"prompt": [[1, 2], [3]]}),
        "invalid_other_model": (CHAT, {"model": "gpt-4", "messages": [user]}),
        "invalid_no_messages": (CHAT, {"max_tokens": 3}),
        "invalid_n": (CHAT, {"messages": [user], "n": 17}),
        "invalid_temperature": (COMPLETIONS, {"prompt": "x",
                                              "temperature": "hot"}),
        "invalid_suffix": (COMPLETIONS, {"prompt": "x", "suffix": "y"}),
        "invalid_messages_object": (CHAT, {"messages": {"role": "user"}}),
        "invalid_logprobs": (COMPLETIONS, {"prompt": "x", "logprobs": 6}),
    }
    seeds = {name: selector + dumps(body).encode()
             for name, (selector, body) in bodies.items()}
    seeds["invalid_not_json"] = CHAT + b'{"messages": [}'
    seeds["invalid_not_utf8"] = COMPLETIONS + b'{"prompt": "\xff"}'
    seeds["invalid_deep"] = CHAT + b"[" * 200 + b"]" * 200
    return seeds


# --- KServe ModelInferRequests ------------------------------------------------

def kserve_seeds():
    for path in glob.glob(os.path.join(ROOT, "bazel-bin", "clients", "python",
                                       "ringmoe_client", "_pb")):
        sys.path.insert(0, path)
    try:
        import grpc_service_pb2 as pb
    except ImportError:
        sys.exit("grpc_service_pb2 not found: bazel build "
                 "//clients/python:ringmoe_client")

    def request(model="adder", rid="r1"):
        r = pb.ModelInferRequest()
        r.model_name = model
        r.id = rid
        return r

    def text(r, prompt):
        t = r.inputs.add()
        t.name = "text_input"
        t.datatype = "BYTES"
        t.shape.append(1)
        t.contents.bytes_contents.append(prompt.encode())
        return t

    def scalar(r, name, datatype, value, field):
        t = r.inputs.add()
        t.name = name
        t.datatype = datatype
        t.shape.append(1)
        getattr(t.contents, field).append(value)

    def ids(r, rows, datatype="INT64", raw=False):
        t = r.inputs.add()
        t.name = "input_ids"
        t.datatype = datatype
        t.shape.extend([len(rows), len(rows[0])])
        flat = [v for row in rows for v in row]
        if raw:
            fmt = "<%d%s" % (len(flat), "q" if datatype == "INT64" else "i")
            r.raw_input_contents.append(struct.pack(fmt, *flat))
        elif datatype == "INT64":
            t.contents.int64_contents.extend(flat)
        else:
            t.contents.int_contents.extend(flat)

    seeds = {}
    r = request()
    text(r, "37+485=")
    seeds["valid_text"] = r
    r = request(rid="")
    text(r, "12+34=")
    r.parameters["max_tokens"].int64_param = 4
    r.parameters["stop"].string_param = "9"
    r.parameters["temperature"].double_param = 0.5
    r.parameters["stream"].bool_param = True
    r.parameters["triton_enable_empty_final_response"].bool_param = True
    r.parameters["my_client_tag"].string_param = "ignored"
    r.outputs.add().name = "text_output"
    r.outputs.add().name = "output_ids"
    r.outputs.add().name = "finish_reason"
    seeds["valid_text_parameters"] = r
    r = request()
    text(r, "1+1=")
    scalar(r, "temperature", "FP32", 0.5, "fp32_contents")
    scalar(r, "max_tokens", "INT32", 3, "int_contents")
    scalar(r, "top_k", "INT64", 5, "int64_contents")
    scalar(r, "ignore_eos", "BOOL", True, "bool_contents")
    sp = r.inputs.add()
    sp.name = "sampling_parameters"
    sp.datatype = "BYTES"
    sp.shape.append(1)
    sp.contents.bytes_contents.append(
        b'{"top_p": 0.9, "seed": 3, "stop": ["\\n"], "min_p": 0.1}')
    sw = r.inputs.add()
    sw.name = "stop_words"
    sw.datatype = "BYTES"
    sw.shape.append(2)
    sw.contents.bytes_contents.extend([b"0", b"1"])
    seeds["valid_text_tensors"] = r
    r = request()
    t = r.inputs.add()
    t.name = "text_input"
    t.datatype = "BYTES"
    t.shape.append(1)
    r.raw_input_contents.append(struct.pack("<I", 4) + b"2+2=")
    seeds["valid_text_raw"] = r
    r = request()
    ids(r, [[1, 2, 3], [4, 5, 6]])
    r.outputs.add().name = "logits"
    seeds["valid_ids"] = r
    r = request()
    ids(r, [[7, 8]], "INT32", raw=True)
    seeds["valid_ids_raw"] = r
    r = request()
    ids(r, [[1, 2]], "INT64", raw=True)
    r.model_version = "1"
    seeds["valid_ids_raw64"] = r

    r = request(model="other")
    text(r, "1+1=")
    seeds["invalid_model"] = r
    r = request()
    r.model_version = "2"
    text(r, "1+1=")
    seeds["invalid_version"] = r
    r = request()
    text(r, "1+1=")
    ids(r, [[1]])
    seeds["invalid_both_inputs"] = r
    r = request()
    seeds["invalid_no_input"] = r
    r = request()
    ids(r, [[1, 2]])
    r.inputs[0].shape[:] = [2, 2]
    seeds["invalid_ids_count"] = r
    r = request()
    ids(r, [[1, -5]])
    seeds["invalid_ids_negative"] = r
    r = request()
    text(r, "")
    seeds["invalid_text_empty"] = r
    r = request()
    text(r, "1+1=")
    r.parameters["temperature"].string_param = "hot"
    seeds["invalid_parameter_type"] = r
    r = request()
    text(r, "1+1=")
    sp = r.inputs.add()
    sp.name = "sampling_parameters"
    sp.datatype = "BYTES"
    sp.shape.append(1)
    sp.contents.bytes_contents.append(b'{"best_of": 2}')
    seeds["invalid_sampling_json"] = r
    r = request()
    text(r, "1+1=")
    r.outputs.add().name = "logits"
    seeds["invalid_output"] = r
    r = request(rid="x" * 300)
    text(r, "1+1=")
    seeds["invalid_long_id"] = r
    out = {name: r.SerializeToString() for name, r in seeds.items()}
    out["invalid_not_proto"] = b"\xff\xff\xff\xff"
    return out


def main():
    write_corpus("config", config_seeds())
    write_corpus("tokenizer", tokenizer_seeds())
    write_corpus("chat_template", chat_template_seeds())
    write_corpus("openai_request", openai_seeds())
    write_corpus("kserve_request", kserve_seeds())


if __name__ == "__main__":
    main()
