"""Checks a running ringmoe container from outside, as its users would:
tools/test_container.sh starts the image with the demo model (moe-adder)
and runs this with the host's Python client (ringmoe_client) and the host's
Prometheus. In order:

  * grpc.health.v1 answers SERVING (what Kubernetes' native gRPC probes ask);
  * a streamed generation of "37+485=" yields "522" in more than one chunk;
  * KServe v2: live, ready, model ready, ModelInfer with text gives "522";
  * a real Prometheus scrapes /metrics and its query API returns the
    request counter these requests raised;
  * the model's weights and the server's resident memory fit the
    Deployment's memory request;
  * `podman stop --time GRACE` (SIGTERM) while streams run: every accepted
    stream runs to its end, and the container is gone before the grace
    period would have ended in SIGKILL (tools/test_container.sh then checks
    the exit status and the server's "draining N requests").

Usage: container_check.py CONTAINER GRPC_PORT METRICS_PORT SERVER_PID GRACE_S
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

import yaml

from ringmoe_client import Client, FINISH_REASONS

PROMETHEUS = "/usr/bin/prometheus"
DEPLOYMENT = "deploy/k8s/deployment.yaml"
PROMPT, ANSWER = "37+485=", "522"


def log(message):
    print("container_check: " + message, flush=True)


def fail(message):
    raise SystemExit("container_check: FAILED: " + message)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_serving(client, timeout_s):
    deadline, status = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        try:
            status = client.health(timeout=2)
            if status == "SERVING":
                return
        except Exception as e:  # not listening yet: any RpcError
            status = repr(e)
        time.sleep(0.5)
    fail("health is %s after %d s" % (status, timeout_s))


def check_stream(client):
    chunks = list(client.generate(text=PROMPT, max_tokens=8, temperature=0))
    text = "".join(c.text for c in chunks).strip()
    reason = FINISH_REASONS[chunks[-1].finish_reason]
    if text != ANSWER or len(chunks) < 2:
        fail("stream of %r gave %r in %d chunks" % (PROMPT, text, len(chunks)))
    log("streamed %r -> %r in %d chunks (%s)" % (PROMPT, text, len(chunks), reason))


def check_kserve(client, model):
    if not (client.server_live() and client.server_ready() and client.model_ready(model)):
        fail("KServe live/ready/model ready is not all true")
    text = client.infer_text(model, PROMPT, max_tokens=8, temperature=0.0).strip()
    if text != ANSWER:
        fail("KServe ModelInfer of %r gave %r" % (PROMPT, text))
    log("KServe ModelInfer %r on model %r -> %r" % (PROMPT, model, text))


def check_prometheus(metrics_port, expected):
    """Debian's Prometheus scrapes the container's metrics port; its query
    API must see the Generate requests made so far."""
    work = tempfile.mkdtemp(prefix="ringmoe-prometheus-")
    config = os.path.join(work, "prometheus.yml")
    with open(config, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n"
                "scrape_configs:\n  - job_name: ringmoe\n"
                "    static_configs:\n      - targets: ['127.0.0.1:%d']\n" % metrics_port)
    port = free_port()
    with open(os.path.join(work, "prometheus.log"), "w") as out:
        prom = subprocess.Popen(
            [PROMETHEUS, "--config.file=" + config,
             "--storage.tsdb.path=" + os.path.join(work, "data"),
             "--web.listen-address=127.0.0.1:%d" % port],
            stdout=out, stderr=subprocess.STDOUT)
    query = urllib.parse.urlencode({"query": 'sum(ringmoe_requests_total'
                                             '{method=~"Generate|ModelInfer",status="OK"})'})
    url = "http://127.0.0.1:%d/api/v1/query?%s" % (port, query)
    value, deadline = None, time.monotonic() + 90
    try:
        while time.monotonic() < deadline and value != expected:
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    result = json.load(r)["data"]["result"]
                if result:
                    value = float(result[0]["value"][1])
            except OSError:
                pass  # Prometheus not listening yet
            time.sleep(0.5)
    finally:
        prom.terminate()
        prom.wait(timeout=30)
    if value != expected:
        fail("Prometheus saw %s requests, expected %s (log in %s)"
             % (value, expected, work))
    log("Prometheus scraped ringmoe_requests_total: %g Generate and ModelInfer" % value)


def quantity_bytes(q):
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
             "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    for suffix, factor in units.items():
        if q.endswith(suffix):
            return int(float(q[:-len(suffix)]) * factor)
    return int(q)


def check_memory(client, server_pid):
    """The Deployment's memory request covers what the server holds: the
    model's weights as it reports them, and its resident set measured now."""
    with open(DEPLOYMENT) as f:
        deployment = yaml.safe_load(f)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    request = quantity_bytes(container["resources"]["requests"]["memory"])
    limit = quantity_bytes(container["resources"]["limits"]["memory"])
    p = client.model_info().placement
    weights = p.resident_bytes + p.streamed_bytes
    with open("/proc/%d/status" % server_pid) as f:
        rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    log("memory: weights %.1f MiB, server RSS %.1f MiB; Deployment requests %.1f GiB, "
        "limit %.1f GiB" % (weights / 2**20, rss / 2**20, request / 2**30, limit / 2**30))
    if not weights or max(weights, rss) > request or request > limit:
        fail("memory request does not cover the server (weights %d, RSS %d, request %d, "
             "limit %d)" % (weights, rss, request, limit))


def check_drain(client, container, grace_s):
    """SIGTERM with streams running: they all run to their end (LENGTH, every
    token), and the container is gone before podman's SIGKILL deadline."""
    max_tokens = 48  # the adder's context is 64 positions
    streams = [client.generate(text=PROMPT, max_tokens=max_tokens, ignore_eos=True,
                               temperature=0) for _ in range(8)]
    first = [next(s) for s in streams]  # every stream has been accepted
    stop = {}

    def stop_container():
        start = time.monotonic()
        stop["result"] = subprocess.run(
            ["podman", "stop", "--time", str(grace_s), container],
            capture_output=True, text=True, timeout=grace_s + 60)
        stop["seconds"] = time.monotonic() - start

    stopper = threading.Thread(target=stop_container)
    stopper.start()
    for head, s in zip(first, streams):
        chunks = [head] + list(s)
        last = chunks[-1]
        if (FINISH_REASONS[last.finish_reason] != "length"
                or last.usage.completion_tokens != max_tokens):
            fail("a stream ended %s after %d tokens during the drain"
                 % (FINISH_REASONS[last.finish_reason], last.usage.completion_tokens))
    stopper.join()
    result = stop["result"]
    if result.returncode != 0:
        fail("podman stop: %s" % result.stderr)
    if stop["seconds"] >= grace_s:
        fail("podman stop took %.1f s, the grace period is %d s" % (stop["seconds"], grace_s))
    log("SIGTERM: %d streams drained to %d tokens each; stopped in %.1f s (grace %d s)"
        % (len(streams), max_tokens, stop["seconds"], grace_s))


def main():
    container, grpc_port, metrics_port, server_pid, grace_s = sys.argv[1:]
    with Client("127.0.0.1:%s" % grpc_port, timeout=60) as client:
        wait_serving(client, 120)
        log("grpc.health.v1 Check: SERVING")
        model = client.model_info().name
        check_stream(client)
        check_kserve(client, model)
        # Requests so far: the stream (Generate) and KServe's ModelInfer.
        check_prometheus(int(metrics_port), 2.0)
        check_memory(client, int(server_pid))
        check_drain(client, container, int(grace_s))


if __name__ == "__main__":
    main()
