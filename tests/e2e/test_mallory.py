"""What an ordinary user with a valid token cannot do to other teams, end to
end (security review 2026-12): `mallory`, on a secure dev cluster
(xl-scheduler --dev: TLS, tokens, two agents), cannot submit into a queue
that does not admit her, above her priority cap, or preempt `alice`'s job;
her job cannot grow the scheduler's database past its output budget by
writing metrics and logs as fast as it can for 60 s (the database's size is
measured before and after), and cannot hold more rendezvous waiters than
the cap (4 x world size, at least 16)."""

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from cluster import XLCTL, DevCluster, inventory_yaml, wait_until  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PY = "/usr/bin/python3"
BUDGET = 4 << 20  # --max-output-bytes-per-job
FLOOD_S = int(os.environ.get("XL_MALLORY_FLOOD_S", "60"))

# Mallory's rank: first as many rendezvous Gets on keys no one sets as it
# can open at once (24, above the cap of 16 for one rank), then metrics and
# log lines as fast as Python writes them. Its counts go to MALLORY_OUT.
RANK = textwrap.dedent("""\
    import json, os, sys, threading, time
    sys.path.insert(0, os.environ["MALLORY_STUBS"])
    import grpc
    from google.protobuf import duration_pb2
    from xl.v1 import rendezvous_pb2 as pb, rendezvous_pb2_grpc as rpc
    with open(os.environ["XL_TLS_CA"], "rb") as f:
        creds = grpc.ssl_channel_credentials(f.read())
    stub = rpc.RendezvousServiceStub(grpc.secure_channel(os.environ["XL_SCHEDULER"], creds))
    scope = pb.RendezvousScope(job_id=os.environ["XL_JOB_ID"], attempt=int(os.environ["XL_ATTEMPT"]),
                               token=os.environ["XL_RENDEZVOUS_TOKEN"])
    codes = []
    def get(i):
        req = pb.RendezvousGetRequest(scope=scope, keys=[f"never-{i}"],
                                      timeout=duration_pb2.Duration(seconds=8))
        try:
            stub.Get(req, timeout=30)
            codes.append("OK")
        except grpc.RpcError as e:
            codes.append(e.code().name)
    threads = [threading.Thread(target=get, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    metrics = os.fdopen(int(os.environ["XL_METRICS_FD"]), "w", buffering=1 << 16)
    line = "x" * 200
    step = written = 0
    end = time.monotonic() + float(os.environ["MALLORY_FLOOD_S"])
    while time.monotonic() < end:
        for _ in range(100):
            step += 1
            m = json.dumps({"step": step, "loss": 1.0 / step, "samples_per_second": 1e6})
            metrics.write(m + "\\n")
            written += len(m) + 1
        sys.stdout.write(line + "\\n")
        written += len(line) + 1
    metrics.flush()
    sys.stdout.flush()
    with open(os.environ["MALLORY_OUT"], "w") as f:
        json.dump({"codes": codes, "steps": step, "bytes": written}, f)
    """)


