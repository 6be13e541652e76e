"""The ringmoe CLI against reference data: `generate --model` prints the
golden greedy continuation of every moe-tiny case, `logits` writes the golden
logits, `tokenize` gives the reference tokenizers' ids, and the demo model
adds."""
import json
import os
import struct
import subprocess
import sys
import tempfile

RINGMOE = sys.argv[1]
TINY = "tests/testdata/moe-tiny"
TOKENIZERS = "tests/testdata/tokenizers"
ADDER = "tests/testdata/moe-adder"
MODELS = ["mixtral", "mixtral_sharded", "qwen2_moe", "qwen3_moe", "olmoe"]


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    tensors = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        raw = data[base + begin : base + end]
        fmt = {"I32": "i", "F32": "f"}[t["dtype"]]
        tensors[name] = (t["shape"], list(struct.unpack("<%d%s" % (len(raw) // 4, fmt), raw)))
    return tensors


def main():
    failures = 0
    for model in MODELS:
        golden = read_safetensors(os.path.join(TINY, model, "golden.safetensors"))
        for i in range(5):
            ids = golden["case%d.input_ids" % i][1]
            want = golden["case%d.greedy" % i][1]
            out = subprocess.run(
                [RINGMOE, "generate", "--model", os.path.join(TINY, model),
                 "--input_ids", ",".join(map(str, ids)), "--max_tokens", "16",
                 "--ignore_eos", "--json"],
                capture_output=True, text=True, check=True).stdout
            got = json.loads(out)
            if got["ids"] != want or got["finish_reason"] != "length":
                print("FAIL %s case %d: got %s want %s" % (model, i, got, want))
                failures += 1
        # logits for case 3 at every position, through the CLI's file output.
        ids = golden["case3.input_ids"][1]
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "logits.safetensors")
            subprocess.run([RINGMOE, "logits", "--model", os.path.join(TINY, model),
                            "--input_ids", ",".join(map(str, ids)), "--out", out], check=True)
            shape, got = read_safetensors(out)["logits"]
        want_shape, want = golden["case3.logits"]
        if shape != want_shape:
            print("FAIL %s logits shape %s want %s" % (model, shape, want_shape))
            failures += 1
            continue
        vocab = shape[1]
        for t in range(shape[0]):
            a = got[t * vocab : (t + 1) * vocab]
            b = want[t * vocab : (t + 1) * vocab]
            err = sum((x - y) ** 2 for x, y in zip(a, b)) ** 0.5
            norm = sum(y * y for y in b) ** 0.5
            if err / norm > 1e-4:
                print("FAIL %s logits position %d relative error %g" % (model, t, err / norm))
                failures += 1
    # `ringmoe tokenize --jsonl`: one {"ids": [...]} line per input line, with
    # and without the tokenizer's default special tokens.
    for name in ["mistral", "qwen3", "deepseek_v3"]:
        cases = os.path.join(TOKENIZERS, name, "cases.jsonl")
        with open(cases) as f:
            # Unicode 16 letters depend on the regex engine's tables (the
            # tokenizer's own test reports them separately).
            lines = [json.loads(line) for line in f if line.strip()]
            lines = [c for c in lines if c["category"] != "unicode_version_sensitive"]
        for flag, field in [("--add_special_tokens=true", "ids_with_special"),
                            ("--add_special_tokens=false", "ids")]:
            subset = os.path.join(os.environ["TEST_TMPDIR"], name + ".jsonl")
            with open(subset, "w") as f:
                f.writelines(json.dumps({"text": c["text"]}) + "\n" for c in lines)
            out = subprocess.run(
                [RINGMOE, "tokenize", "--tokenizer",
                 os.path.join(TOKENIZERS, name, "tokenizer.json"), "--jsonl", subset, flag],
                capture_output=True, text=True, check=True).stdout.splitlines()
            got = [json.loads(line)["ids"] for line in out]
            want = [c[field] for c in lines]
            bad = sum(1 for g, w in zip(got, want) if g != w) + abs(len(got) - len(want))
            if bad:
                print("FAIL tokenize %s %s: %d of %d lines differ" % (name, flag, bad, len(want)))
                failures += 1
    # `ringmoe tokenize --decode`: the decode goldens, special tokens kept
    # and skipped; an id that is not an integer is refused by line.
    for name in ["mistral", "qwen3", "deepseek_v3"]:
        with open(os.path.join(TOKENIZERS, name, "decode.jsonl")) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        subset = os.path.join(os.environ["TEST_TMPDIR"], name + "_ids.jsonl")
        with open(subset, "w") as f:
            f.writelines(json.dumps({"ids": c["ids"]}) + "\n" for c in lines)
        for flag, field in [("--skip_special_tokens=false", "decoded"),
                            ("--skip_special_tokens=true", "decoded_skip_special")]:
            out = subprocess.run(
                [RINGMOE, "tokenize", "--tokenizer",
                 os.path.join(TOKENIZERS, name, "tokenizer.json"), "--decode", "--jsonl",
                 subset, flag], capture_output=True, text=True, check=True).stdout
            got = [json.loads(line)["text"] for line in out.split("\n") if line]
            want = [c[field] for c in lines]
            bad = sum(1 for g, w in zip(got, want) if g != w) + abs(len(got) - len(want))
            if bad:
                print("FAIL tokenize --decode %s %s: %d of %d lines differ"
                      % (name, flag, bad, len(want)))
                failures += 1
    with open(os.path.join(os.environ["TEST_TMPDIR"], "bad_ids.jsonl"), "w") as f:
        f.write('{"ids": [1, 2]}\n{"ids": [1, "two"]}\n')
    bad = subprocess.run([RINGMOE, "tokenize", "--model", ADDER, "--decode", "--jsonl",
                          os.path.join(os.environ["TEST_TMPDIR"], "bad_ids.jsonl")],
                         capture_output=True, text=True)
    if bad.returncode == 0 or "bad_ids.jsonl:2" not in bad.stderr:
        print("FAIL tokenize --decode of a string id: rc=%d stderr=%s"
              % (bad.returncode, bad.stderr))
        failures += 1
    out = subprocess.run([RINGMOE, "tokenize", "--model", ADDER, "--decode", "--ids",
                          "1,28705,28770,28787,28806", "--skip_special_tokens"],
                         capture_output=True, text=True, check=True).stdout
    if json.loads(out) != {"text": "37+"}:
        print("FAIL tokenize --decode --ids: %s" % out)
        failures += 1
    out = subprocess.run([RINGMOE, "tokenize", "--model", ADDER, "--text", "37+485="],
                         capture_output=True, text=True, check=True).stdout
    if json.loads(out)["ids"] != [1, 28705, 28770, 28787, 28806, 28781, 28783, 28782, 28746]:
        print("FAIL tokenize --model: %s" % out)
        failures += 1
    # Text to text on the demo model.
    out = subprocess.run([RINGMOE, "generate", "--model", ADDER, "--prompt", "37+485=",
                          "--max_tokens", "6", "--json"],
                         capture_output=True, text=True, check=True).stdout
    if json.loads(out) != {"ids": [28782, 28750, 28750, 2], "text": "522",
                           "finish_reason": "stop"}:
        print("FAIL generate --prompt: %s" % out)
        failures += 1
    # Bad input: a clear error and a non-zero exit, no crash.
    bad = subprocess.run([RINGMOE, "generate", "--model", os.path.join(TINY, "mixtral"),
                          "--input_ids", "1,2,99999", "--max_tokens", "2"],
                         capture_output=True, text=True)
    if bad.returncode == 0 or "outside the vocabulary" not in bad.stderr:
        print("FAIL out-of-range id: rc=%d stderr=%s" % (bad.returncode, bad.stderr))
        failures += 1
    # Devices: a malformed name, and cuda:N where it cannot run (here: no GPU
    # or no CUDA in the build; with a GPU, an index past the last device).
    for device, expected in [("gpu", "expected cpu, cuda:N or standin"),
                             ("cuda:-1", "expected cpu, cuda:N or standin"),
                             ("cuda:99", "cuda:99")]:
        bad = subprocess.run([RINGMOE, "generate", "--model", ADDER, "--device", device,
                              "--prompt", "1+1=", "--max_tokens", "2"],
                             capture_output=True, text=True)
        if bad.returncode == 0 or expected not in bad.stderr or "Aborted" in bad.stderr:
            print("FAIL --device=%s: rc=%d stderr=%s" % (device, bad.returncode, bad.stderr))
            failures += 1
    # Hybrid experts on the stand-in device under a budget that holds a
    # fraction of the experts: the same answer on every placement, and the
    # counters say where experts ran.
    for placement in ["auto", "cpu", "stream"]:
        run = subprocess.run([RINGMOE, "generate", "--model", ADDER, "--device", "standin",
                              "--device_memory_budget", "16900000", "--placement", placement,
                              "--prompt", "37+485=", "--max_tokens", "8", "--json", "--stats"],
                             capture_output=True, text=True)
        stats = {}
        for line in run.stderr.splitlines():
            if line.startswith("{"):
                stats = json.loads(line)
        ok = run.returncode == 0 and json.loads(run.stdout or "{}").get("text") == "522"
        runs = (stats.get("expert_runs_cpu", 0), stats.get("expert_runs_streamed", 0))
        if placement == "cpu":
            ok = ok and runs[0] > 0 and runs[1] == 0
        elif placement == "stream":
            ok = ok and runs[0] == 0 and runs[1] > 0
        else:
            ok = ok and sum(runs) > 0
        if not ok:
            print("FAIL --placement=%s: rc=%d stdout=%s stderr=%s" %
                  (placement, run.returncode, run.stdout, run.stderr))
            failures += 1
    for args, expected in [(["--placement", "everywhere"], "expected auto, cpu, stream or gpu"),
                           (["--device", "standin", "--placement", "cpu"],
                            "needs --device_memory_budget"),
                           (["--device", "standin", "--device_memory_budget", "16900000",
                             "--placement", "gpu"], "--placement gpu"),
                           (["--device", "standin", "--device_memory_budget", "1MiB"],
                            "smallest budget")]:
        bad = subprocess.run([RINGMOE, "generate", "--model", ADDER, "--prompt", "1+1=",
                              "--max_tokens", "2"] + args, capture_output=True, text=True)
        if bad.returncode == 0 or expected not in bad.stderr or "Aborted" in bad.stderr:
            print("FAIL %s: rc=%d stderr=%s" % (args, bad.returncode, bad.stderr))
            failures += 1
    print("%d failures" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
