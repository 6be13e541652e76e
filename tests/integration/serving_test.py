"""The served APIs' contracts against the real server process: KServe v2
(logits equal the golden last-position logits, health and metadata calls,
text and streaming text), cancellation, deadlines, queue overflow, malformed
requests, and graceful shutdown on SIGTERM."""
import os
import signal
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

import grpc

import harness
from ringmoe_client import Client
from ringmoe_client._pb import grpc_service_pb2 as kserve_pb2

TINY = os.path.join(harness.TINY, "mixtral")


def max_rel_error(got, want):
    err = sum((a - b) ** 2 for a, b in zip(got, want)) ** 0.5
    return err / sum(b * b for b in want) ** 0.5


class KServeTest(unittest.TestCase):
    def test_logits_health_and_metadata(self):
        with harness.Server(TINY, "--model_name=tiny") as server, \
                Client(server.target, timeout=60) as c:
            self.assertTrue(c.server_live())
            self.assertTrue(c.server_ready())
            self.assertTrue(c.model_ready("tiny"))
            self.assertTrue(c.model_ready("tiny", "1"))
            self.assertFalse(c.model_ready("other"))
            self.assertEqual(c.health(), "SERVING")
            self.assertEqual(c.health("inference.GRPCInferenceService"), "SERVING")
            md = c.server_metadata()
            self.assertEqual(md.name, "ringmoe")
            self.assertTrue(md.version)
            mm = c.model_metadata("tiny")
            self.assertEqual((mm.name, list(mm.versions)), ("tiny", ["1"]))
            self.assertIn(("input_ids", "INT64"), [(t.name, t.datatype) for t in mm.inputs])
            self.assertEqual([list(t.shape) for t in mm.outputs if t.name == "logits"],
                             [[-1, 512]])
            with self.assertRaises(grpc.RpcError) as e:
                c.model_metadata("other")
            self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)

            cases = harness.golden_cases("mixtral")
            for dtype in ("INT32", "INT64"):
                for raw in (True, False):
                    for ids, _, want in cases:
                        (got,) = c.infer_logits("tiny", [ids], dtype=dtype, raw=raw)
                        self.assertLess(max_rel_error(got, want), 1e-4)
                        self.assertLess(max(abs(a - b) for a, b in zip(got, want)), 1e-3)
            # A batch of equal-length rows: each row's own last position.
            ids, _, want = cases[2]
            rows = c.infer_logits("tiny", [ids, ids[:-1] + [ids[-1]]])
            for row in rows:
                self.assertLess(max_rel_error(row, want), 1e-4)
            self.assertEqual(server.stop(), 0)

    def test_text_and_streaming_text(self):
        with harness.Server(harness.ADDER) as server, Client(server.target, timeout=60) as c:
            self.assertEqual(c.infer_text("moe-adder", "37+485=", max_tokens=8,
                                          temperature=0.0), "522")
            deltas = list(c.stream_infer("moe-adder", "123+456=", max_tokens=8,
                                         temperature=0.0))
            self.assertEqual("".join(deltas), "579")
            self.assertGreater(len(deltas), 1)
            # Triton's final-response flag on the last message only.
            req = c.text_infer_request("moe-adder", "1+1=", request_id="r1", max_tokens=8,
                                       temperature=0.0)
            responses = list(c.kserve.ModelStreamInfer(iter([req]), timeout=60))
            flags = [r.infer_response.parameters["triton_final_response"].bool_param
                     for r in responses]
            self.assertEqual(flags[-1], True)
            self.assertFalse(any(flags[:-1]))
            self.assertTrue(all(r.infer_response.id == "r1" for r in responses))
            self.assertEqual(server.stop(), 0)


