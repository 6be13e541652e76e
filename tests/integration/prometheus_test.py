"""A real Prometheus (Debian's /usr/bin/prometheus, on loopback) scrapes the
server's /metrics; a query through its HTTP API returns the request counter
that this test's requests raised."""
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
                query = urllib.parse.urlencode(
                    {"query": 'sum(ringmoe_requests_total{method="Generate",status="OK"})'})
                url = "http://127.0.0.1:%d/api/v1/query?%s" % (port, query)
                value, deadline = None, time.monotonic() + 90
                while time.monotonic() < deadline:
                    try:
                        with urllib.request.urlopen(url, timeout=5) as r:
                            body = json.load(r)
                        result = body["data"]["result"]
                        if result:
                            value = float(result[0]["value"][1])
                            if value == 7:
                                break
                    except OSError:
                        pass  # not listening yet
                    time.sleep(0.5)
                self.assertEqual(value, 7)
            finally:
                prom.terminate()
                prom.wait(timeout=30)
                log.close()
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    unittest.main()
