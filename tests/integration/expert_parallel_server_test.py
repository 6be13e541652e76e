"""ringmoe_server --expert_parallel under `mpirun -np 2` on loopback: rank 0
serves, rank 1 replays its steps. Greedy tokens and KServe logits equal a
single-process server's; concurrent streams with a cancelled one keep the
ranks' KV caches in step; SIGTERM to rank 0 ends both ranks with 0; a
follower killed with SIGKILL ends the job non-zero without a client
hanging; one that stops answering (SIGSTOP) fails the stream in flight
with the job's failure, health turns NOT_SERVING and the job ends
non-zero. Preemption under a small KV cache and idle time longer than
--expert_parallel_timeout (the heartbeat) leave the ranks in step; alone,
--expert_parallel changes nothing. Data-parallel attention (each sequence
and its KV cache on one rank, the scheduler planning both caches) gives
the same tokens, preemption included; rank 0's /metrics has every rank's
exchange counters; a balanced placement with replicas is written on stop
and read back by the next job."""
import contextlib
import os
import signal
import subprocess
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

import grpc

import harness
from ringmoe_client import Client

MODEL = "mixtral"
TINY = os.path.join(harness.TINY, MODEL)


def MpiServer(model_dir, *flags, np=2):
    """ringmoe_server as every rank of `mpirun -np N` (harness.Server with np:
    the environment of engine/parallel/mpirun_test.sh); self.proc is mpirun."""
    return harness.Server(model_dir, *flags, np=np)


PROMPTS = [ids for ids, _, _ in harness.golden_cases(MODEL)] + [[1, 2, 3], [7] * 40]


def run_all(target):
    """Greedy tokens and KServe logits of every prompt, one after another."""
    out = []
    with Client(target, timeout=60) as c:
        for ids in PROMPTS:
            r = c.generate_text(input_ids=ids, max_tokens=12, temperature=0.0,
                                ignore_eos=True)
            (logits,) = c.infer_logits(MODEL, [ids])
            out.append((r.token_ids, list(logits)))
    return out


def run_concurrent(target):
    """Several streams at once, one of them cancelled after its first token;
    then every prompt again, one after another."""
    with Client(target, timeout=60) as c:
        cancelled = c.generate(input_ids=[5, 6, 7, 8], max_tokens=400, temperature=0.0,
                               ignore_eos=True)
        next(cancelled)

        def one(ids):
            return c.generate_text(input_ids=ids, max_tokens=20, temperature=0.0,
                                   ignore_eos=True).token_ids

        with ThreadPoolExecutor(len(PROMPTS)) as pool:
            futures = [pool.submit(one, ids) for ids in PROMPTS]
            time.sleep(0.01)
            cancelled.cancel()
            together = [f.result() for f in futures]
    return together, run_all(target)


@contextlib.contextmanager
def serving(test, server):
    """`server` started; its log printed when the body fails; then stopped
    by SIGTERM to rank 0, which must end the job with 0."""
    server.start()
    try:
        yield server
    except Exception:
        print(server.read_log())
        raise
    finally:
        rc = server.stop()
    test.assertEqual(rc, 0, server.read_log())


def run_preempting(target):
    """The 12 preempting_requests at once: their tokens."""
    with Client(target, timeout=120) as c:
        with ThreadPoolExecutor(12) as pool:
            return list(pool.map(
                lambda i: c.generate_text(**preempting_request(i)).token_ids, range(12)))


def preempting_request(i):
    # As concurrency_test: 12 sequences of up to 150 tokens in a 256-token
    # cache preempt one another; greedy and seeded sampling alike.
    return dict(input_ids=[1 + i, 2, 3, 4 + i], max_tokens=100 + 4 * i, ignore_eos=True,
                temperature=0 if i % 2 else 0.9, seed=11 * i, top_k=0 if i % 3 else 20)


class ExpertParallelServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # The reference: one process, whatever RINGMOE_TEST_RANKS says.
        with harness.Server(TINY, np=1) as single:
            cls.want = run_all(single.target)
            cls.want_concurrent = run_concurrent(single.target)
        with harness.Server(TINY, "--max_running_sequences=1", np=1) as single, \
                Client(single.target, timeout=120) as c:
            cls.alone = [c.generate_text(**preempting_request(i)).token_ids
                         for i in range(12)]

    def test_alone_the_flag_changes_nothing(self):
        with harness.Server(TINY, "--expert_parallel", np=1) as server:
            self.assertEqual(run_all(server.target), self.want)
            self.assertEqual(server.stop(), 0)

    def test_preemption_releases_reach_the_follower(self):
        with serving(self, MpiServer(TINY, "--kv_cache_tokens=256", "--kv_block_size=16",
                                     "--max_running_sequences=12",
                                     "--expert_parallel_timeout=2s")) as server:
            # Idle for longer than a collective may wait: the heartbeat
            # keeps the follower from timing out.
            time.sleep(5)
            self.assertEqual(run_preempting(server.target), self.alone)
            self.assertGreater(server.metric("ringmoe_preemptions_total"), 0)
            # The caches still agree afterwards.
            self.assertEqual(run_all(server.target), self.want)

    def test_same_tokens_and_logits_as_one_process_then_sigterm(self):
        with serving(self, MpiServer(TINY)) as server:
            got = run_all(server.target)
            for (ids, logits), (want_ids, want_logits) in zip(got, self.want):
                self.assertEqual(ids, want_ids)
                self.assertEqual(logits, want_logits)
            together, after = run_concurrent(server.target)
            self.assertEqual(together, self.want_concurrent[0])
            self.assertEqual(after, self.want_concurrent[1])
            self.assertEqual(after, self.want)
        log = server.read_log()
        self.assertIn("ringmoe_server: stopped", log)
        self.assertIn("expert parallel over 2 ranks", log)

    def test_data_parallel_attention_and_per_rank_metrics(self):
        # Two 256-token caches (one per rank) of 2 layers x 16 blocks.
        with serving(self, MpiServer(TINY, "--expert_parallel_attention=data_parallel",
                                     "--kv_cache_tokens=256", "--kv_block_size=16",
                                     "--max_running_sequences=12",
                                     "--ranks_per_node=2")) as server:
            # One sequence at a time: its attention's products see only its
            # own rows on its rank, as in one process, so logits are bitwise.
            self.assertEqual(run_all(server.target), self.want)
            self.assertEqual(run_preempting(server.target), self.alone)
            self.assertGreater(server.metric("ringmoe_preemptions_total"), 0)
            self.assertEqual(server.metric("ringmoe_kv_cache_blocks"), 64)
            # Every rank's counters reach rank 0 within about a second.
            steps = server.metric("ringmoe_engine_step_seconds_count")
            self.assertEqual(server.wait_metric("ringmoe_expert_parallel_steps_total",
                                                steps, rank="1"), steps)
            self.assertEqual(server.wait_metric("ringmoe_expert_parallel_steps_total",
                                                steps, rank="0"), steps)
            for rank in ("0", "1"):
                self.assertGreater(server.metric(
                    "ringmoe_expert_parallel_sent_bytes_total", rank=rank), 0)
                self.assertGreater(server.metric(
                    "ringmoe_expert_parallel_received_bytes_total", rank=rank), 0)
                self.assertGreater(server.metric(
                    "ringmoe_expert_parallel_collective_seconds_total", rank=rank), 0)
                self.assertEqual(server.metric("ringmoe_expert_parallel_experts",
                                               rank=rank), 4)
            self.assertIsNone(server.metric("ringmoe_expert_parallel_steps_total",
                                            rank="2"))

    def test_placement_file_written_on_stop_and_read_back(self):
        placement = os.path.join(harness.tmpdir(), "placement.txt")
        flags = ("--expert_placement_file=" + placement, "--expert_replicas=2")
        with serving(self, MpiServer(TINY, *flags)) as first:
            self.assertEqual(run_all(first.target), self.want)
        with open(placement) as f:
            written = f.read()
        self.assertTrue(written.startswith("ringmoe-expert-placement 1"), written)
        with serving(self, MpiServer(TINY, *flags)) as second:
            self.assertIn("expert placement (%s)" % placement, second.read_log())
            # Replicas share their experts' rows: greedy tokens as one
            # process, logits to float rounding.
            for (ids, logits), (want_ids, want_logits) in zip(run_all(second.target),
                                                              self.want):
                self.assertEqual(ids, want_ids)
                scale = max(1.0, max(abs(v) for v in want_logits))
                self.assertLess(max(abs(a - b) for a, b in zip(logits, want_logits)),
                                1e-4 * scale)
            # The ranks' counters arrive within about a second.
            deadline = time.monotonic() + 10
            replica_rows = 0
            while replica_rows == 0 and time.monotonic() < deadline:
                replica_rows = sum(
                    second.metric("ringmoe_expert_parallel_replica_rows_total", rank=r) or 0
                    for r in ("0", "1"))
                time.sleep(0.1)
            self.assertGreater(replica_rows, 0)
            self.assertEqual(sum(second.metric("ringmoe_expert_parallel_experts", rank=r)
                                 for r in ("0", "1")), 10)

    def test_follower_that_stops_answering_fails_requests_and_the_job(self):
        server = MpiServer(TINY, "--expert_parallel_timeout=2s").start()
        follower = server.rank_pid(1)
        try:
            with Client(server.target, timeout=30) as c:
                stream = c.generate(input_ids=[1, 2, 3], max_tokens=400,
                                    temperature=0.0, ignore_eos=True)
                next(stream)
                start = time.monotonic()
                os.kill(follower, signal.SIGSTOP)
                # The stream ends with the job's failure, not a hang or a
                # dropped connection.
                with self.assertRaises(grpc.RpcError) as failed:
                    for _ in stream:
                        pass
                self.assertEqual(failed.exception.code(), grpc.StatusCode.INTERNAL)
                self.assertIn("the expert-parallel job failed",
                              failed.exception.details())
                self.assertLess(time.monotonic() - start, 10)
                # Out of service within the health loop's 250 ms:
                # NOT_SERVING until the listener closes (calls then are
                # cancelled), then unreachable.
                deadline = time.monotonic() + 3
                status = "SERVING"
                while status == "SERVING" and time.monotonic() < deadline:
                    try:
                        status = c.health(timeout=5)
                    except grpc.RpcError as e:
                        self.assertIn(e.code(), (grpc.StatusCode.UNAVAILABLE,
                                                 grpc.StatusCode.CANCELLED))
                        status = e.code().name
                    time.sleep(0.02)
                self.assertIn(status, ("NOT_SERVING", "UNAVAILABLE", "CANCELLED"))
            rc = server.proc.wait(timeout=15)
            self.assertNotEqual(rc, 0)
            self.assertLess(time.monotonic() - start, 20)
            self.assertIn("NOT_SERVING: the expert-parallel job failed",
                          server.read_log())
        except Exception:
            print(server.read_log())
            raise
        finally:
            try:
                os.kill(follower, signal.SIGKILL)
            except OSError:
                pass
            if server.proc.poll() is None:
                server.proc.kill()
                server.proc.wait()
            server.close()

    def test_bad_expert_parallel_flags_are_refused(self):
        for flag, want in (("--expert_parallel_attention=sideways",
                            "must be replicated or data_parallel"),
                           ("--ranks_per_node=-1", "--ranks_per_node must be >= 0"),
                           ("--expert_replicas=-2", "--expert_replicas must be >= 0")):
            out = subprocess.run(
                [os.environ["RINGMOE_SERVER"], "--model", TINY, "--grpc_port=0",
                 "--metrics_port=0", "--http_port=0", "--expert_parallel", flag],
                capture_output=True, text=True, timeout=60)
            self.assertNotEqual(out.returncode, 0, flag)
            self.assertIn(want, out.stderr, flag)

    def test_killed_follower_ends_the_job(self):
        server = MpiServer(TINY).start()
        try:
            with Client(server.target, timeout=20) as c:
                stream = c.generate(input_ids=[1, 2, 3], max_tokens=400,
                                    temperature=0.0, ignore_eos=True)
                next(stream)
                start = time.monotonic()
                os.kill(server.rank_pid(1), signal.SIGKILL)
                rc = server.proc.wait(timeout=15)
                self.assertNotEqual(rc, 0)
                self.assertLess(time.monotonic() - start, 15)
                # The stream ends (with an error unless it finished first),
                # and the next request fails: nothing hangs.
                try:
                    for _ in stream:
                        pass
                except grpc.RpcError:
                    pass
                with self.assertRaises(grpc.RpcError):
                    c.generate_text(input_ids=[1, 2, 3], max_tokens=4, timeout=10)
        finally:
            if server.proc.poll() is None:
                server.proc.kill()
                server.proc.wait()
            server.close()


if __name__ == "__main__":
    unittest.main()
