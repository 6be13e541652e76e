"""The server under abuse (issue: hold under abuse): each test is one way a
client or an operator can hurt the server, and what the server must do."""
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import unittest
import urllib.request

import harness


class MetricsStarvationTest(unittest.TestCase):
    def test_idle_connections_do_not_block_scrapes(self):
        with harness.Server(harness.ADDER) as server:
            # More idle connections than the exposer's old thread count, and
            # reconnecting as they are dropped.
            idle = [socket.create_connection(("127.0.0.1", server.metrics_port))
                    for _ in range(8)]
            try:
                for _ in range(3):
                    start = time.monotonic()
                    with urllib.request.urlopen(
                            "http://127.0.0.1:%d/metrics" % server.metrics_port,
                            timeout=10) as r:
                        self.assertTrue(b"ringmoe_queue_depth" in r.read(), "no metrics")
                    self.assertLess(time.monotonic() - start, 5)
                    idle.append(socket.create_connection(
                        ("127.0.0.1", server.metrics_port)))
            finally:
                for s in idle:
                    s.close()
            self.assertEqual(server.stop(), 0)


def rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class SlowReaderTest(unittest.TestCase):
    def test_a_stream_that_is_not_read_is_cut_off_and_memory_returns(self):
        import grpc
        import threading
        from ringmoe_client import Client
        from ringmoe_client._pb import grpc_service_pb2 as kserve_pb2
        from ringmoe_client._pb import grpc_service_pb2_grpc as kserve_grpc

        # The adder's 32000-token vocabulary: logits for [100, 1] input ids
        # are 12.8 MB per reply; 40 of them would be 512 MB.
        with harness.Server(harness.ADDER, "--max_stream_buffer_bytes=67108864",
                            "--max_queue=4096") as server:
            base = rss_bytes(server.proc.pid)
            t = kserve_pb2.ModelInferRequest.InferInputTensor(
                name="input_ids", datatype="INT32", shape=[100, 1])
            t.contents.int_contents.extend([5] * 100)
            requests = [kserve_pb2.ModelInferRequest(model_name="moe-adder", id="r%d" % i,
                                                     inputs=[t]) for i in range(40)]
            sent = threading.Event()

            def slowly():
                yield from requests
                sent.wait(60)

            channel = grpc.insecure_channel(
                server.target, options=[("grpc.max_receive_message_length", -1)])
            stub = kserve_grpc.GRPCInferenceServiceStub(channel)
            call = stub.ModelStreamInfer(slowly(), timeout=120)
            peak = 0
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                peak = max(peak, rss_bytes(server.proc.pid))
                if server.metric("ringmoe_stream_overflows_total") == 1.0:
                    break
                time.sleep(0.1)
            self.assertEqual(server.metric("ringmoe_stream_overflows_total"), 1.0)
            sent.set()
            # Reading now: what was written, then RESOURCE_EXHAUSTED.
            with self.assertRaises(grpc.RpcError) as error:
                for _ in call:
                    pass
            self.assertEqual(error.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertIn("not reading", error.exception.details())
            channel.close()
            self.assertLess(peak - base, 250 << 20, "buffered without bound")
            self.assertEqual(server.wait_metric("ringmoe_stream_buffered_bytes", 0.0), 0.0)
            self.assertEqual(server.wait_metric("ringmoe_running_sequences", 0.0), 0.0)
            time.sleep(0.5)
            self.assertLess(rss_bytes(server.proc.pid) - base, 200 << 20,
                            "memory not returned after the client left")
            # Still serving.
            with Client(server.target, timeout=60) as c:
                self.assertEqual(c.infer_text("moe-adder", "37+485=", max_tokens=8,
                                              temperature=0.0), "522")
            self.assertEqual(server.stop(), 0)


    def test_an_http_event_stream_that_is_not_read_is_cut_off(self):
        # The tiny Mixtral allowed 4096 positions: 16 choices of 4000 tokens
        # with logprobs are far more output than the 1 MiB limit and the
        # socket buffers of a client that reads nothing.
        model = harness.tmpdir()
        src = os.path.join(harness.TINY, "mixtral")
        for f in ("model.safetensors",):
            os.symlink(os.path.abspath(os.path.join(src, f)), os.path.join(model, f))
        with open(os.path.join(src, "config.json")) as f:
            config = json.load(f)
        config["max_position_embeddings"] = 4096
        with open(os.path.join(model, "config.json"), "w") as f:
            json.dump(config, f)
        with harness.Server(model, "--max_stream_buffer_bytes=1048576",
                            "--kv_cache_tokens=65536") as server:
            body = json.dumps({"prompt": [1, 2, 3], "max_tokens": 4000, "n": 16,
                               "logprobs": 5, "ignore_eos": True, "stream": True,
                               "seed": 7}).encode()
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", server.http_port))
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                         % len(body) + body)
            self.assertEqual(server.wait_metric("ringmoe_stream_overflows_total", 1.0,
                                                timeout=120), 1.0)
            self.assertEqual(server.wait_metric("ringmoe_running_sequences", 0.0), 0.0)
            self.assertEqual(server.wait_metric("ringmoe_kv_cache_used_blocks", 0.0), 0.0)
            self.assertEqual(server.metric("ringmoe_stream_buffered_bytes"), 0.0)
            self.assertLess(server.metric("ringmoe_generated_tokens_total"), 16 * 4000)
            # Reading now: the events written, then the error.
            sock.settimeout(60)
            received = b""
            while True:
                data = sock.recv(1 << 16)
                if not data:
                    break
                received += data
                if b"not reading its stream" in received:
                    break
            sock.close()
            self.assertIn(b"not reading its stream", received)
            self.assertEqual(server.wait_metric("ringmoe_requests_total", 1.0,
                                                method="completions",
                                                status="RESOURCE_EXHAUSTED"), 1.0)
            # Still serving.
            reply = json.loads(urllib.request.urlopen(urllib.request.Request(
                server.http + "/v1/completions",
                data=json.dumps({"prompt": [1, 2], "max_tokens": 3,
                                 "ignore_eos": True}).encode(),
                headers={"Content-Type": "application/json"}), timeout=60).read())
            self.assertEqual(reply["usage"]["completion_tokens"], 3)
            self.assertEqual(server.stop(), 0)