class RobustnessTest(unittest.TestCase):
    def test_malformed_requests_are_invalid_argument(self):
        with harness.Server(TINY, "--max_new_tokens=64", "--model_name=tiny") as server, \
                Client(server.target, timeout=30) as c:
            def expect_invalid(call, needle):
                with self.assertRaises(grpc.RpcError) as e:
                    call()
                self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT,
                                 e.exception.details())
                self.assertIn(needle, e.exception.details())

            gen = lambda **kw: c.generate_text(**kw)  # noqa: E731
            expect_invalid(lambda: gen(input_ids=[]), "empty")
            expect_invalid(lambda: gen(input_ids=[1, 2], model="nope"), "unknown model")
            expect_invalid(lambda: gen(input_ids=[1, 2], max_tokens=0), "max_tokens")
            expect_invalid(lambda: gen(input_ids=[1, 2], max_tokens=10 ** 6), "max_tokens")
            expect_invalid(lambda: gen(input_ids=[1, 100000], max_tokens=2), "vocabulary")
            expect_invalid(lambda: gen(input_ids=[1], max_tokens=2, temperature=-1),
                           "temperature")
            expect_invalid(lambda: gen(text="hi"), "tokenizer")

            def infer(dtype, shape, raw_bytes, model="tiny"):
                t = kserve_pb2.ModelInferRequest.InferInputTensor(
                    name="input_ids", datatype=dtype, shape=shape)
                req = kserve_pb2.ModelInferRequest(model_name=model, inputs=[t],
                                                   raw_input_contents=[raw_bytes])
                return c.kserve.ModelInfer(req, timeout=30)

            expect_invalid(lambda: infer("FP32", [1, 2], b"\0" * 8), "INT32 or INT64")
            expect_invalid(lambda: infer("INT32", [2], b"\0" * 8), "[batch, seq]")
            expect_invalid(lambda: infer("INT32", [1, 3], b"\0" * 8), "raw bytes")
            expect_invalid(lambda: infer("INT32", [1, 2], b"\0" * 8, "nope"), "unknown model")
            expect_invalid(lambda: c.infer_logits("tiny", [[1, 99999]]), "vocabulary")
            # Still serving, and the errors were counted.
            self.assertEqual(len(c.generate_text(input_ids=[1, 2], max_tokens=3,
                                                 ignore_eos=True).token_ids), 3)
            self.assertGreaterEqual(server.metric("ringmoe_requests_total",
                                                  status="INVALID_ARGUMENT"), 7)
            self.assertEqual(server.stop(), 0)

    def test_cancellation_frees_blocks_and_deadline_exceeded(self):
        # One running sequence at a time, so that queued requests wait for
        # the streams ahead of them however fast the build is.
        with harness.Server(TINY, "--max_running_sequences=1") as server, \
                Client(server.target) as c:
            # The tiny model can finish 500 tokens before /metrics answers:
            # retry until the metric is read while the stream still runs (a
            # stream that finished first must have ended by its length).
            for _ in range(10):
                stream = c.generate(input_ids=[1, 2, 3], max_tokens=500,
                                    ignore_eos=True, temperature=0)
                first = next(stream)
                self.assertFalse(first.finish_reason)
                if server.metric("ringmoe_kv_cache_used_blocks") > 0:
                    break
                self.assertEqual(list(stream)[-1].finish_reason, 2)  # LENGTH
            else:
                self.fail("no stream was still running when /metrics answered")
            stream.cancel()
            self.assertEqual(server.wait_metric("ringmoe_kv_cache_used_blocks", 0), 0)
            self.assertEqual(server.wait_metric("ringmoe_running_sequences", 0), 0)

            # Eight long streams, run one after another, keep the request
            # queued well past its deadline (4000 decode steps: about 0.2 s
            # in an optimised build, seconds in the default one).
            busy = [c.generate(input_ids=[1, 2, 3], max_tokens=500, ignore_eos=True)
                    for _ in range(8)]
            with self.assertRaises(grpc.RpcError) as e:
                c.generate_text(input_ids=[4, 5, 6], max_tokens=500, ignore_eos=True,
                                timeout=0.05)
            self.assertEqual(e.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
            for s in busy:
                s.cancel()
            self.assertEqual(server.wait_metric("ringmoe_kv_cache_used_blocks", 0), 0)
            self.assertEqual(server.stop(), 0)

    def test_queue_overflow_is_resource_exhausted_and_accepted_complete(self):
        with harness.Server(TINY, "--max_queue=4", "--max_running_sequences=2") as server, \
                Client(server.target, timeout=120) as c:
            def run(i):
                try:
                    r = c.generate_text(input_ids=[1, 2, 3 + i], max_tokens=200,
                                        ignore_eos=True, temperature=0)
                    return ("ok", len(r.token_ids), r.finish_reason)
                except grpc.RpcError as e:
                    return (e.code().name, e.details(), None)

            with ThreadPoolExecutor(24) as pool:
                results = list(pool.map(run, range(24)))
            refused = [r for r in results if r[0] == "RESOURCE_EXHAUSTED"]
            done = [r for r in results if r[0] == "ok"]
            self.assertGreater(len(refused), 0, results)
            self.assertEqual(len(refused) + len(done), 24, results)
            self.assertIn("queue is full", refused[0][1])
            self.assertTrue(all(r[1:] == (200, "length") for r in done), done)
            self.assertEqual(server.stop(), 0)

    def test_sigterm_drains_streams_and_refuses_new_work(self):
        # The streams need their time to the end: on a loaded 2-core machine
        # 4000 tokens over two ranks outlasted the default 30 s grace period,
        # so this server and client give them 300 s.
        server = harness.Server(os.path.join(harness.TINY, "deepseek_v3"),
                                "--shutdown_grace_period_s=300").start()
        c = Client(server.target, timeout=300)
        streams = [c.generate(input_ids=[1, 2, 3], max_tokens=1000, ignore_eos=True,
                              temperature=0) for _ in range(4)]
        for s in streams:
            next(s)  # each is running
        # A KServe stream its client keeps open (answered, not half-closed)
        # holds the drain, however fast the streams above finish: the server
        # must answer the checks below, health and all, until it ends.
        hold = threading.Event()
        t = kserve_pb2.ModelInferRequest.InferInputTensor(
            name="input_ids", datatype="INT32", shape=[1, 2])
        t.contents.int_contents.extend([1, 2])

        def one_request_then_wait():
            yield kserve_pb2.ModelInferRequest(model_name="deepseek_v3", id="held", inputs=[t])
            hold.wait(300)

        held = c.kserve.ModelStreamInfer(one_request_then_wait(), timeout=300)
        self.assertEqual(next(held).error_message, "")
        server.send_signal(signal.SIGTERM)  # rank 0's under mpirun
        deadline = time.monotonic() + 10
        while c.health() != "NOT_SERVING" and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(c.health(), "NOT_SERVING")
        self.assertFalse(c.server_ready())
        with self.assertRaises(grpc.RpcError) as e:
            c.generate_text(input_ids=[1, 2], max_tokens=2)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
        for s in streams:
            rest = list(s)
            self.assertEqual(rest[-1].finish_reason, 2)  # LENGTH: ran to the end
            self.assertEqual(rest[-1].usage.completion_tokens, 1000)
        # Still answering while the held stream is open.
        self.assertEqual(c.health(), "NOT_SERVING")
        hold.set()
        self.assertEqual(list(held), [])
        c.close()
        self.assertEqual(server.stop(), 0, server.read_log())


if __name__ == "__main__":
    unittest.main()
