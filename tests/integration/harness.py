"""Shared pieces of the integration tests: start the real ringmoe_server on
127.0.0.1 with free ports, read the golden data, scrape metrics.

Binaries come from environment variables that run_python.sh sets from
Bazel's $(rootpath ...) arguments: RINGMOE_SERVER, RINGMOE_CLI, ...
RINGMOE_TEST_RANKS=N (N >= 2; the *_np2 targets) runs each Server under
`mpirun -np N ... --expert_parallel` on loopback.
"""
import json
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import time
import urllib.request

TINY = "tests/testdata/moe-tiny"
ADDER = "tests/testdata/moe-adder"
TINY_MODELS = ["mixtral", "mixtral_sharded", "qwen2_moe", "qwen3_moe", "olmoe"]


NODE_DIR = "tests/integration/node"


def node_modules(package=os.path.join("@grpc", "grpc-js")):
    """The npm packages of NODE_DIR: the checkout's (installed by
    tools/setup.sh) when they hold `package`, else a fresh `npm ci` from the
    committed lock file into the test's temp dir."""
    source = os.path.dirname(os.path.realpath(os.path.join(NODE_DIR, "package.json")))
    if os.path.isdir(os.path.join(source, "node_modules", package)):
        return os.path.join(source, "node_modules")
    work = tmpdir()
    for f in ("package.json", "package-lock.json"):
        shutil.copy(os.path.join(NODE_DIR, f), work)
    subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=work, check=True,
                   timeout=600)
    return os.path.join(work, "node_modules")


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


def ranks_from_env():
    """RINGMOE_TEST_RANKS: N >= 2 runs every Server that names no `np` as
    `mpirun -np N ringmoe_server ... --expert_parallel`; otherwise 1."""
    return max(1, int(os.environ.get("RINGMOE_TEST_RANKS") or 1))


RANKS = ranks_from_env()


def mpirun_env(session):
    """The environment of `mpirun` on loopback (as engine/parallel/mpirun_test.sh):
    Open MPI's Unix sockets under the short directory `session`, TCP on lo
    only, and none of Bazel's test-result files (a rank must not write them)."""
    env = dict(os.environ, TMPDIR=session, OMPI_MCA_plm="isolated",
               OMPI_MCA_pml="ob1", OMPI_MCA_btl="self,vader,tcp",
               OMPI_MCA_btl_tcp_if_include="lo", OMPI_MCA_oob_tcp_if_include="lo",
               OMPI_MCA_orte_base_help_aggregate="0")
    for name in ("XML_OUTPUT_FILE", "TEST_PREMATURE_EXIT_FILE", "TEST_SHARD_STATUS_FILE"):
        env.pop(name, None)
    return env


class Server:
    """ringmoe_server as a child process; a context manager that stops it.

    With np >= 2 (by default RINGMOE_TEST_RANKS) every rank of
    `mpirun -np N --oversubscribe --bind-to none` runs it with
    --expert_parallel: self.proc is then mpirun, rank 0 serves (ports, ready
    file, metrics) and takes the signals (send_signal, stop), and the exit
    status is mpirun's. The log holds every rank's output."""

    def __init__(self, model_dir, *flags, name=None, np=None):
        self.model_dir = model_dir
        self.flags = list(flags)
        self.name = name or os.path.basename(model_dir.rstrip("/"))
        self.np = RANKS if np is None else np
        self.dir = tmpdir()
        self.log_path = os.path.join(self.dir, "server.log")
        self.proc = None
        self.session = None

    def command(self, ready):
        server = [os.path.abspath(os.environ["RINGMOE_SERVER"]), "--model", self.model_dir,
                  "--grpc_port=0", "--metrics_port=0", "--http_port=0",
                  "--ready_file=" + ready]
        if self.np == 1:
            return server + self.flags
        return (["mpirun", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none",
                 "-np", str(self.np)] + server + ["--expert_parallel"] + self.flags)

    def start(self, timeout=60):
        ready = os.path.join(self.dir, "ready.json")
        env = None
        if self.np > 1:
            # Open MPI's Unix sockets live under TMPDIR; their paths are short.
            self.session = tempfile.mkdtemp(prefix="rmep", dir="/tmp")
            env = mpirun_env(self.session)
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.command(ready), stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env)
        try:
            self._wait_ready(ready, timeout)
        except Exception:
            self.abort()
            raise
        return self

    def _wait_ready(self, ready, timeout):
        what = "server" if self.np == 1 else "mpirun"
        deadline = time.monotonic() + timeout
        while not os.path.exists(ready):
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited with %d:\n%s" % (what, self.proc.returncode,
                                                               self.read_log()))
            if time.monotonic() > deadline:
                raise RuntimeError("%s not ready after %ds:\n%s" % (what, timeout,
                                                                    self.read_log()))
            time.sleep(0.05)
        banner = "expert parallel over %d ranks" % self.np
        if self.np > 1 and banner not in self.read_log():
            raise RuntimeError("ready without %r:\n%s" % (banner, self.read_log()))
        with open(ready) as f:
            ports = json.load(f)
        self.grpc_port = ports["grpc_port"]
        self.metrics_port = ports["metrics_port"]
        self.http_port = ports["http_port"]
        self.http = "http://127.0.0.1:%d" % self.http_port
        self.target = "127.0.0.1:%d" % self.grpc_port

    def read_log(self):
        with open(self.log_path) as f:
            return f.read()

    def rank_pid(self, rank):
        """The pid of a rank: the server's own with one process, else the
        child of mpirun with that rank in its environment."""
        if self.np == 1:
            if rank != 0:
                raise RuntimeError("no rank %d in one process" % rank)
            return self.proc.pid
        with open("/proc/%d/task/%d/children" % (self.proc.pid, self.proc.pid)) as f:
            children = [int(p) for p in f.read().split()]
        for pid in children:
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
            if b"OMPI_COMM_WORLD_RANK=%d" % rank in env:
                return pid
        raise RuntimeError("no rank %d among %s" % (rank, children))

    def send_signal(self, sig):
        """Sends `sig` to the serving process (rank 0)."""
        if self.np == 1:
            self.proc.send_signal(sig)
        else:
            os.kill(self.rank_pid(0), sig)

    def close(self):
        """Closes the log and removes Open MPI's session directory."""
        self.log.close()
        if self.session:
            shutil.rmtree(self.session, ignore_errors=True)

    def abort(self):
        """Ends the process unasked (SIGTERM to mpirun, which passes it to
        every rank; SIGKILL after 10 s) and closes."""
        try:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        finally:
            self.close()

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Sends `sig` (to rank 0) and returns the exit status (mpirun's)."""
        try:
            if self.proc.poll() is None:
                self.send_signal(sig)
            return self.proc.wait(timeout=timeout)
        except (subprocess.TimeoutExpired, RuntimeError, OSError):
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            raise
        finally:
            self.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.stop()
        elif self.proc:
            self.close()

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