class UnparsableRequestsTest(unittest.TestCase):
    def test_bytes_that_are_no_message_are_refused_counted_and_harmless(self):
        import grpc
        from ringmoe_client._pb import grpc_service_pb2 as kserve_pb2
        with harness.Server(harness.ADDER) as server:
            channel = grpc.insecure_channel(server.target)
            # Generate's `text` (field 2) holding bytes that are not UTF-8.
            generate = channel.unary_stream("/ringmoe.v1.Generation/Generate")
            with self.assertRaises(grpc.RpcError) as e:
                list(generate(b"\x12\x02\xff\xfe", timeout=30))
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("not a valid message for Generate", e.exception.details())
            # Many of them leave no trace in the log (protobuf logs each).
            for _ in range(100):
                with self.assertRaises(grpc.RpcError):
                    list(generate(b"\x12\x02\xff\xfe", timeout=30))
            self.assertNotIn("UTF-8", server.read_log())
            infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
            with self.assertRaises(grpc.RpcError) as e:
                infer(b"\x0a\xff", timeout=30)
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)

            # In a stream: the bad message is refused in the stream and the
            # requests around it are answered.
            def request(i):
                t = kserve_pb2.ModelInferRequest.InferInputTensor(
                    name="input_ids", datatype="INT32", shape=[1, 3])
                t.contents.int_contents.extend([5, 6, 7])
                return kserve_pb2.ModelInferRequest(
                    model_name="moe-adder", id="r%d" % i, inputs=[t]).SerializeToString()

            stream = channel.stream_stream(
                "/inference.GRPCInferenceService/ModelStreamInfer",
                response_deserializer=kserve_pb2.ModelStreamInferResponse.FromString)
            replies = list(stream(iter([request(0), b"\xff\xff\xff", request(2)]),
                                  timeout=60))
            errors = [r.error_message for r in replies if r.error_message]
            answered = sorted(r.infer_response.id for r in replies if not r.error_message)
            self.assertEqual(answered, ["r0", "r2"], replies)
            self.assertEqual(len(errors), 1, errors)
            self.assertIn("message 2 of the stream is not a valid ModelInferRequest",
                          errors[0])
            channel.close()
            for method, status, want in (
                    ("Generate", "INVALID_ARGUMENT", 101.0),
                    ("ModelInfer", "INVALID_ARGUMENT", 1.0),
                    ("ModelStreamInfer.request", "INVALID_ARGUMENT", 1.0),
                    ("ModelStreamInfer.request", "OK", 2.0),
                    ("ModelStreamInfer", "OK", 1.0)):
                self.assertEqual(server.wait_metric("ringmoe_requests_total", want,
                                                    method=method, status=status),
                                 want, (method, status))
            self.assertEqual(server.stop(), 0)


