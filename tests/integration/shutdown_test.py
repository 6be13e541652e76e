"""SIGTERM and SIGINT against the real server: every way a shutdown can go
(streams that finish in the grace period, a grace period that expires, a
second signal, a client that stops reading, HTTP event streams) ends with
exit status 0, within the grace period and a few seconds, and every client
gets either its whole answer or an error — never a hang."""
import json
import os
import signal
import subprocess
import threading
import time
import unittest

import grpc

import harness
from ringmoe_client import Client

TINY = os.path.join(harness.TINY, "mixtral")


def start_streams(c, count, max_tokens):
    """`count` greedy streams; returns their results as they end:
    ("LENGTH", tokens) for a finished one, (status name, tokens) otherwise."""
    results = [None] * count

    def run(i):
        tokens = 0
        try:
            for r in c.generate(input_ids=[1, 2, 3 + i % 50], max_tokens=max_tokens,
                                ignore_eos=True, temperature=0):
                tokens += len(r.token_ids)
                if r.finish_reason:
                    results[i] = ("LENGTH" if r.finish_reason == 2 else str(r.finish_reason),
                                  tokens)
            if results[i] is None:
                results[i] = ("NO FINAL MESSAGE", tokens)
        except grpc.RpcError as e:
            results[i] = (e.code().name, tokens)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    return threads, results


def wait_log(server, text, timeout=30):
    deadline = time.monotonic() + timeout
    while text not in server.read_log():
        if time.monotonic() > deadline:
            raise AssertionError("%r not in the log:\n%s" % (text, server.read_log()))
        time.sleep(0.02)


def wait_queued(server, count, timeout=60):
    """Waits until at least `count` requests wait in the queue."""
    deadline = time.monotonic() + timeout
    while (server.metric("ringmoe_queue_depth") or 0) < count:
        if time.monotonic() > deadline:
            raise AssertionError("fewer than %d requests queued" % count)
        time.sleep(0.02)


def wait_exit(server, timeout):
    """The exit status and the seconds it took."""
    start = time.monotonic()
    status = server.proc.wait(timeout=timeout)
    return status, time.monotonic() - start