class Mallory(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="xl-mallory-")
        os.chmod(self.tmp, 0o755)
        self.addCleanup(shutil.rmtree, self.tmp, True)
        invs = []
        for i in range(2):
            path = os.path.join(self.tmp, f"node-{i}.yaml")
            with open(path, "w") as f:
                f.write(inventory_yaml(f"m-{i}", gpus=2, scratch=os.path.join(self.tmp, "scratch")))
            invs += ["--agent-inventory", path]
        env = dict(os.environ, TMPDIR=self.tmp)
        self.dev = DevCluster(agents=2, dir=self.tmp, env=env, args=[
            *invs, "--max-output-bytes-per-job", str(BUDGET)])
        self.addCleanup(self.dev.close)
        self.dev.wait_ready(2)
        dbs = glob.glob(os.path.join(self.tmp, "xl-dev-*", "xl.db"))
        self.assertEqual(len(dbs), 1, dbs)
        self.db = dbs[0]
        self.stubs = os.path.join(self.tmp, "stubs")
        os.makedirs(self.stubs)
        subprocess.run([PY, "-m", "grpc_tools.protoc", f"-I{ROOT}/proto", f"--python_out={self.stubs}",
                        f"--grpc_python_out={self.stubs}", f"{ROOT}/proto/xl/v1/rendezvous.proto"],
                       check=True)

    def xlctl(self, *args, token=None, check=True):
        env = dict(self.dev.env)
        if token:
            env["XL_TOKEN"] = token
        r = subprocess.run([XLCTL, *args], capture_output=True, text=True, env=env, cwd=self.tmp,
                           timeout=60)
        if check and r.returncode != 0:
            raise AssertionError(f"xlctl {' '.join(args)} exited {r.returncode}: {r.stderr}")
        return r

    def job(self, job_id, token):
        return json.loads(self.xlctl("get", job_id, "-o", "json", token=token).stdout)

    def test_mallory_cannot_reach_other_teams(self):
        alice = self.xlctl("token", "create", "--user", "alice").stdout.strip()
        mallory = self.xlctl("token", "create", "--user", "mallory").stdout.strip()
        self.xlctl("queue", "set", "alices", "--admit-user", "alice", "--max-priority", "10")

        # alice's job holds every GPU of the cluster, at her queue's cap.
        held = self.xlctl("submit", "--queue", "alices", "--priority", "10", "--nodes", "2",
                          "--gpus-per-node", "2", "--ranks-per-node", "1", "--", "sleep", "600",
                          token=alice).stdout.strip()
        wait_until("alice's job RUNNING", lambda: self.job(held, alice)["state"] == "RUNNING", 60)
        before = json.loads(self.xlctl("list", "-o", "json").stdout).get("jobs", [])

        # Refused at the scheduler (PERMISSION_DENIED: exit 1), naming the
        # queue and the cap.
        refused = {
            "mallory may not submit to queue alices": ["--queue", "alices"],
            "priority: 1 is above what queue default lets its users ask for (max_priority 0": ["--priority", "1"],
            "priority: 2147483647 is above": ["--priority", "2147483647"],
        }
        for said, flags in refused.items():
            r = self.xlctl("submit", *flags, "--nodes", "2", "--gpus-per-node", "2", "--", "true",
                           token=mallory, check=False)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn(said, r.stderr)
        # Nothing of the refused submits was stored.
        after = json.loads(self.xlctl("list", "-o", "json").stdout).get("jobs", [])
        self.assertEqual(len(after), len(before))

        # What she may do: priority 0 in the default queue. It waits; alice's
        # job is not preempted for it.
        script = os.path.join(self.tmp, "mallory.py")
        with open(script, "w") as f:
            f.write(RANK)
        out = os.path.join(self.tmp, "mallory.json")
        flood = self.xlctl("submit", "--nodes", "1", "--gpus-per-node", "2", "--ranks-per-node", "1",
                           "--env", f"MALLORY_STUBS={self.stubs}", "--env", f"MALLORY_OUT={out}",
                           "--env", f"MALLORY_FLOOD_S={FLOOD_S}", "--", PY, script,
                           token=mallory).stdout.strip()
        time.sleep(3)
        self.assertEqual(self.job(flood, mallory)["state"], "PENDING")
        alices = self.job(held, alice)
        self.assertEqual(alices["state"], "RUNNING")
        self.assertEqual(int(alices.get("preemptions", 0)), 0)
        self.xlctl("cancel", held, token=alice)

        # Her job runs: rendezvous waiters, then 60 s of output flat out.
        db_before = os.path.getsize(self.db)
        wait_until("mallory's job RUNNING", lambda: self.job(flood, mallory)["state"] == "RUNNING", 60)
        wait_until("mallory's job to end", lambda: self.job(flood, mallory)["state"]
                   in ("SUCCEEDED", "FAILED"), FLOOD_S + 90, interval=1)
        done = self.job(flood, mallory)
        self.assertEqual(done["state"], "SUCCEEDED", done.get("reason"))
        with open(out) as f:
            got = json.load(f)
        # The cap: 16 waiters for a one-rank attempt; the rest refused at once.
        self.assertEqual(got["codes"].count("RESOURCE_EXHAUSTED"), 8, got["codes"])
        self.assertEqual(got["codes"].count("DEADLINE_EXCEEDED"), 16, got["codes"])
        db_grew = os.path.getsize(self.db) - db_before
        wal = os.path.getsize(self.db + "-wal") if os.path.exists(self.db + "-wal") else 0
        print(f"\nmallory wrote {got['bytes'] / 2**20:.0f} MiB ({got['steps']} metrics points) in "
              f"{FLOOD_S} s; the database file grew {db_grew / 2**20:.2f} MiB (budget "
              f"{BUDGET / 2**20:.0f} MiB), its WAL is {wal / 2**20:.2f} MiB")
        self.assertGreater(got["bytes"], 4 * BUDGET, "the flood was too slow to test the budget")
        # The budget, with room for the job's row and SQLite's page slack.
        # The WAL is SQLite's, checkpointed every 1,000 pages: its file
        # keeps its largest size, whoever wrote.
        self.assertLess(db_grew, BUDGET + (1 << 20))
        self.assertLess(wal, 16 << 20)
        metrics = json.loads(self.xlctl("metrics", flood, "-o", "json", token=mallory).stdout)
        points = metrics.get("points", [])
        self.assertEqual(points[-1]["step"], str(got["steps"]), "the latest point is kept")


if __name__ == "__main__":
    unittest.main()
