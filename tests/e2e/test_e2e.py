"""End to end on loopback: xl-scheduler (SQLite file) + xl-agent processes +
xlctl, all real binaries. Run by ctest; XL_BUILD_DIR points at the build."""

import json
import os
import signal
import sys
import textwrap
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from cluster import Cluster, wait_until  # noqa: E402

PY = "/usr/bin/python3"


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class E2E(unittest.TestCase):
    agents = 3

    def setUp(self):
        self.c = Cluster(agents=self.agents)
        self.addCleanup(self.c.close)

    def script(self, name, body):
        path = os.path.join(self.c.tmp, name)
        with open(path, "w") as f:
            f.write(textwrap.dedent(body))
        return path

    def job_yaml(self, script, nodes=2, ranks=2, gpus=0, retries=0, extra=""):
        return textwrap.dedent(f"""\
            name: e2e
            command: ["{PY}", "{script}"]
            working_dir: {self.c.tmp}
            env: {{PYTHONUNBUFFERED: "1"}}
            resources:
              nodes: {nodes}
              ranks_per_node: {ranks}
              gpus_per_node: {gpus}
            max_retries: {retries}
            grace_period: 2s
            """) + extra


class JobLifecycle(E2E):
    def test_two_node_job_sees_torchrun_environment_and_succeeds(self):
        out = os.path.join(self.c.tmp, "env")
        os.makedirs(out)
        s = self.script("env.py", f"""
            import json, os
            keys = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                    "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "XL_JOB_ID",
                    "XL_ATTEMPT", "XL_CHECKPOINT_DIR", "XL_NODE"]
            env = {{k: os.environ.get(k) for k in keys}}
            with open(os.path.join("{out}", os.environ["RANK"]), "w") as f:
                json.dump(env, f)
            print("hello from rank", os.environ["RANK"])
            """)
        job_id = self.c.submit_file(self.job_yaml(s, nodes=2, ranks=2, gpus=2))
        r = self.c.xlctl("wait", job_id, "--timeout", "60", check=False)
        self.assertEqual(r.returncode, 0, self.c.job(job_id))
        job = self.c.job(job_id)
        self.assertEqual(job["state"], "SUCCEEDED")
        envs = {}
        for rank in range(4):
            with open(os.path.join(out, str(rank))) as f:
                envs[rank] = json.load(f)
        self.assertEqual(sorted(int(e["RANK"]) for e in envs.values()), [0, 1, 2, 3])
        nodes = {}
        for rank, e in envs.items():
            self.assertEqual(e["WORLD_SIZE"], "4")
            self.assertEqual(e["LOCAL_WORLD_SIZE"], "2")
            self.assertEqual(e["LOCAL_RANK"], str(rank % 2))
            self.assertEqual(e["GROUP_RANK"], str(rank // 2))
            self.assertEqual(e["MASTER_ADDR"], "127.0.0.1")
            self.assertEqual(e["MASTER_PORT"], str(job["master_port"]))
            self.assertEqual(e["CUDA_VISIBLE_DEVICES"], "0,1")
            self.assertEqual(e["XL_JOB_ID"], job_id)
            self.assertTrue(e["XL_CHECKPOINT_DIR"])
            nodes.setdefault(e["GROUP_RANK"], set()).add(e["XL_NODE"])
        # Each group rank is one node; the two nodes differ.
        self.assertEqual(len(nodes), 2)
        self.assertNotEqual(nodes["0"], nodes["1"])
        logs = self.c.xlctl("logs", job_id).stdout
        for rank in range(4):
            self.assertIn(f"hello from rank {rank}", logs)
        self.assertIn("hello from rank 3", self.c.xlctl("logs", job_id, "--rank", "3").stdout)
        self.assertNotIn("hello from rank 2", self.c.xlctl("logs", job_id, "--rank", "3").stdout)

    def test_rank_exiting_1_fails_the_job(self):
        s = self.script("fail.py", """
            import os, sys, time
            if os.environ["RANK"] == "1":
                sys.exit(1)
            time.sleep(30)
            """)
        job_id = self.c.submit_file(self.job_yaml(s, nodes=2, ranks=1))
        r = self.c.xlctl("wait", job_id, "--timeout", "60", check=False)
        self.assertNotEqual(r.returncode, 0)
        job = self.c.job(job_id)
        self.assertEqual(job["state"], "FAILED")
        self.assertIn("exited with code 1", job["reason"])
        self.assertEqual(job.get("exit_code"), 1)
        # The other rank was stopped, so every GPU and node is free again.
        wait_until("nodes idle", lambda: all(not n.get("usage", {}).get("job_ids") for n in self.c.nodes()))

    def test_cancel_leaves_no_process_behind(self):
        pids = os.path.join(self.c.tmp, "pids")
        os.makedirs(pids)
        s = self.script("sleepy.py", f"""
            import os, subprocess, time
            child = subprocess.Popen(["sleep", "300"])
            with open(os.path.join("{pids}", os.environ["RANK"]), "w") as f:
                f.write(f"{{os.getpid()}} {{child.pid}}")
            time.sleep(300)
            """)
        job_id = self.c.submit_file(self.job_yaml(s, nodes=2, ranks=2))
        self.c.wait_state(job_id, "RUNNING")
        wait_until("4 pid files", lambda: len(os.listdir(pids)) == 4)
        all_pids = []
        for name in os.listdir(pids):
            with open(os.path.join(pids, name)) as f:
                all_pids += [int(p) for p in f.read().split()]
        self.assertTrue(all(alive(p) for p in all_pids))
        self.c.xlctl("cancel", job_id)
        self.assertEqual(self.c.job(job_id)["state"], "CANCELLED")
        wait_until("every rank and child gone", lambda: not any(alive(p) for p in all_pids), 20)
        wait_until("nodes idle", lambda: all(not n.get("usage", {}).get("job_ids") for n in self.c.nodes()))

    def test_job_larger_than_the_cluster_stays_pending_with_a_reason(self):
        s = self.script("noop.py", "pass\n")
        job_id = self.c.submit_file(self.job_yaml(s, nodes=5, ranks=1, gpus=2))
        job = wait_until("a reason", lambda: (lambda j: j if "needs" in j.get("reason", "") else None)(self.c.job(job_id)))
        self.assertEqual(job["state"], "PENDING")
        self.assertIn("5 nodes", job["reason"])
        self.assertIn("only 3 such nodes", job["reason"])
        # ...and it does not block a job that fits.
        small = self.c.submit_file(self.job_yaml(s, nodes=1, ranks=1, gpus=1), "small.yaml")
        self.assertEqual(self.c.xlctl("wait", small, "--timeout", "60", check=False).returncode, 0)
        self.assertEqual(self.c.job(job_id)["state"], "PENDING")

    def test_malformed_job_file_is_rejected_and_nothing_is_stored(self):
        before = len(self.c.json("list").get("jobs", []))
        path = os.path.join(self.c.tmp, "bad.yaml")
        with open(path, "w") as f:
            f.write("name: x\ncommand: [/bin/true]\nresources: {nodez: 2}\n")
        r = self.c.xlctl("submit", path, check=False)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("nodez", r.stderr)
        with open(path, "w") as f:
            f.write("name: x\ncommand: [/bin/true]\nresources: {nodes: -3}\n")
        r = self.c.xlctl("submit", path, check=False)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("resources.nodes", r.stderr)
        self.assertEqual(len(self.c.json("list").get("jobs", [])), before)

    def test_a_slurm_batch_script_runs_unchanged_and_what_it_cannot_is_refused(self):
        s = self.script("train.sbatch", """\
            #!/bin/bash
            #SBATCH --job-name=slurmy
            #SBATCH --nodes=2
            #SBATCH --ntasks-per-node=2
            #SBATCH --time=00:05:00
            #SBATCH --output=slurm-%j.out
            echo "task $SLURM_PROCID of $SLURM_NTASKS node $SLURM_NODEID local $SLURM_LOCALID arg $1"
            srun -n 4 --label bash -c 'echo "srun ran as $SLURM_PROCID in $SLURM_SUBMIT_DIR"'
            """)
        # It waits for another job, and its file is gone before it starts:
        # the script submitted runs (as sbatch copies it), not the file.
        first = self.c.xlctl("submit", "--", "/bin/sleep", "2").stdout.strip()
        job_id = self.c.xlctl("submit", "--sbatch", s, "--after-ok", first, "--", "hello").stdout.strip()
        os.remove(s)
        r = self.c.xlctl("wait", job_id, "--timeout", "60s", check=False)
        logs = self.c.xlctl("logs", job_id).stdout
        job = self.c.job(job_id)
        self.assertEqual(r.returncode, 0, f"{job}\n{logs}")
        self.assertEqual(job["spec"]["name"], "slurmy")
        self.assertEqual(job["spec"]["time_limit"], "300s")
        for rank in range(4):
            self.assertIn(f"task {rank} of 4 node {rank // 2} local {rank % 2} arg hello", logs)
            self.assertIn(f"srun ran as {rank} in {self.c.tmp}", logs)
        self.assertEqual(self.c.job(first)["state"], "SUCCEEDED")
        # What xl cannot honour: refused before anything is stored, the line named.
        before = len(self.c.json("list").get("jobs", []))
        bad = self.script("array.sbatch", """\
            #!/bin/bash
            #SBATCH --nodes=1
            #SBATCH --array=0-9
            echo never
            """)
        r = self.c.xlctl("submit", "--sbatch", bad, check=False)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("array.sbatch:3: `#SBATCH --array=0-9`: job arrays are not supported", r.stderr)
        self.assertEqual(len(self.c.json("list").get("jobs", [])), before)


class Planning(E2E):
    def test_plan_against_the_fleet_and_a_job_sized_from_its_model(self):
        plan = self.c.json("plan", "--params", "7.5e9", "--zero", "3", "--gpus", "64")
        fleet = [g for g in plan["gpus_that_fit"] if g.get("in_fleet")]
        self.assertEqual(len(fleet), 1, plan["gpus_that_fit"])
        self.assertEqual(fleet[0]["in_fleet"], 6)  # 3 agents x 2 GPUs
        self.assertIn("1.9 GB", self.c.xlctl("plan", "--params", "7.5e9", "--zero", "3",
                                             "--gpus", "64").stdout)
        # A job that carries its model: the scheduler derives its resources.
        job_id = self.c.submit_file(textwrap.dedent(f"""\
            name: sized
            command: ["/bin/true"]
            working_dir: {self.c.tmp}
            model: {{parameters: 1.0e9, sharding: ZERO_3, gpus: 4, gpus_per_node: 2}}
            """))
        job = self.c.job(job_id)
        res = job["spec"]["resources"]
        self.assertEqual(res["gpus_per_node"], 2)
        self.assertEqual(res["nodes"], 2)
        self.assertEqual(int(res["min_gpu_memory_bytes"]),
                         int(job["plan"]["memory_per_gpu"]["total_bytes"]))
        self.assertEqual(self.c.xlctl("wait", job_id, "--timeout", "60", check=False).returncode, 0)
        # One that fits on no GPU of the fleet is refused with the numbers.
        path = os.path.join(self.c.tmp, "huge.yaml")
        with open(path, "w") as f:
            f.write("name: huge\ncommand: [/bin/true]\nmodel: {parameters: 70e9}\n")
        r = self.c.xlctl("submit", path, check=False)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("model: needs", r.stderr)


class NodeLoss(E2E):
    agents = 2

    def test_killing_an_agent_requeues_its_job_onto_the_others(self):
        s = self.script("attempt.py", """
            import os, time
            if os.environ["XL_ATTEMPT"] == "1":
                time.sleep(300)
            print("attempt", os.environ["XL_ATTEMPT"], "on", os.environ["XL_NODE"])
            """)
        job_id = self.c.submit_file(self.job_yaml(s, nodes=1, ranks=1, retries=1))
        job = self.c.wait_state(job_id, "RUNNING")
        first = job["allocations"][0]["node"]
        self.c.kill(first)
        job = self.c.wait_state(job_id, "SUCCEEDED", "FAILED", timeout=60)
        self.assertEqual(job["state"], "SUCCEEDED", job)
        self.assertEqual(job["attempt"], 2)
        self.assertNotEqual(job["allocations"][0]["node"], first)
        lost = [n for n in self.c.nodes() if n["name"] == first][0]
        self.assertEqual(lost["state"], "LOST")
        self.assertIn("attempt 2 on", self.c.xlctl("logs", job_id).stdout)

    def test_a_cut_off_agent_stops_its_ranks_when_its_lease_runs_out(self):
        # The scheduler stops answering (SIGSTOP: a partition from every
        # agent's side). Each agent's lease (the heartbeat timeout, 2 s here)
        # runs out and it stops its ranks itself, SIGTERM then SIGKILL.
        pidfile = os.path.join(self.c.tmp, "rank.pid")
        s = self.script("lease.py", f"""
            import os, time
            open({pidfile!r}, "w").write(str(os.getpid()))
            time.sleep(300)
            """)
        job_id = self.c.submit_file(self.job_yaml(s, nodes=1, ranks=1, retries=1))
        self.c.wait_state(job_id, "RUNNING")
        wait_until("the rank's pid file", lambda: os.path.exists(pidfile), 20)
        with open(pidfile) as f:
            pid = int(f.read())
        sched = self.c.procs["scheduler"]
        os.killpg(sched.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            def gone():
                try:
                    os.kill(pid, 0)
                    return False
                except ProcessLookupError:
                    return True
            # lease 2 s + grace 10 s (SIGTERM ends a sleeping python at once)
            wait_until("the rank stopped by its agent's lease", gone, 15)
            self.assertGreaterEqual(time.monotonic() - t0, 1.5)
        finally:
            os.killpg(sched.pid, signal.SIGCONT)
        # The scheduler resumes: its own pause loses no node, the agents
        # register again and report the exit, and the job runs again.
        job = self.c.wait_state(job_id, "PENDING", "SCHEDULED", "RUNNING", timeout=30)
        wait_until("attempt 2", lambda: self.c.job(job_id)["attempt"] == 2, 30)
        self.assertEqual([n["state"] for n in self.c.nodes()], ["READY", "READY"])


class PyTorchDDP(E2E):
    agents = 2

    def test_unchanged_ddp_script_runs_as_a_two_node_job(self):
        here = os.path.dirname(os.path.abspath(__file__))
        train = os.path.join(here, "..", "..", "deploy", "examples", "train.py")
        job = textwrap.dedent(f"""\
            name: ddp
            command: ["{PY}", "{os.path.abspath(train)}", "--steps", "5"]
            working_dir: {self.c.tmp}
            env: {{PYTHONUNBUFFERED: "1", OMP_NUM_THREADS: "1"}}
            resources: {{nodes: 2, ranks_per_node: 1, gpus_per_node: 0}}
            time_limit: 300s
            """)
        job_id = self.c.submit_file(job)
        r = self.c.xlctl("wait", job_id, "--timeout", "240", check=False)
        logs = self.c.xlctl("logs", job_id).stdout
        self.assertEqual(r.returncode, 0, f"{self.c.job(job_id)}\n{logs}")
        self.assertIn("world_size=2", logs)
        self.assertIn("weights identical across ranks", logs)


if __name__ == "__main__":
    unittest.main(verbosity=2)