class ShutdownTest(unittest.TestCase):
    def test_grace_period_expiring_cancels_what_is_left(self):
        # One sequence at a time: 64 streams of 400 tokens are 25600 decode
        # steps in a row, more than a second in any build.
        server = harness.Server(TINY, "--shutdown_grace_period_s=1",
                                "--max_running_sequences=1", "--max_queue=128").start()
        with Client(server.target, timeout=120) as c:
            threads, results = start_streams(c, 64, 400)
            wait_queued(server, 16)
            server.send_signal(signal.SIGTERM)
            status, seconds = wait_exit(server, 30)
            for t in threads:
                t.join(30)
                self.assertFalse(t.is_alive(), "a client hangs")
        log = server.read_log()
        server.close()
        self.assertEqual(status, 0, log)
        self.assertLess(seconds, 1 + 5, log)
        self.assertIn("cancelling", log)
        finished = [r for r in results if r[0] == "LENGTH"]
        cut = [r for r in results if r[0] != "LENGTH"]
        self.assertTrue(all(r[1] == 400 for r in finished), finished)
        self.assertGreater(len(cut), 0, results)
        # Cut off by the shutdown: UNAVAILABLE (or CANCELLED while the
        # listener closes), never OK without the final message.
        self.assertTrue(all(r[0] in ("UNAVAILABLE", "CANCELLED") for r in cut), cut)

    def test_second_signal_cuts_the_drain_short(self):
        server = harness.Server(TINY, "--shutdown_grace_period_s=600",
                                "--max_running_sequences=1", "--max_queue=128").start()
        with Client(server.target, timeout=120) as c:
            threads, results = start_streams(c, 64, 400)
            wait_queued(server, 16)
            server.send_signal(signal.SIGTERM)
            wait_log(server, "draining")
            self.assertEqual(c.health(), "NOT_SERVING")
            server.send_signal(signal.SIGINT)
            status, seconds = wait_exit(server, 30)
            for t in threads:
                t.join(30)
                self.assertFalse(t.is_alive(), "a client hangs")
        log = server.read_log()
        server.close()
        self.assertEqual(status, 0, log)
        self.assertLess(seconds, 5, log)
        self.assertIn("cancelling", log)
        self.assertGreater(len([r for r in results if r[0] != "LENGTH"]), 0, results)

    def test_a_client_that_stops_reading_does_not_hold_the_shutdown(self):
        from ringmoe_client._pb import grpc_service_pb2 as kserve_pb2
        from ringmoe_client._pb import grpc_service_pb2_grpc as kserve_grpc
        # The adder's logits for [100, 1] input ids: 12.8 MB per reply, well
        # past what the sockets hold, within the stream's buffer limit.
        server = harness.Server(harness.ADDER, "--shutdown_grace_period_s=2").start()
        t = kserve_pb2.ModelInferRequest.InferInputTensor(
            name="input_ids", datatype="INT32", shape=[100, 1])
        t.contents.int_contents.extend([5] * 100)
        requests = [kserve_pb2.ModelInferRequest(model_name="moe-adder", id="r%d" % i,
                                                 inputs=[t]) for i in range(3)]
        hold = threading.Event()

        def slowly():
            yield from requests
            hold.wait(120)

        channel = grpc.insecure_channel(
            server.target, options=[("grpc.max_receive_message_length", -1)])
        call = kserve_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(
            slowly(), timeout=120)
        # Answered, and replies waiting for the client. (gRPC may stop
        # taking more of this stream's requests while its replies back up.)
        deadline = time.monotonic() + 60
        while not ((server.metric("ringmoe_requests_total", method="ModelStreamInfer.request",
                                  status="OK") or 0) >= 1 and
                   server.metric("ringmoe_stream_buffered_bytes") > 0):
            self.assertLess(time.monotonic(), deadline, "no reply is waiting")
            time.sleep(0.05)
        server.send_signal(signal.SIGTERM)
        status, seconds = wait_exit(server, 30)
        log = server.read_log()
        server.close()
        hold.set()
        with self.assertRaises(grpc.RpcError):
            for _ in call:
                pass
        channel.close()
        self.assertEqual(status, 0, log)
        self.assertLess(seconds, 2 + 5, log)

    def test_idle_connections_and_health_watches_do_not_hold_the_exit(self):
        from ringmoe_client._pb import health_pb2
        # The default grace period: only what is still at work may use it.
        server = harness.Server(TINY).start()
        with Client(server.target, timeout=60) as c:
            # A connection that has been used and stays open, idle.
            self.assertEqual(len(c.generate_text(input_ids=[1, 2], max_tokens=2,
                                                 ignore_eos=True).token_ids), 2)
            watch = c.health_stub.Watch(health_pb2.HealthCheckRequest(service=""),
                                        timeout=60)
            self.assertEqual(next(watch).status, health_pb2.HealthCheckResponse.SERVING)
            server.send_signal(signal.SIGTERM)
            status, seconds = wait_exit(server, 60)
            with self.assertRaises(grpc.RpcError):
                for _ in watch:
                    pass
        log = server.read_log()
        server.close()
        self.assertEqual(status, 0, log)
        # Before: about 5 s (gRPC waited for the client to close its idle
        # connection), up to the grace period for another client.
        self.assertLess(seconds, 2.5, log)

    def test_http_and_grpc_streams_drain_on_sigint(self):
        server = harness.Server(TINY, "--shutdown_grace_period_s=120").start()
        body = json.dumps({"prompt": [1, 2, 3], "max_tokens": 300, "ignore_eos": True,
                           "logprobs": 1, "stream": True})
        curl = subprocess.Popen(
            ["curl", "-sN", "--max-time", "120", "-X", "POST",
             server.http + "/v1/completions", "-H", "Content-Type: application/json",
             "--data-binary", body], stdout=subprocess.PIPE)
        self.assertTrue(curl.stdout.readline().startswith(b"data: "))
        with Client(server.target, timeout=120) as c:
            stream = c.generate(input_ids=[1, 2, 3], max_tokens=300, ignore_eos=True,
                                temperature=0)
            next(stream)
            server.send_signal(signal.SIGINT)
            rest = list(stream)
            self.assertEqual(rest[-1].finish_reason, 2)  # LENGTH: ran to the end
            self.assertEqual(rest[-1].usage.completion_tokens, 300)
        out = curl.stdout.read()
        curl.stdout.close()
        curl.wait()
        self.assertTrue(out.rstrip().endswith(b"data: [DONE]"), out[-300:])
        self.assertIn(b'"finish_reason":"length"', out.replace(b" ", b""))
        status, _ = wait_exit(server, 60)
        log = server.read_log()
        server.close()
        self.assertEqual(status, 0, log)
        self.assertIn("stopped", log)


if __name__ == "__main__":
    unittest.main()
