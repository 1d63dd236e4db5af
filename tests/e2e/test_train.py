"""xl-train through the scheduler, on loopback: a 2-node x 2-rank `train`
job (CPU, Gloo, rendezvous through the scheduler) ends SUCCEEDED with its
metrics in `xlctl get`; killing the node of rank 0 mid-run requeues the job
and it resumes on other nodes (whose scratch directories differ) from its
shared checkpoint_dir, not from step 0; a rank frozen with SIGSTOP makes
every rank exit within train.collective_timeout and the job resumes; an
elastic job started on the
one node there is grows onto a second when it joins, and resumes there from
its checkpoint with the larger WORLD_SIZE; batch_per_rank: auto is sized
from the job's memory per node (and refused at submit without one)."""

import os
import signal
import sys
import textwrap
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from cluster import Cluster, rank_processes, wait_until  # noqa: E402


def train_job(steps, nodes=2, ranks=2, hidden=64, every=50, retries=0, name="train",
              checkpoint_dir=None, collective_timeout=None):
    # nodes: a number, or "{min: 1, max: 2}" for an elastic job
    extra = f"checkpoint_dir: {checkpoint_dir}\n" if checkpoint_dir else ""
    return extra + textwrap.dedent(f"""\
        name: {name}
        resources: {{nodes: {nodes}, ranks_per_node: {ranks}, gpus_per_node: 0}}
        max_retries: {retries}
        grace_period: 5s
        env: {{OMP_NUM_THREADS: "1", OPENBLAS_NUM_THREADS: "1"}}
        train:
          input_dim: 32
          hidden_dim: {hidden}
          hidden_layers: 2
          classes: 8
          batch_per_rank: 32
          steps: {steps}
          learning_rate: 0.003
          checkpoint_every: {every}
          metrics_every: 10
          device: cpu
        """) + (f"  collective_timeout: {collective_timeout}\n" if collective_timeout else "")


