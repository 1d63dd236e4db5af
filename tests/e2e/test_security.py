"""Security end to end, with the real binaries on 127.0.0.1: the secure dev
cluster (xl-scheduler --dev: TLS, node certificates, tokens), users who
cannot touch each other's jobs, tokens that expire and are revoked, xlctl
login, an agent joining with a single-use join token, a scheduler that
refuses to serve a non-loopback address without TLS, and the README's
openssl recipe for a multi-host cluster run as written."""

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import unittest

from cluster import AGENT, SCHEDULER, XLCTL, inventory_yaml, wait_until


class DevCluster:
    """xl-scheduler --dev with its own agents, credentials from --dev-env."""

    def __init__(self, agents=1):
        self.tmp = tempfile.mkdtemp(prefix="xl-e2e-sec-")
        self.config = os.path.join(self.tmp, "config")  # XDG_CONFIG_HOME
        port_file = os.path.join(self.tmp, "port")
        env_file = os.path.join(self.tmp, "xlctl.env")
        self.log_path = os.path.join(self.tmp, "scheduler.log")
        self.log = open(self.log_path, "ab")
        self.procs = []
        self.proc = subprocess.Popen(
            [SCHEDULER, "--dev", "--agents", str(agents), "--listen", "127.0.0.1:0",
             "--port-file", port_file, "--dev-env", env_file],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_until("the dev scheduler's port file", lambda: os.path.exists(port_file), 30)
        self.env = {}
        with open(env_file) as f:
            for line in f:
                key, _, value = line.strip().removeprefix("export ").partition("=")
                self.env[key] = value
        self.admin_token = self.env["XL_TOKEN"]
        self.ca = self.env["XL_TLS_CA"]
        self.address = self.env["XL_SERVER"]
        wait_until(f"{agents} dev nodes READY",
                   lambda: len([n for n in self.json("nodes").get("nodes", [])
                                if n.get("state") == "READY"]) >= agents)

    def xlctl(self, *args, token=None, check=True, stdin=None, env=None):
        e = {k: v for k, v in os.environ.items() if not k.startswith("XL_")}
        e.update(XL_SERVER=self.address, XL_TLS_CA=self.ca, XDG_CONFIG_HOME=self.config,
                 XL_TOKEN=self.admin_token if token is None else token)
        e.update(env or {})
        r = subprocess.run([XLCTL, *args], capture_output=True, text=True, env=e,
                           timeout=60, cwd=self.tmp, input=stdin)
        if check and r.returncode != 0:
            raise AssertionError(f"xlctl {' '.join(args)} exited {r.returncode}: {r.stderr}")
        return r

    def json(self, *args, token=None):
        return json.loads(self.xlctl(*args, "-o", "json", token=token).stdout or "{}")

    def token(self, *args):
        return self.xlctl("token", "create", *args).stdout.strip()

    def spawn(self, argv, log):
        with open(log, "ab") as out:
            p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        self.procs.append(p)
        return p

    def close(self):
        for p in self.procs + [self.proc]:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs + [self.proc]:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=5)
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


