"""`ringmoe generate --model` prints the golden greedy continuation of every
moe-tiny case, and `ringmoe logits` writes the golden logits."""
import json
import os
import struct
import subprocess
import sys
import tempfile

RINGMOE = sys.argv[1]
TINY = "tests/testdata/moe-tiny"
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
    # Bad input: a clear error and a non-zero exit, no crash.
    bad = subprocess.run([RINGMOE, "generate", "--model", os.path.join(TINY, "mixtral"),
                          "--input_ids", "1,2,99999", "--max_tokens", "2"],
                         capture_output=True, text=True)
    if bad.returncode == 0 or "outside the vocabulary" not in bad.stderr:
        print("FAIL out-of-range id: rc=%d stderr=%s" % (bad.returncode, bad.stderr))
        failures += 1
    print("%d failures" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
