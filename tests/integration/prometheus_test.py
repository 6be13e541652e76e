"""A real Prometheus (Debian's /usr/bin/prometheus, on loopback) scrapes the
server's /metrics; a query through its HTTP API returns the request counter
that this test's requests raised, and against several ranks
(RINGMOE_TEST_RANKS) every rank's expert-parallel series."""
import json
import os
import socket
import subprocess
import time
import unittest
import urllib.parse
import urllib.request

import harness
from ringmoe_client import Client

PROMETHEUS = "/usr/bin/prometheus"


def free_port():
    # Prometheus cannot report a port it picked itself; the window between
    # closing this socket and Prometheus binding it is tiny on loopback.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def query_until(port, query, want, timeout=90):
    """The value of `query` from Prometheus's HTTP API once it is `want`, or
    the last value seen when `timeout` seconds pass."""
    url = "http://127.0.0.1:%d/api/v1/query?%s" % (port, urllib.parse.urlencode(
        {"query": query}))
    value, deadline = None, time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                body = json.load(r)
            result = body["data"]["result"]
            if result:
                value = float(result[0]["value"][1])
                if value == want:
                    break
        except OSError:
            pass  # not listening yet
        time.sleep(0.5)
    return value


class PrometheusTest(unittest.TestCase):
    def test_prometheus_scrapes_the_request_counter(self):
        with harness.Server(os.path.join(harness.TINY, "olmoe")) as server, \
                Client(server.target, timeout=60) as c:
            for i in range(7):
                c.generate_text(input_ids=[1, 2, 3 + i], max_tokens=4, ignore_eos=True)
            work = harness.tmpdir()
            config = os.path.join(work, "prometheus.yml")
            with open(config, "w") as f:
                f.write("global:\n  scrape_interval: 1s\n"
                        "scrape_configs:\n  - job_name: ringmoe\n"
                        "    static_configs:\n      - targets: ['127.0.0.1:%d']\n"
                        % server.metrics_port)
            port = free_port()
            log = open(os.path.join(work, "prometheus.log"), "w")
            prom = subprocess.Popen(
                [PROMETHEUS, "--config.file=" + config,
                 "--storage.tsdb.path=" + os.path.join(work, "data"),
                 "--web.listen-address=127.0.0.1:%d" % port],
                stdout=log, stderr=subprocess.STDOUT)
            try:
                self.assertEqual(query_until(
                    port, 'sum(ringmoe_requests_total{method="Generate",status="OK"})', 7), 7)
                if server.np > 1:
                    # Every rank's series, labelled by rank, reach it
                    # through rank 0's /metrics.
                    self.assertEqual(query_until(
                        port, "count(ringmoe_expert_parallel_steps_total > 0)", server.np),
                        server.np)
            finally:
                prom.terminate()
                prom.wait(timeout=30)
                log.close()
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    unittest.main()
