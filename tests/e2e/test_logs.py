"""Complete logs under load: `xlctl logs` run right after `xlctl wait`
returns shows every line the ranks printed, however busy the machine.

LogsUnderLoad runs the quick start's own flow (`xl-scheduler --dev` with two
agents, deploy/examples/ddp-demo.yaml as 2 nodes x 2 ranks, `xlctl wait`,
`xlctl logs`) several times with a cold page cache (as root) and both cores
busy. A second test restarts both agents with kill -9 while the ranks finish,
so their exits reach the scheduler in the agents' Registers ahead of the
output they send again: the order in which the quick start's empty logs
were possible.

XL_LOGS_RUNS sets how many runs each test makes (default 3)."""

import os
import signal
import subprocess
import time
import unittest

from cluster import Cluster, DevCluster, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.normpath(os.path.join(HERE, "..", "..", "deploy", "examples"))
PY = "/usr/bin/python3"
RUNS = int(os.environ.get("XL_LOGS_RUNS", "3"))

# Rank 0 of deploy/examples/train.py prints these for --steps 50.
STEPS = [1, 10, 20, 30, 40, 50]


def missing_lines(logs, world):
    """The lines rank 0 of train.py prints that `logs` lacks."""
    want = [f"ddp: world_size={world} "] + [f"step {s:4d}  loss " for s in STEPS] + [
        "done: 50 steps", "weights identical across ranks"]
    return [w for w in want if w not in logs]


class Load:
    """Both cores busy, and (as root) the page cache dropped first."""

    def __enter__(self):
        subprocess.run(["sync"], check=False)
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
        except OSError:
            pass  # not root: a warm cache still loads the cores
        self.procs = [subprocess.Popen(["/bin/sh", "-c", "while :; do :; done"],
                                       start_new_session=True)
                      for _ in range(os.cpu_count() or 2)]
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


class LogsUnderLoad(unittest.TestCase):
    def test_the_quick_start_flow_shows_every_line_under_load(self):
        for run in range(RUNS):
            with Load():
                c = DevCluster(agents=2, cwd=EXAMPLES)
                try:
                    c.wait_ready(2)
                    job = c.xlctl("submit", "ddp-demo.yaml").stdout.strip()
                    self.assertTrue(job, "submit printed no job id")
                    waited = c.xlctl("wait", job, "--timeout", "600s")
                    logs = c.xlctl("logs", job)
                    self.assertEqual(logs.returncode, 0, logs.stderr)
                    missing = missing_lines(logs.stdout, 4)
                    self.assertFalse(
                        missing,
                        f"run {run + 1}: job {job} (wait exited {waited.returncode}) lacks "
                        f"{missing} in xlctl logs:\n{logs.stdout}\n"
                        f"{c.xlctl('get', job).stdout}\n{c.read_log()[-4000:]}")
                finally:
                    c.close()

    def test_exits_that_come_back_ahead_of_their_output_wait_for_it(self):
        # Both agents die (kill -9) while the ranks finish; the shims keep
        # the ranks, which write 6 MB more each (more than an agent queues)
        # and their last words, and exit with no agent to read them. The
        # agents come back 0.2 s apart: each Register reports its ranks'
        # exits, and the output follows it for a while. No Register may end
        # the job meanwhile, and no output may be dropped.
        # Down for longer than the usual test timeout of 2 s, not lost.
        c = Cluster(agents=2, gpus=0, heartbeat_timeout=10)
        try:
            train = os.path.join(EXAMPLES, "train.py")
            blob = "head -c 6000000 /dev/zero | tr '\\\\0' x | fold -w 99"
            for run in range(RUNS):
                job = c.submit_file(
                    "name: ddp\n"
                    f'command: ["/bin/sh", "-c", "{PY} {train} --steps 50 && sleep 1 && '
                    f'{blob} && echo last words of rank $RANK"]\n'
                    f"working_dir: {c.tmp}\n"
                    'env: {PYTHONUNBUFFERED: "1", OMP_NUM_THREADS: "1"}\n'
                    "resources: {nodes: 2, ranks_per_node: 2, gpus_per_node: 0}\n"
                    "time_limit: 300s\n", name=f"ddp-{run}.yaml")
                wait_until("rank 0's last training line",
                           lambda: "weights identical" in c.xlctl("logs", job, "--rank", "0").stdout,
                           120)
                for name in ("node-a", "node-b"):
                    c.kill(name)
                time.sleep(2.5)  # the ranks end meanwhile
                for name in ("node-a", "node-b"):
                    c.start_agent(name, gpus=0)
                    time.sleep(0.2)
                waited = c.xlctl("wait", job, "--timeout", "120", check=False)
                logs = c.xlctl("logs", job).stdout
                self.assertEqual(waited.returncode, 0, f"{c.job(job)}\n{logs[-2000:]}")
                missing = missing_lines(logs, 4) + [
                    f"rank {r}" for r in range(4) if f"last words of rank {r}\n" not in logs]
                self.assertFalse(missing, f"run {run + 1}: job {job} lacks {missing}; "
                                          f"the scheduler said:\n{c.log_of('scheduler')[-3000:]}")
        finally:
            c.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