class Training(unittest.TestCase):
    def test_two_node_train_job_succeeds_with_metrics(self):
        c = Cluster(agents=2, gpus=0)
        self.addCleanup(c.close)
        job_id = c.submit_file(train_job(steps=300))
        r = c.xlctl("wait", job_id, "--timeout", "240s", check=False)
        logs = c.xlctl("logs", job_id).stdout
        job = c.job(job_id)
        self.assertEqual(r.returncode, 0, f"{job}\n{logs}")
        m = job.get("metrics", {})
        self.assertEqual(int(m.get("step", 0)), 300, m)
        self.assertEqual(int(m.get("total_steps", 0)), 300, m)
        self.assertLess(m["loss"], 1.0, m)  # from ln(8) = 2.08 at the start
        self.assertGreater(m["samples_per_second"], 0)
        self.assertIn("Training", c.xlctl("get", job_id).stdout)
        history = c.json("metrics", job_id).get("points", [])
        self.assertGreaterEqual(len(history), 1)

    def test_auto_batch_is_sized_from_the_jobs_memory(self):
        # batch_per_rank: auto on CPU: the scheduler hands the ranks the
        # job's memory per node, each rank fits the planner's model into its
        # share, says so, reports it, and runs inside the job's memory limit.
        # Without a memory request the job is refused at submit, storing
        # nothing.
        c = Cluster(agents=2, gpus=0)
        self.addCleanup(c.close)
        spec = train_job(steps=3, every=0).replace(
            "batch_per_rank: 32", "batch_per_rank: auto")
        path = os.path.join(c.tmp, "auto-nomem.yaml")
        with open(path, "w") as f:
            f.write(spec)
        refused = c.xlctl("submit", path, check=False)
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn("train.batch_per_rank: auto on CPU sizes the batch from the job's memory",
                      refused.stderr)
        self.assertEqual(c.json("list").get("jobs", []), [])
        job_id = c.submit_file(spec.replace(
            "gpus_per_node: 0}", "gpus_per_node: 0, memory_bytes_per_node: 1073741824}"))
        r = c.xlctl("wait", job_id, "--timeout", "240s", check=False)
        logs = c.xlctl("logs", job_id).stdout
        self.assertEqual(r.returncode, 0, f"{c.job(job_id)}\n{logs}")
        self.assertIn("batch_per_rank auto: ", logs)
        m = c.job(job_id)["metrics"]
        batch = int(m["batch_per_rank"])
        # 1 GiB over 2 ranks, less 256 MiB each, less 10%: about 170,000
        # samples of this model's ~1.5 KB; not the default 64.
        self.assertGreater(batch, 50000, m)
        self.assertLess(batch, 1 << 20, m)
        self.assertEqual(int(m["global_batch"]), 4 * batch, m)
        self.assertEqual(int(m.get("accumulation_steps", 1)), 1, m)

    def test_killed_rank0_node_resumes_elsewhere_from_a_shared_checkpoint_dir(self):
        # Each node's scratch is its own; the job's checkpoint_dir is a
        # directory all three reach (a shared filesystem).
        c = Cluster(agents=3, gpus=0, shared_scratch=False)
        self.addCleanup(c.close)
        steps = 3000
        shared = os.path.join(c.tmp, "shared")
        job_id = c.submit_file(train_job(steps=steps, nodes=2, ranks=2, hidden=256, every=100,
                                         retries=1, name="resume",
                                         checkpoint_dir=shared + "/ckpt/{job}"))
        # Let it pass a few checkpoints, then take the node of rank 0 away.
        job = wait_until("step >= 400", lambda: (lambda j: j if int(j.get("metrics", {}).get("step", 0)) >= 400 else None)(c.job(job_id)), 180)
        self.assertEqual(job["state"], "RUNNING")
        victim = job["allocations"][0]["node"]
        self.assertIn(0, [int(r) for r in job["allocations"][0]["ranks"]], job)
        self.assertTrue(os.listdir(os.path.join(shared, "ckpt", job_id)))
        c.kill(victim)
        r = c.xlctl("wait", job_id, "--timeout", "300s", check=False)
        job = c.job(job_id)
        logs = c.xlctl("logs", job_id).stdout
        self.assertEqual(r.returncode, 0, f"{job}\n{logs[-3000:]}")
        self.assertEqual(job["attempt"], 2)
        self.assertNotIn(victim, [a["node"] for a in job["allocations"]])
        m = job["metrics"]
        self.assertEqual(int(m["step"]), steps)
        resumed = int(m.get("resumed_from_step", 0))
        self.assertGreaterEqual(resumed, 400, m)  # not from step 0
        self.assertLess(resumed, steps)

    def test_a_frozen_rank_makes_every_rank_exit_and_the_job_resumes(self):
        # Rank 1 frozen (SIGSTOP) in the middle of training: rank 0's
        # all-reduce times out after train.collective_timeout, the attempt
        # fails, the agents stop the rest (the frozen one by SIGKILL after
        # the grace), and attempt 2 resumes from the last checkpoint.
        c = Cluster(agents=2, gpus=0)
        self.addCleanup(c.close)
        job_id = c.submit_file(train_job(steps=20000, nodes=2, ranks=1, hidden=256, every=100,
                                         retries=1, name="frozen", collective_timeout="5s"))
        wait_until("step >= 300", lambda: (lambda j: j if int(j.get("metrics", {}).get("step", 0)) >= 300 else None)(c.job(job_id)), 180)

        def ranks():
            return {rank: pid for pid, job, attempt, rank in rank_processes("xl-train")
                    if job == job_id and attempt == 1}
        old = wait_until("both ranks", lambda: (lambda r: r if len(r) == 2 else None)(ranks()), 10)
        frozen = time.monotonic()
        os.kill(old[1], signal.SIGSTOP)
        wait_until("every rank of attempt 1 gone", lambda: not ranks(), 60, interval=0.1)
        gone = time.monotonic() - frozen
        # 5 s collective timeout + the 5 s grace of the frozen rank + a
        # heartbeat, with room for a slow machine.
        self.assertLess(gone, 5 + 5 + 8, gone)
        print(f"\nfrozen rank: every rank of the attempt gone {gone:.1f}s after SIGSTOP", file=sys.stderr)
        r = c.xlctl("wait", job_id, "--timeout", "300s", check=False)
        job = c.job(job_id)
        logs = c.xlctl("logs", job_id).stdout
        self.assertEqual(r.returncode, 0, f"{job}\n{logs[-3000:]}")
        self.assertEqual(job["attempt"], 2)
        self.assertIn("Read timeout", logs)
        self.assertGreaterEqual(int(job["metrics"].get("resumed_from_step", 0)), 300, job["metrics"])

    def test_elastic_job_grows_when_a_node_joins_and_resumes(self):
        c = Cluster(agents=1, gpus=0, scheduler_args=["--elastic-grow-after", "2s"])
        self.addCleanup(c.close)
        steps = 3000  # about 3 ms a step alone: ~9 s, long enough to grow at 2 s
        job_id = c.submit_file(train_job(steps=steps, nodes="{min: 1, max: 2}", ranks=1,
                                         hidden=1024, every=100, name="elastic"))
        job = wait_until("step >= 200", lambda: (lambda j: j if int(j.get("metrics", {}).get("step", 0)) >= 200 else None)(c.job(job_id)), 180)
        self.assertEqual(job["world_size"], 1, job)
        self.assertIn("1-2 (elastic, running on 1)", c.xlctl("get", job_id).stdout)
        c.start_agent("node-b", gpus=0)
        c.wait_nodes(2)
        grown = wait_until("the job on 2 nodes", lambda: (lambda j: j if j.get("state") == "RUNNING" and len(j.get("allocations", [])) == 2 else None)(c.job(job_id)), 120)
        self.assertEqual(grown["attempt"], 2, grown)
        self.assertEqual(grown["world_size"], 2, grown)
        self.assertEqual(grown.get("resizes"), 1, grown)
        self.assertEqual(grown.get("retries_used", 0), 0, grown)
        r = c.xlctl("wait", job_id, "--timeout", "300s", check=False)
        job = c.job(job_id)
        logs = c.xlctl("logs", job_id).stdout
        self.assertEqual(r.returncode, 0, f"{job}\n{logs[-3000:]}")
        m = job["metrics"]
        self.assertEqual(int(m["step"]), steps)
        resumed = int(m.get("resumed_from_step", 0))
        self.assertGreaterEqual(resumed, 200, m)  # not from step 0
        self.assertIn("xl-train: resuming from", logs)


if __name__ == "__main__":
    unittest.main(verbosity=2)