class Security(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = DevCluster(agents=1)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def wait_done(self, job, token):
        return wait_until(f"job {job} ends", lambda: (lambda j: j if j.get("state") in (
            "SUCCEEDED", "FAILED", "CANCELLED") else None)(self.c.json("get", job, token=token)), 60)

    def test_a_user_cannot_read_or_cancel_another_users_job(self):
        c = self.c
        alice, mallory = c.token("--user", "alice"), c.token("--user", "mallory")
        job_file = os.path.join(c.tmp, "secret.yaml")
        with open(job_file, "w") as f:
            # The job prints its own environment (its output is its own);
            # the scheduler's and agents' logs must not carry the secret.
            f.write("name: secret\ncommand: [/bin/sh, -c, 'env; sleep 30']\n"
                    "env: {SECRET_KEY: hunter2, PLAIN: plain-value}\n"
                    "secret_env: [SECRET_KEY]\n")
        job = c.xlctl("submit", job_file, token=alice).stdout.strip()
        # The caller cannot name itself: --user is ignored with a token.
        who = c.xlctl("whoami", "--user", "alice", token=mallory).stdout
        self.assertIn("mallory", who)
        r = c.xlctl("cancel", job, "--user", "alice", token=mallory, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("belongs to alice", r.stderr)
        r = c.xlctl("logs", job, token=mallory, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("belongs to alice", r.stderr)
        seen = c.xlctl("get", job, "-o", "json", token=mallory).stdout
        self.assertNotIn("hunter2", seen)
        self.assertNotIn("plain-value", seen)
        listed = c.xlctl("list", "-o", "json", token=mallory).stdout
        self.assertNotIn("hunter2", listed)
        self.assertNotIn("plain-value", listed)
        own = c.xlctl("get", job, "-o", "json", token=alice).stdout
        self.assertIn("plain-value", own)
        self.assertNotIn("hunter2", own)  # secret: not even to its owner
        self.assertEqual(c.json("get", job, token=alice)["state"] in ("PENDING", "SCHEDULED", "RUNNING"), True)
        c.xlctl("cancel", job, token=alice)
        self.assertEqual(self.wait_done(job, alice)["state"], "CANCELLED")
        with open(c.log_path, errors="replace") as f:
            self.assertNotIn("hunter2", f.read(), "a secret value reached the logs")

    def test_expired_and_revoked_tokens_are_refused(self):
        c = self.c
        short = c.token("--user", "bob", "--ttl", "1s")
        c.xlctl("whoami", token=short)
        time.sleep(1.5)
        r = c.xlctl("whoami", token=short, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("expired", r.stderr)
        carol = c.token("--user", "carol")
        c.xlctl("whoami", token=carol)
        token_id = carol.split("_")[1]
        c.xlctl("token", "revoke", token_id)
        r = c.xlctl("list", token=carol, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("revoked", r.stderr)
        listed = c.xlctl("token", "list").stdout
        self.assertIn(token_id, listed)
        self.assertNotIn(carol.split("_")[2], listed, "a token's secret was listed")
        r = c.xlctl("token", "create", "--user", "eve", token=carol, check=False)
        self.assertNotEqual(r.returncode, 0)

    def test_login_keeps_the_token_private(self):
        c = self.c
        dave = c.token("--user", "dave")
        r = c.xlctl("login", "--tls-ca", c.ca, token="", stdin=dave + "\n",
                    env={"XL_TLS_CA": ""})
        self.assertIn("as dave", r.stdout)
        path = os.path.join(c.config, "xl", "token")
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode), 0o700)
        # Later commands need neither XL_TOKEN nor XL_TLS_CA.
        r = c.xlctl("whoami", token="", env={"XL_TLS_CA": ""})
        self.assertIn("dave", r.stdout)
        os.unlink(path)
        r = c.xlctl("login", token="", stdin="xl_0000000000000000_" + "0" * 64 + "\n",
                    check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertFalse(os.path.exists(path), "a refused token was stored")

    def test_an_agent_joins_once_with_a_join_token(self):
        c = self.c
        join = c.token("--join")
        work = os.path.join(c.tmp, "work-joined")
        os.makedirs(work)
        inv = os.path.join(c.tmp, "joined.yaml")
        with open(inv, "w") as f:
            f.write(inventory_yaml("joined", gpus=0, scratch=os.path.join(c.tmp, "scratch")))
        argv = [AGENT, "--scheduler", c.address, "--work-dir", work, "--inventory", inv,
                "--name", "joined", "--tls-ca", c.ca, "--heartbeat-interval-ms", "200",
                "--run-as", "agent", "--allow-root-jobs"]
        agent = c.spawn(argv + ["--join-token", join], os.path.join(c.tmp, "joined.log"))
        wait_until("node joined READY", lambda: any(
            n["name"] == "joined" and n.get("state") == "READY"
            for n in c.json("nodes").get("nodes", [])))
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(work, "tls", "node.key")).st_mode), 0o600)
        # The token is spent: another agent cannot use it.
        work2 = os.path.join(c.tmp, "work-thief")
        os.makedirs(work2)
        r = subprocess.run([AGENT, "--scheduler", c.address, "--work-dir", work2,
                            "--inventory", inv, "--name", "thief", "--tls-ca", c.ca,
                            "--join-token", join], capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("already used", r.stdout + r.stderr)
        # A restart needs no token: the certificate is kept in the work dir.
        os.killpg(agent.pid, signal.SIGKILL)
        agent.wait(timeout=10)
        c.spawn(argv, os.path.join(c.tmp, "joined2.log"))
        time.sleep(0.5)
        wait_until("node joined READY again", lambda: any(
            n["name"] == "joined" and n.get("state") == "READY"
            for n in c.json("nodes").get("nodes", [])), 40)


class SecureByDefault(unittest.TestCase):
    def test_a_non_loopback_address_needs_tls_or_insecure(self):
        tmp = tempfile.mkdtemp(prefix="xl-e2e-insecure-")
        try:
            db = os.path.join(tmp, "xl.db")
            r = subprocess.run([SCHEDULER, "--db", db, "--listen", "0.0.0.0:0"],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 1)
            self.assertIn("refusing", r.stderr)
            self.assertIn("--tls-cert", r.stderr)
            port_file = os.path.join(tmp, "port")
            p = subprocess.Popen([SCHEDULER, "--db", db, "--listen", "0.0.0.0:0", "--insecure",
                                  "--port-file", port_file], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, start_new_session=True)
            try:
                wait_until("port file", lambda: os.path.exists(port_file), 20)
                with open(port_file) as f:
                    port = f.read().strip()
                env = {k: v for k, v in os.environ.items() if not k.startswith("XL_")}
                env.update(XL_SERVER=f"127.0.0.1:{port}", XDG_CONFIG_HOME=tmp)
                r = subprocess.run([XLCTL, "nodes"], capture_output=True, text=True, env=env,
                                   timeout=30)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn("WARNING", r.stderr)
                self.assertIn("insecure", r.stderr)
            finally:
                os.killpg(p.pid, signal.SIGTERM)
                out, _ = p.communicate(timeout=20)
            self.assertIn("WARNING", out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md")


def readme_recipe():
    """The first sh block under the README's "Credentials for a multi-host
    cluster" heading, as a new operator would paste it."""
    with open(README) as f:
        text = f.read()
    section = text[text.index("### Credentials for a multi-host cluster"):]
    block = section[section.index("```sh\n") + 6:]
    return block[:block.index("```")]


class OperatorRecipe(unittest.TestCase):
    """Credentials made by the README's openssl commands run a TLS cluster:
    the scheduler's certificate verifies for its DNS name and its IP, a
    node's certificate names its node, a join token works with that CA, and
    a first admin token made offline logs in."""

    def test_the_readme_recipe_makes_a_working_cluster(self):
        tmp = tempfile.mkdtemp(prefix="xl-e2e-recipe-")
        procs = []
        try:
            recipe = readme_recipe()
            lines = recipe.split("\n")
            self.assertTrue(lines[0].startswith("SCHED_DNS="), lines[0])
            lines[0] = 'SCHED_DNS=localhost SCHED_IP=127.0.0.1 NODES="gpu-001 gpu-002"'
            r = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(lines)], cwd=tmp,
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            for name in ("ca", "server", "gpu-001", "gpu-002"):
                self.assertTrue(os.path.exists(os.path.join(tmp, f"{name}.crt")), name)
                if name != "ca":
                    mode = stat.S_IMODE(os.stat(os.path.join(tmp, f"{name}.key")).st_mode)
                    self.assertEqual(mode, 0o600, name)

            db = os.path.join(tmp, "xl.db")
            r = subprocess.run([SCHEDULER, "token", "create", "--db", db, "--user", "alice",
                                "--admin", "--ttl", "1h"], capture_output=True, text=True,
                               timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            alice = r.stdout.strip()
            port_file = os.path.join(tmp, "port")

            def spawn(argv, name):
                with open(os.path.join(tmp, f"{name}.log"), "ab") as out:
                    p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=tmp,
                                         start_new_session=True)
                procs.append(p)
                return p

            f = lambda name: os.path.join(tmp, name)
            spawn([SCHEDULER, "--listen", "127.0.0.1:0", "--port-file", port_file, "--db", db,
                   "--tls-cert", f("server.crt"), "--tls-key", f("server.key"),
                   "--tls-ca", f("ca.crt"), "--ca-cert", f("ca.crt"), "--ca-key", f("ca.key"),
                   "--heartbeat-interval", "0.2"], "scheduler")
            def read_port():
                if not os.path.exists(port_file):
                    return None
                with open(port_file) as p:
                    return p.read().strip()
            port = wait_until("the scheduler's port file", read_port, 30)
            env = {k: v for k, v in os.environ.items() if not k.startswith("XL_")}
            env.update(XDG_CONFIG_HOME=f("config"))

            def xlctl(*args, server="localhost", stdin=None, extra=None):
                e = dict(env, XL_SERVER=f"{server}:{port}", **(extra or {}))
                return subprocess.run([XLCTL, *args], capture_output=True, text=True, env=e,
                                      timeout=60, cwd=tmp, input=stdin)

            # The user logs in by the scheduler's DNS name, with the CA.
            r = xlctl("login", "--tls-ca", f("ca.crt"), stdin=alice + "\n")
            self.assertEqual(r.returncode, 0, r.stderr)
            r = xlctl("whoami", server="127.0.0.1")  # the IP in the certificate works too
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("alice", r.stdout)

            def agent(name, *cred):
                work = f(f"work-{name}")
                os.makedirs(work, exist_ok=True)
                with open(f(f"{name}.yaml"), "w") as out:
                    out.write(inventory_yaml(f"host-of-{name}", gpus=0, scratch=f("scratch")))
                return spawn([AGENT, "--scheduler", f"localhost:{port}", "--tls-ca", f("ca.crt"),
                              *cred, "--work-dir", work, "--inventory", f(f"{name}.yaml"),
                              "--heartbeat-interval-ms", "200", "--run-as", "agent",
                              "--allow-root-jobs"], name)

            # A node with its operator-issued certificate: named by it.
            agent("gpu-001", "--tls-cert", f("gpu-001.crt"), "--tls-key", f("gpu-001.key"))
            # A node that joins with a token, signed by the same CA.
            r = xlctl("token", "create", "--join", "--node", "gpu-003")
            self.assertEqual(r.returncode, 0, r.stderr)
            agent("gpu-003", "--join-token", r.stdout.strip())

            def ready():
                r = xlctl("nodes", "-o", "json")
                nodes = json.loads(r.stdout or "{}").get("nodes", [])
                return sorted(n["name"] for n in nodes if n.get("state") == "READY")
            wait_until("gpu-001 and gpu-003 READY", lambda: ready() == ["gpu-001", "gpu-003"], 40)

            r = xlctl("submit", "--nodes", "2", "--", "/bin/sh", "-c", "echo rank $RANK ok")
            self.assertEqual(r.returncode, 0, r.stderr)
            job = r.stdout.strip()
            r = xlctl("wait", job, "--timeout", "60s")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            logs = xlctl("logs", job).stdout
            self.assertIn("rank 0 ok", logs)
            self.assertIn("rank 1 ok", logs)

            # Without the CA the server's certificate is not trusted.
            r = xlctl("nodes", extra={"XDG_CONFIG_HOME": f("empty-config"), "XL_TOKEN": alice})
            self.assertNotEqual(r.returncode, 0)
        except AssertionError:
            for name in sorted(os.listdir(tmp)):
                if name.endswith(".log"):
                    with open(os.path.join(tmp, name), errors="replace") as out:
                        print(f"--- {name}\n{out.read()[-3000:]}", file=sys.stderr)
            raise
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(timeout=5)
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
