"""Many clients at once against the real server: cancellations, a full
queue and KV-cache preemption leave no trace (every gauge back to 0, every
request counted once) and change no answer."""
import os
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

import grpc

import harness
from ringmoe_client import Client

TINY = os.path.join(harness.TINY, "mixtral")

GAUGES = ("ringmoe_queue_depth", "ringmoe_running_sequences",
          "ringmoe_kv_cache_used_blocks", "ringmoe_stream_buffered_bytes")


class ConcurrencyTest(unittest.TestCase):
    def assertIdle(self, server):
        for gauge in GAUGES:
            self.assertEqual(server.wait_metric(gauge, 0.0, timeout=30), 0.0, gauge)

    def test_cancelling_half_of_200_streams(self):
        with harness.Server(TINY, "--max_running_sequences=16", "--max_queue=256") as server, \
                Client(server.target, timeout=120) as c:
            want = {}
            with ThreadPoolExecutor(8) as pool:
                for i, r in zip(range(0, 200, 2), pool.map(
                        lambda i: c.generate_text(input_ids=[1, 2, 3 + i % 100],
                                                  max_tokens=40, ignore_eos=True,
                                                  temperature=0),
                        range(0, 200, 2))):
                    want[i] = r.token_ids
            # A call is counted when gRPC is done with it, which can come
            # after the client has its answer.
            served = server.wait_metric("ringmoe_requests_total", 100.0,
                                        method="Generate")
            self.assertEqual(served, 100.0)

            # Even streams as above; odd ones long, and cancelled at once:
            # some running, most still queued.
            streams = [c.generate(input_ids=[1, 2, 3 + i % 100],
                                  max_tokens=40 if i % 2 == 0 else 500,
                                  ignore_eos=True, temperature=0) for i in range(200)]
            got = {}
            outcomes = {}

            def read(i):
                try:
                    got[i] = [t for r in streams[i] for t in r.token_ids]
                    outcomes[i] = "OK"
                except grpc.RpcError as e:
                    outcomes[i] = e.code().name

            readers = [threading.Thread(target=read, args=(i,)) for i in range(200)]
            for t in readers:
                t.start()
            for i in range(1, 200, 2):
                streams[i].cancel()
            for t in readers:
                t.join(120)
                self.assertFalse(t.is_alive(), "a stream hangs")
            self.assertEqual({i: got.get(i) for i in want}, want,
                             "a cancellation changed another answer")
            odd = [outcomes[i] for i in range(1, 200, 2)]
            self.assertEqual(set(odd) - {"OK", "CANCELLED"}, set(), odd)
            # A stream may have ended before its cancel reached the server.
            self.assertTrue(all(len(got[i]) == 500 for i in range(1, 200, 2)
                                if outcomes[i] == "OK"))
            cancelled = odd.count("CANCELLED")
            self.assertGreater(cancelled, 50, odd)
            self.assertIdle(server)
            for status, count in (("OK", served + 200 - cancelled),
                                  ("CANCELLED", cancelled)):
                self.assertEqual(server.wait_metric("ringmoe_requests_total", float(count),
                                                    method="Generate", status=status),
                                 float(count), status)
            self.assertEqual(server.metric("ringmoe_requests_total", method="Generate"),
                             served + 200)
            self.assertEqual(server.stop(), 0)

    def test_a_full_queue_refuses_and_leaves_no_trace(self):
        with harness.Server(TINY, "--max_queue=8", "--max_running_sequences=2") as server, \
                Client(server.target, timeout=120) as c:
            def run(i):
                try:
                    r = c.generate_text(input_ids=[1, 2, 3 + i], max_tokens=100,
                                        ignore_eos=True, temperature=0)
                    return "OK" if len(r.token_ids) == 100 else "SHORT"
                except grpc.RpcError as e:
                    return e.code().name

            with ThreadPoolExecutor(64) as pool:
                results = list(pool.map(run, range(64)))
            self.assertEqual(set(results) - {"OK", "RESOURCE_EXHAUSTED"}, set(), results)
            self.assertIn("RESOURCE_EXHAUSTED", results)
            self.assertIdle(server)
            for status in ("OK", "RESOURCE_EXHAUSTED"):
                count = float(results.count(status))
                self.assertEqual(
                    server.wait_metric("ringmoe_requests_total", count, method="Generate",
                                       status=status),
                    count, status)
            # And it serves as before.
            self.assertEqual(len(c.generate_text(input_ids=[1, 2], max_tokens=5,
                                                 ignore_eos=True).token_ids), 5)
            self.assertEqual(server.stop(), 0)

    def test_preempted_sequences_answer_as_if_run_alone(self):
        # 12 sequences of up to 150 tokens in a 256-token cache (16 blocks of
        # 16): they cannot all hold their blocks, so the scheduler preempts
        # and recomputes. Greedy and seeded sampling alike must not notice.
        def request(i):
            return dict(input_ids=[1 + i, 2, 3, 4 + i], max_tokens=100 + 4 * i,
                        ignore_eos=True, temperature=0 if i % 2 else 0.9, seed=11 * i,
                        top_k=0 if i % 3 else 20)

        with harness.Server(TINY, "--max_running_sequences=1") as server, \
                Client(server.target, timeout=120) as c:
            alone = [c.generate_text(**request(i)).token_ids for i in range(12)]
            self.assertEqual(server.stop(), 0)
        with harness.Server(TINY, "--kv_cache_tokens=256", "--kv_block_size=16",
                            "--max_running_sequences=12") as server, \
                Client(server.target, timeout=120) as c:
            with ThreadPoolExecutor(12) as pool:
                together = list(pool.map(lambda i: c.generate_text(**request(i)).token_ids,
                                         range(12)))
            self.assertGreater(server.metric("ringmoe_preemptions_total"), 0)
            self.assertEqual(together, alone)
            self.assertIdle(server)
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    unittest.main()
