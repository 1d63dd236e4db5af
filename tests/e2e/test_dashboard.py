"""The web dashboard in a real browser (Debian's Chromium, driven by
playwright-core from npm) against a real dev cluster with TLS and tokens:
the pages render, their numbers equal `xlctl -o json`, a training job's
chart grows while it trains. Screenshots are kept in
<build>/test-artifacts/dashboard/. The JSON API's own rules (a token is
needed, only read methods, errors as JSON) are checked with urllib."""

import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import textwrap
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from cluster import BUILD, XLCTL, DevCluster, inventory_yaml, wait_until  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DASHBOARD = os.path.join(HERE, "dashboard")
CHROMIUM = os.environ.get("XL_CHROMIUM", "/usr/bin/chromium")


def npm_ready():
    if os.path.isdir(os.path.join(DASHBOARD, "node_modules", "playwright-core")):
        return True
    r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=DASHBOARD,
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        print(r.stdout, r.stderr, file=sys.stderr)
    return r.returncode == 0


class Dashboard(unittest.TestCase):
    def setUp(self):
        # deploy/install-deps installs both: missing, they are a failure, not a
        # skip (a test that cannot run must not pass).
        self.assertTrue(os.path.exists(CHROMIUM) and shutil.which("node"),
                        "needs Debian's chromium and node: run deploy/install-deps")
        self.assertTrue(npm_ready(), "npm ci in tests/e2e/dashboard failed")
        self.tmp = tempfile.mkdtemp(prefix="xl-dashboard-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        invs = []
        for i in range(2):
            path = os.path.join(self.tmp, f"node-{i}.yaml")
            with open(path, "w") as f:
                f.write(inventory_yaml(f"dash-{i}", gpus=2, scratch=os.path.join(self.tmp, "scratch")))
            invs += ["--agent-inventory", path]
        self.dev = DevCluster(agents=2, dir=self.tmp, args=[
            *invs, "--metrics-listen", "127.0.0.1:0",
            "--heartbeat-interval", "0.2", "--heartbeat-timeout", "3"])
        self.addCleanup(self.dev.close)
        self.env = self.dev.env
        self.read_log = self.dev.read_log
        url = wait_until("the dashboard's address", lambda: re.search(
            r"dashboard on (https://127\.0\.0\.1:\d+)/", self.read_log()), 30)
        self.url = url.group(1)
        self.ctx = ssl.create_default_context(cafile=self.env["XL_TLS_CA"])
        self.ctx.check_hostname = False

    def xlctl(self, *args):
        r = subprocess.run([XLCTL, *args], capture_output=True, text=True, env=self.env, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def post(self, method, body, token=None):
        req = urllib.request.Request(self.url + "/api/" + method, data=json.dumps(body).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
        if token:
            req.add_header("Authorization", "Bearer " + token)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=20) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def test_pages_match_xlctl_and_the_chart_grows(self):
        token = self.env["XL_TOKEN"]
        wait_until("2 nodes READY", lambda: json.loads(self.xlctl("nodes", "-o", "json")).get("nodes", [])
                   and all(n.get("state") == "READY" for n in json.loads(self.xlctl("nodes", "-o", "json"))["nodes"])
                   and len(json.loads(self.xlctl("nodes", "-o", "json"))["nodes"]) == 2, 30)
        job = os.path.join(self.tmp, "train.yaml")
        with open(job, "w") as f:
            f.write(textwrap.dedent("""\
                name: charted
                resources: {nodes: 2, ranks_per_node: 1, gpus_per_node: 0}
                env: {OMP_NUM_THREADS: "1", OPENBLAS_NUM_THREADS: "1"}
                train: {input_dim: 32, hidden_dim: 256, hidden_layers: 2, classes: 8,
                        batch_per_rank: 64, steps: 400000, learning_rate: 0.003,
                        metrics_every: 50, device: cpu}
                """))
        train = self.xlctl("submit", job).strip()
        wide = self.xlctl("submit", "--nodes", "3", "--gpus-per-node", "2", "--", "/bin/true").strip()
        wait_until("training metrics", lambda: json.loads(self.xlctl("get", train, "-o", "json"))
                   .get("metrics", {}).get("step"), 60)

        # The JSON API: the same message as xlctl, a token needed, reads only.
        status, got = self.post("xl.v1.JobService/GetJob", {"job_id": train}, token)
        self.assertEqual(status, 200, got)
        self.assertEqual(got["id"], train)
        self.assertEqual(got["spec"]["name"], "charted")
        status, got = self.post("xl.v1.JobService/GetJob", {"job_id": train})
        self.assertEqual((status, got["code"]), (401, "UNAUTHENTICATED"), got)
        status, got = self.post("xl.v1.JobService/CancelJob", {"job_id": train}, token)
        self.assertEqual(status, 404, got)
        status, got = self.post("xl.v1.JobService/GetJob", {"job_id": train, "bogus": 1}, token)
        self.assertEqual((status, got["code"]), (400, "INVALID_ARGUMENT"), got)
        self.assertIn("bogus", got["message"])
        self.assertEqual(json.loads(self.xlctl("get", train, "-o", "json"))["state"], "RUNNING")
        # A header gRPC could not send is refused, not passed on (it would
        # abort the scheduler).
        req = urllib.request.Request(self.url + "/api/xl.v1.AuthService/WhoAmI", data=b"{}",
                                     method="POST", headers={"X-XL-User": "a\tb"})
        with self.assertRaises(urllib.error.HTTPError) as bad:
            urllib.request.urlopen(req, context=self.ctx, timeout=20)
        self.assertEqual(bad.exception.code, 400)
        # /metrics names jobs and users: with auth on it takes a token too.
        with self.assertRaises(urllib.error.HTTPError) as denied:
            urllib.request.urlopen(self.url + "/metrics", context=self.ctx, timeout=20)
        self.assertEqual(denied.exception.code, 401)
        req = urllib.request.Request(self.url + "/metrics", headers={"Authorization": "Bearer " + token})
        with urllib.request.urlopen(req, context=self.ctx, timeout=20) as r:
            self.assertIn(f'xl_job_step{{job="{train}"', r.read().decode())
        # Another user's token scrapes the fleet's series, not the admin's
        # job's loss and step (security review F10).
        bob = self.xlctl("token", "create", "--user", "bob").strip()
        req = urllib.request.Request(self.url + "/metrics", headers={"Authorization": "Bearer " + bob})
        with urllib.request.urlopen(req, context=self.ctx, timeout=20) as r:
            body = r.read().decode()
        self.assertIn("xl_jobs{", body)
        self.assertIn("# TYPE xl_job_loss gauge", body)
        self.assertNotIn(f'job="{train}"', body)

        expect = os.path.join(self.tmp, "expect.json")
        with open(expect, "w") as f:
            json.dump({"nodes": json.loads(self.xlctl("nodes", "-o", "json")),
                       "jobs": json.loads(self.xlctl("list", "-o", "json"))}, f)
        self.assertEqual(len(json.loads(self.xlctl("list", "-o", "json"))["jobs"]), 2, wide)
        out = os.path.join(BUILD, "test-artifacts", "dashboard")
        r = subprocess.run(["node", "check.mjs", "--url", self.url, "--token", token,
                            "--expect", expect, "--job", train, "--out", out],
                           cwd=DASHBOARD, capture_output=True, text=True, timeout=180)
        print(r.stdout, r.stderr)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for png in ("login", "queue", "nodes", "job", "plan"):
            self.assertGreater(os.path.getsize(os.path.join(out, png + ".png")), 10000, png)


if __name__ == "__main__":
    unittest.main()
