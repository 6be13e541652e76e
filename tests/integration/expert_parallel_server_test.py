"""ringmoe_server --expert_parallel under `mpirun -np 2` on loopback: rank 0
serves, rank 1 replays its steps. Greedy tokens and KServe logits equal a
single-process server's; concurrent streams with a cancelled one keep the
ranks' KV caches in step; SIGTERM to rank 0 ends both ranks with 0; a
follower killed with SIGKILL ends the job non-zero without a client
hanging. Preemption under a small KV cache and idle time longer than
--expert_parallel_timeout (the heartbeat) leave the ranks in step; alone,
--expert_parallel changes nothing."""
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

import grpc

import harness
from ringmoe_client import Client

MODEL = "mixtral"
TINY = os.path.join(harness.TINY, MODEL)


class MpiServer(harness.Server):
    """ringmoe_server as every rank of `mpirun -np N` (the environment of
    engine/parallel/mpirun_test.sh); self.proc is mpirun."""

    def __init__(self, model_dir, *flags, np=2):
        super().__init__(model_dir, *flags)
        self.np = np
        # Open MPI's Unix sockets live under TMPDIR; their paths are short.
        self.session = tempfile.mkdtemp(prefix="rmep", dir="/tmp")

    def start(self, timeout=60):
        env = dict(os.environ, TMPDIR=self.session, OMPI_MCA_plm="isolated",
                   OMPI_MCA_pml="ob1", OMPI_MCA_btl="self,vader,tcp",
                   OMPI_MCA_btl_tcp_if_include="lo", OMPI_MCA_oob_tcp_if_include="lo",
                   OMPI_MCA_orte_base_help_aggregate="0")
        for name in ("XML_OUTPUT_FILE", "TEST_PREMATURE_EXIT_FILE", "TEST_SHARD_STATUS_FILE"):
            env.pop(name, None)
        ready = os.path.join(self.dir, "ready.json")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            ["mpirun", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none",
             "-np", str(self.np), os.path.abspath(os.environ["RINGMOE_SERVER"]),
             "--model", self.model_dir, "--grpc_port=0", "--metrics_port=0",
             "--http_port=0", "--ready_file=" + ready, "--expert_parallel"] + self.flags,
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self._wait_ready(ready, timeout)
        return self

    def _wait_ready(self, ready, timeout):
        import json
        deadline = time.monotonic() + timeout
        while not os.path.exists(ready):
            if self.proc.poll() is not None:
                raise RuntimeError("mpirun exited with %d:\n%s" % (self.proc.returncode,
                                                                   self.read_log()))
            if time.monotonic() > deadline:
                raise RuntimeError("not ready after %ds:\n%s" % (timeout, self.read_log()))
            time.sleep(0.05)
        with open(ready) as f:
            ports = json.load(f)
        self.grpc_port = ports["grpc_port"]
        self.metrics_port = ports["metrics_port"]
        self.http_port = ports["http_port"]
        self.target = "127.0.0.1:%d" % self.grpc_port

    def rank_pid(self, rank):
        """The pid of the rank (a child of mpirun with its rank in the environment)."""
        with open("/proc/%d/task/%d/children" % (self.proc.pid, self.proc.pid)) as f:
            children = [int(p) for p in f.read().split()]
        for pid in children:
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
            if b"OMPI_COMM_WORLD_RANK=%d" % rank in env:
                return pid
        raise RuntimeError("no rank %d among %s" % (rank, children))

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Sends `sig` to rank 0 and returns mpirun's exit status."""
        try:
            if self.proc.poll() is None:
                os.kill(self.rank_pid(0), sig)
            return self.proc.wait(timeout=timeout)
        except (subprocess.TimeoutExpired, RuntimeError, OSError):
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            raise
        finally:
            self.log.close()
            shutil.rmtree(self.session, ignore_errors=True)


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


def preempting_request(i):
    # As concurrency_test: 12 sequences of up to 150 tokens in a 256-token
    # cache preempt one another; greedy and seeded sampling alike.
    return dict(input_ids=[1 + i, 2, 3, 4 + i], max_tokens=100 + 4 * i, ignore_eos=True,
                temperature=0 if i % 2 else 0.9, seed=11 * i, top_k=0 if i % 3 else 20)


class ExpertParallelServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with harness.Server(TINY) as single:
            cls.want = run_all(single.target)
            cls.want_concurrent = run_concurrent(single.target)
        with harness.Server(TINY, "--max_running_sequences=1") as single, \
                Client(single.target, timeout=120) as c:
            cls.alone = [c.generate_text(**preempting_request(i)).token_ids
                         for i in range(12)]

    def test_alone_the_flag_changes_nothing(self):
        with harness.Server(TINY, "--expert_parallel") as server:
            self.assertEqual(run_all(server.target), self.want)
            self.assertEqual(server.stop(), 0)

    def test_preemption_releases_reach_the_follower(self):
        server = MpiServer(TINY, "--kv_cache_tokens=256", "--kv_block_size=16",
                           "--max_running_sequences=12",
                           "--expert_parallel_timeout=2s").start()
        try:
            # Idle for longer than a collective may wait: the heartbeat
            # keeps the follower from timing out.
            time.sleep(5)
            with Client(server.target, timeout=120) as c:
                with ThreadPoolExecutor(12) as pool:
                    together = list(pool.map(
                        lambda i: c.generate_text(**preempting_request(i)).token_ids,
                        range(12)))
            self.assertGreater(server.metric("ringmoe_preemptions_total"), 0)
            self.assertEqual(together, self.alone)
            # The caches still agree afterwards.
            self.assertEqual(run_all(server.target), self.want)
        except Exception:
            print(server.read_log())
            raise
        finally:
            rc = server.stop()
        self.assertEqual(rc, 0, server.read_log())

    def test_same_tokens_and_logits_as_one_process_then_sigterm(self):
        server = MpiServer(TINY).start()
        try:
            got = run_all(server.target)
            for (ids, logits), (want_ids, want_logits) in zip(got, self.want):
                self.assertEqual(ids, want_ids)
                self.assertEqual(logits, want_logits)
            together, after = run_concurrent(server.target)
            self.assertEqual(together, self.want_concurrent[0])
            self.assertEqual(after, self.want_concurrent[1])
            self.assertEqual(after, self.want)
        except Exception:
            print(server.read_log())
            raise
        finally:
            rc = server.stop()
        log = server.read_log()
        self.assertEqual(rc, 0, log)
        self.assertIn("ringmoe_server: stopped", log)
        self.assertIn("expert parallel over 2 ranks", log)

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
            server.log.close()
            shutil.rmtree(server.session, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
