"""Shared pieces of the integration tests: start the real ringmoe_server on
127.0.0.1 with free ports, read the golden data, scrape metrics.

Binaries come from environment variables that run_python.sh sets from
Bazel's $(rootpath ...) arguments: RINGMOE_SERVER, RINGMOE_CLI, ...
"""
import json
import os
import signal
import struct
import subprocess
import tempfile
import time
import urllib.request

TINY = "tests/testdata/moe-tiny"
ADDER = "tests/testdata/moe-adder"
TINY_MODELS = ["mixtral", "mixtral_sharded", "qwen2_moe", "qwen3_moe", "olmoe"]


def tmpdir():
    return tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))


def read_safetensors(path):
    """{name: (shape, flat list)} for the I32 and F32 tensors of a file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    tensors = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        raw = data[8 + n + begin:8 + n + end]
        fmt = {"I32": "i", "F32": "f"}[t["dtype"]]
        tensors[name] = (t["shape"], list(struct.unpack("<%d%s" % (len(raw) // 4, fmt), raw)))
    return tensors


def golden_cases(model):
    """[(input_ids, greedy ids, last-position logits)] for the 5 cases."""
    g = read_safetensors(os.path.join(TINY, model, "golden.safetensors"))
    cases = []
    for i in range(5):
        ids = g["case%d.input_ids" % i][1]
        shape, logits = g["case%d.logits" % i]
        vocab = shape[1]
        cases.append((ids, g["case%d.greedy" % i][1], logits[(shape[0] - 1) * vocab:]))
    return cases


class Server:
    """ringmoe_server as a child process; a context manager that stops it."""

    def __init__(self, model_dir, *flags, name=None):
        self.model_dir = model_dir
        self.flags = list(flags)
        self.name = name or os.path.basename(model_dir.rstrip("/"))
        self.dir = tmpdir()
        self.log_path = os.path.join(self.dir, "server.log")
        self.proc = None

    def start(self, timeout=60):
        ready = os.path.join(self.dir, "ready.json")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [os.environ["RINGMOE_SERVER"], "--model", self.model_dir, "--grpc_port=0",
             "--metrics_port=0", "--http_port=0", "--ready_file=" + ready] + self.flags,
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not os.path.exists(ready):
            if self.proc.poll() is not None:
                raise RuntimeError("server exited with %d:\n%s" % (self.proc.returncode,
                                                                   self.read_log()))
            if time.monotonic() > deadline:
                raise RuntimeError("server not ready after %ds:\n%s" % (timeout,
                                                                       self.read_log()))
            time.sleep(0.05)
        with open(ready) as f:
            ports = json.load(f)
        self.grpc_port = ports["grpc_port"]
        self.metrics_port = ports["metrics_port"]
        self.http_port = ports["http_port"]
        self.http = "http://127.0.0.1:%d" % self.http_port
        self.target = "127.0.0.1:%d" % self.grpc_port
        return self

    def read_log(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Sends `sig` and returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            self.log.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.stop()

    def metrics_text(self):
        url = "http://127.0.0.1:%d/metrics" % self.metrics_port
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode()

    def metric(self, name, **labels):
        """Sum of the samples of `name` whose labels include `labels`."""
        total, found = 0.0, False
        for line in self.metrics_text().splitlines():
            if line.startswith("#") or not line.startswith(name):
                continue
            key, value = line.rsplit(" ", 1)
            metric = key.split("{", 1)[0]
            if metric != name:
                continue
            if any('%s="%s"' % kv not in key for kv in labels.items()):
                continue
            total += float(value)
            found = True
        return total if found else None

    def wait_metric(self, name, want, timeout=10, **labels):
        deadline = time.monotonic() + timeout
        while True:
            got = self.metric(name, **labels)
            if got == want or time.monotonic() > deadline:
                return got
            time.sleep(0.05)


def offline_generate(model_dir, ids, max_tokens, *flags):
    """`ringmoe generate --json` on the model directory: {ids, text, finish_reason}."""
    out = subprocess.run(
        [os.environ["RINGMOE_CLI"], "generate", "--model", model_dir, "--input_ids",
         ",".join(map(str, ids)), "--max_tokens", str(max_tokens), "--json"] + list(flags),
        capture_output=True, text=True, check=True).stdout
    return json.loads(out)