class LongClientStringsTest(unittest.TestCase):
    def test_errors_quoting_huge_client_strings_stay_errors(self):
        import grpc
        from ringmoe_client import Client
        from ringmoe_client._pb import grpc_service_pb2 as kserve_pb2
        with harness.Server(harness.ADDER) as server, Client(server.target, timeout=60) as c:
            huge = "x" * 100000
            cases = [
                kserve_pb2.ModelInferRequest(model_name=huge),
                kserve_pb2.ModelInferRequest(id=huge, model_name="moe-adder"),
                kserve_pb2.ModelInferRequest(
                    model_name="moe-adder",
                    inputs=[kserve_pb2.ModelInferRequest.InferInputTensor(
                        name=huge, datatype="INT32", shape=[1, 1])]),
            ]
            for request in cases:
                with self.assertRaises(grpc.RpcError) as error:
                    c.kserve.ModelInfer(request, timeout=30)
                self.assertEqual(error.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertLess(len(error.exception.details()), 4096)
            with self.assertRaises(grpc.RpcError) as error:
                c.generate_text(text="1+1=", model=huge, max_tokens=2)
            self.assertEqual(error.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("unknown model", error.exception.details())
            self.assertEqual(server.stop(), 0)


class BadSettingsTest(unittest.TestCase):
    """Absurd flags and config values: a clear error naming the setting and
    exit status 1, never an abort (134) or a server that cannot serve."""

    def run_server(self, *flags, model=harness.ADDER):
        return subprocess.run([os.environ["RINGMOE_SERVER"], "--model", model,
                               "--grpc_port=0", "--metrics_port=0", "--http_port=0"]
                              + list(flags), capture_output=True, text=True, timeout=60)

    def expect_refused(self, out, message):
        self.assertEqual(out.returncode, 1, out.stderr[-2000:])
        self.assertIn(message, out.stderr)

    def test_absurd_flags_are_refused(self):
        cases = [
            (["--kv_cache_tokens=1099511627776"], "set --kv_cache_tokens lower"),
            (["--kv_cache_tokens=9223372036854775807"], "--kv_cache_tokens must lie in"),
            (["--threads=100000"], "--threads must be 0"),
            (["--max_queue=0"], "--max_queue"),
            (["--shutdown_grace_period_s=nan"], "--shutdown_grace_period_s must lie in"),
            (["--shutdown_grace_period_s=-1"], "--shutdown_grace_period_s must lie in"),
            (["--host_memory_budget=0"], "less than one byte"),
            (["--host_memory_budget=0.4"], "less than one byte"),
            (["--host_memory_budget=18446744073709551616"], "too large"),
            (["--http_threads=0"], "--http_threads"),
        ]
        for flags, message in cases:
            with self.subTest(flags=flags):
                self.expect_refused(self.run_server(*flags), message)

    def test_absurd_config_values_are_refused(self):
        cases = [
            ({"max_position_embeddings": 2147483647}, "max_position_embeddings must lie in"),
            ({"max_position_embeddings": 0}, "max_position_embeddings must lie in"),
            ({"num_hidden_layers": 1000000000}, "num_hidden_layers"),
            ({"rms_norm_eps": -1}, "rms_norm_eps must lie in"),
            ({"rope_theta": -1}, "rope_theta must be positive"),
            ({"num_key_value_heads": 0}, "num_key_value_heads"),
        ]
        for change, message in cases:
            with self.subTest(change=change):
                model = os.path.join(harness.tmpdir(), "moe-adder")
                shutil.copytree(harness.ADDER, model)
                path = os.path.join(model, "config.json")
                with open(path) as f:
                    config = json.load(f)
                config.update(change)
                with open(path, "w") as f:
                    json.dump(config, f)
                self.expect_refused(self.run_server(model=model), message)

    def test_an_unwritable_ready_file_stops_the_server(self):
        out = self.run_server("--ready_file=/nonexistent-dir/ready.json")
        self.expect_refused(out, "cannot write the ready file")

    def test_the_ready_file_goes_away_at_exit(self):
        server = harness.Server(harness.ADDER).start()
        ready = os.path.join(server.dir, "ready.json")
        self.assertTrue(os.path.exists(ready))
        self.assertEqual(server.stop(signal.SIGTERM), 0)
        self.assertFalse(os.path.exists(ready))

    def test_ports_out_of_range_are_refused(self):
        for flag, value in [("grpc_port", 70000), ("grpc_port", -1), ("metrics_port", 131073),
                            ("http_port", 65536), ("http_port", -2)]:
            with self.subTest(flag=flag, value=value):
                out = self.run_server("--%s=%d" % (flag, value))
                self.assertNotEqual(out.returncode, 0)
                self.assertIn("--%s must lie in" % flag, out.stderr)


if __name__ == "__main__":
    unittest.main()
