"""deploy/entrypoint.sh runs the real ringmoe_server exactly as the container
does (the image's layout: RINGMOE_HOME/bin with both binaries, settings from
RINGMOE_* variables), on loopback with free ports; deploy/healthcheck.sh, the
image's HEALTHCHECK, reports it healthy; one generation goes through; the
metrics the Grafana dashboard queries are exported; SIGTERM ends it with
status 0. Also: deploy/bundle_libs.sh, which fills the image's lib/."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.request

MODEL = os.path.abspath("tests/testdata/moe-adder")
# The memory ring's metrics (the dashboard's ring panels) register only once
# that layer exports them; until then the dashboard may name them unseen.
RING_METRICS = {
    "ringmoe_ring_bytes_moved_total", "ringmoe_ring_stall_seconds_total",
    "ringmoe_ring_prefetch_hits_total", "ringmoe_ring_prefetch_misses_total",
    "ringmoe_expert_cache_hits_total", "ringmoe_expert_cache_misses_total",
    "ringmoe_expert_cache_evictions_total", "ringmoe_ring_resident_bytes",
}


def free_ports(count):
    # The entrypoint takes fixed ports (as in the container), so pick free
    # ones; the window before the server binds them is tiny on loopback. All
    # sockets stay bound until every port is picked: one closed before the
    # next bind can be handed out twice.
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class EntrypointTest(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        # The image's layout: /opt/ringmoe/bin/{ringmoe_server,ringmoe}.
        self.home = os.path.join(self.work, "ringmoe")
        os.makedirs(os.path.join(self.home, "bin"))
        for name, var in [("ringmoe_server", "RINGMOE_SERVER"), ("ringmoe", "RINGMOE_CLI")]:
            os.symlink(os.path.abspath(os.environ[var]), os.path.join(self.home, "bin", name))
        self.cli = os.path.join(self.home, "bin", "ringmoe")
        self.grpc_port, self.metrics_port, self.http_port = free_ports(3)
        self.env = dict(os.environ, RINGMOE_HOME=self.home,
                        RINGMOE_GRPC_PORT=str(self.grpc_port),
                        RINGMOE_METRICS_PORT=str(self.metrics_port),
                        RINGMOE_HTTP_PORT=str(self.http_port))

    def healthcheck(self, **env):
        return subprocess.run(["deploy/healthcheck.sh"], env=dict(self.env, **env),
                              capture_output=True, text=True, timeout=30)

    def test_serves_reports_healthy_generates_and_stops_on_sigterm(self):
        log_path = os.path.join(self.work, "server.log")
        env = dict(self.env, RINGMOE_MODEL=MODEL, RINGMOE_MODEL_NAME="adder",
                   RINGMOE_DEVICE="cpu", RINGMOE_THREADS="2",
                   # Loopback only in tests; the container default is 0.0.0.0.
                   RINGMOE_HOST="127.0.0.1",
                   RINGMOE_EXTRA_ARGS="--max_queue 8  --max_running_sequences 4")
        with open(log_path, "w") as log:
            proc = subprocess.Popen(["deploy/entrypoint.sh"], env=env, stdout=log,
                                    stderr=subprocess.STDOUT)
        try:
            deadline, health = time.monotonic() + 60, None
            while time.monotonic() < deadline:
                self.assertIsNone(proc.poll(), open(log_path).read())
                health = self.healthcheck(RINGMOE_HEALTH_TIMEOUT_S="2")
                if health.returncode == 0:
                    break
                time.sleep(0.2)
            self.assertEqual(health.returncode, 0, health.stderr)
            self.assertEqual(health.stdout.strip(), "SERVING")

            # Per-service checks, as an operator might configure them.
            ok = self.healthcheck(RINGMOE_HEALTH_SERVICE="ringmoe.v1.Generation")
            self.assertEqual((ok.returncode, ok.stdout.strip()), (0, "SERVING"))
            unknown = self.healthcheck(RINGMOE_HEALTH_SERVICE="no.such.Service")
            self.assertEqual(unknown.returncode, 1)
            self.assertIn("NOT_FOUND", unknown.stderr)

            out = subprocess.run(
                [self.cli, "generate", "--server", "127.0.0.1:%d" % self.grpc_port,
                 "--prompt", "37+485=", "--max_tokens", "8", "--json"],
                capture_output=True, text=True, timeout=60, check=True).stdout
            result = json.loads(out)
            self.assertEqual(result["text"].strip(), "522")

            url = "http://127.0.0.1:%d/metrics" % self.metrics_port
            with urllib.request.urlopen(url, timeout=10) as r:
                metrics = r.read().decode()
            self.assertRegex(metrics, r'ringmoe_requests_total\{[^}]*status="OK"')
            self.check_dashboard_metrics(metrics)

            proc.send_signal(signal.SIGTERM)
            self.assertEqual(proc.wait(timeout=60), 0)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        log = open(log_path).read()
        # The environment became the flags the contract names.
        for flag in ["--host 127.0.0.1", "--grpc_port %d" % self.grpc_port,
                     "--metrics_port %d" % self.metrics_port,
                     "--http_port %d" % self.http_port, "--model_name=adder",
                     "--device=cpu", "--threads=2", "--max_queue 8 --max_running_sequences 4"]:
            self.assertIn(flag, log)
        self.assertIn("serving 'adder'", log)

    def test_two_ranks_serve_on_rank_0_and_sigterm_drains_through_rank_0(self):
        """RINGMOE_RANKS=2: the entrypoint runs mpirun with itself as both
        ranks (no hostfile: one machine, loopback); rank 0 serves; SIGTERM to
        the entrypoint reaches rank 0, which drains and stops rank 1, and
        everything exits 0."""
        log_path = os.path.join(self.work, "ep.log")
        # Open MPI's session directory holds Unix sockets (108-byte paths):
        # Bazel's TEST_TMPDIR is too deep for them.
        session = tempfile.mkdtemp(prefix="ringmoe_ep.", dir="/tmp")
        env = dict(self.env, RINGMOE_MODEL=MODEL, RINGMOE_MODEL_NAME="adder",
                   RINGMOE_DEVICE="cpu", RINGMOE_THREADS="1", RINGMOE_RANKS="2",
                   RINGMOE_HOST="127.0.0.1", RINGMOE_SHUTDOWN_GRACE_PERIOD_S="10",
                   TMPDIR=session)
        # Bazel's result files belong to this test, not to the ranks.
        for name in ("XML_OUTPUT_FILE", "TEST_PREMATURE_EXIT_FILE"):
            env.pop(name, None)
        with open(log_path, "w") as log:
            proc = subprocess.Popen(["deploy/entrypoint.sh"], env=env, stdout=log,
                                    stderr=subprocess.STDOUT)
        try:
            deadline, health = time.monotonic() + 120, None
            while time.monotonic() < deadline:
                self.assertIsNone(proc.poll(), open(log_path).read())
                health = self.healthcheck(RINGMOE_HEALTH_TIMEOUT_S="2")
                if health.returncode == 0:
                    break
                time.sleep(0.5)
            self.assertEqual(health.returncode, 0, open(log_path).read())
            out = subprocess.run(
                [self.cli, "generate", "--server", "127.0.0.1:%d" % self.grpc_port,
                 "--prompt", "37+485=", "--max_tokens", "8", "--json"],
                capture_output=True, text=True, timeout=60, check=True).stdout
            self.assertEqual(json.loads(out)["text"].strip(), "522")
            url = "http://127.0.0.1:%d/metrics" % self.metrics_port
            with urllib.request.urlopen(url, timeout=10) as r:
                self.assertIn("ringmoe_generated_tokens_total", r.read().decode())
            proc.send_signal(signal.SIGTERM)
            self.assertEqual(proc.wait(timeout=60), 0, open(log_path).read())
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        log = open(log_path).read()
        self.assertIn("mpirun -np 2 --bind-to none", log)
        self.assertIn("--expert_parallel", log)
        self.assertIn("SIGTERM to rank 0", log)
        self.assertIn("draining", log)
        self.assertIn("mpirun exited with status 0", log)
        # The entrypoint removes rank 0's pid file once mpirun has exited.
        self.assertFalse([n for n in os.listdir(session) if n.startswith("ringmoe-rank0")])
        shutil.rmtree(session, ignore_errors=True)

    def test_bad_rank_count_is_a_clear_error(self):
        r = subprocess.run(["deploy/entrypoint.sh"],
                           env=dict(self.env, RINGMOE_MODEL=MODEL, RINGMOE_RANKS="two"),
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("RINGMOE_RANKS=two", r.stderr)

    def check_dashboard_metrics(self, metrics_text):
        """Every metric the dashboard queries is one the server exports (or
        a memory-ring metric still to come)."""
        exported = set()
        for line in metrics_text.splitlines():
            m = re.match(r"# TYPE (\S+) (\S+)", line)
            if m:
                exported.add(m.group(1))
                if m.group(2) == "histogram":
                    exported.update(m.group(1) + s for s in ("_bucket", "_sum", "_count"))
        with open("deploy/grafana/dashboards/ringmoe.json") as f:
            dashboard = json.load(f)
        queried = set()
        for panel in dashboard["panels"]:
            for target in panel.get("targets", []):
                queried.update(re.findall(r"\bringmoe_[a-z0-9_]+", target["expr"]))
        variables = json.dumps(dashboard["templating"])
        queried.update(re.findall(r"\bringmoe_[a-z0-9_]+", variables))
        self.assertIn("ringmoe_time_to_first_token_seconds_bucket", queried)
        unknown = sorted(queried - exported - RING_METRICS)
        self.assertEqual(unknown, [], "dashboard queries metrics the server does not export")

    def test_health_check_fails_without_a_server(self):
        start = time.monotonic()
        r = self.healthcheck(RINGMOE_HEALTH_TIMEOUT_S="1")
        self.assertEqual(r.returncode, 1)
        self.assertLess(time.monotonic() - start, 20)

    def test_bundle_libs_takes_debian_libraries_and_leaves_out_the_base_images(self):
        out = os.path.join(self.work, "lib")
        subprocess.run(["deploy/bundle_libs.sh", out, os.environ["RINGMOE_SERVER"],
                        os.environ["RINGMOE_CLI"]], check=True, timeout=60,
                       capture_output=True)
        names = set(os.listdir(out))
        for want in ["libgrpc++.so.", "libprotobuf.so.", "libabsl_status.so.",
                     "libprometheus-cpp-pull.so."]:
            self.assertTrue(any(n.startswith(want) for n in names), want)
        for unwanted in ["libc.so.", "libm.so.", "libstdc++.so.", "libgcc_s.so.",
                         "ld-linux", "libcudart.so.", "libcublas",
                         # The runtime stage's own Open MPI package: mpirun,
                         # libmpi and its plugins from one build.
                         "libmpi.so.", "libopen-pal.so.", "libopen-rte.so.", "libhwloc.so."]:
            self.assertFalse(any(n.startswith(unwanted) for n in names), unwanted)
        # Every bundled file is a real library file, not a link into the
        # build machine's /usr/lib.
        for n in names:
            self.assertFalse(os.path.islink(os.path.join(out, n)), n)

    def test_missing_checkpoint_is_a_clear_error(self):
        r = subprocess.run(["deploy/entrypoint.sh"],
                           env=dict(self.env, RINGMOE_MODEL=os.path.join(self.work, "none")),
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("no checkpoint at RINGMOE_MODEL", r.stderr)


if __name__ == "__main__":
    unittest.main()
