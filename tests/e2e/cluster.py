"""A real xl cluster on loopback for end-to-end tests: one xl-scheduler with
a SQLite file, N xl-agent processes with inventory files, and xlctl. Every
process is started in its own process group and killed when the cluster is
closed; every wait is bounded."""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

BUILD = os.environ.get("XL_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
SCHEDULER = os.path.join(BUILD, "server", "xl-scheduler")
AGENT = os.path.join(BUILD, "agent", "xl-agent")
XLCTL = os.path.join(BUILD, "client", "xlctl")


def inventory_yaml(name, gpus=2, cpus=16, switch="s1", rack="r1", nic_gbps=100,
                   scratch="/tmp/xl-e2e-scratch"):
    lines = [
        f"hostname: {name}",
        f"labels: {{rack: {rack}, switch: {switch}}}",
        f"cpus: {cpus}",
        "memory_bytes: 68719476736",
        "gpus:",
    ]
    for i in range(gpus):
        lines.append(f'  - {{index: {i}, model: "NVIDIA H100 80GB HBM3", memory_bytes: 85899345920}}')
    if gpus == 0:
        lines[-1] = "gpus: []"
    lines += [
        "nvme:",
        f"  - {{device: nvme0n1, path: {scratch}, capacity_bytes: 1920383410176, free_bytes: 1800000000000}}",
        "nics:",
        f"  - {{name: eth0, kind: ETHERNET, gbps: {nic_gbps}}}",
    ]
    return "\n".join(lines) + "\n"


def rank_processes(comm):
    """The ranks whose program is `comm`, whatever node or network namespace
    of a test cluster runs them: (pid, XL_JOB_ID, XL_ATTEMPT, RANK) from
    /proc."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() != comm:
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
        except (OSError, ValueError):
            continue
        if b"XL_JOB_ID" in env:
            found.append((int(pid), env[b"XL_JOB_ID"].decode(),
                          int(env.get(b"XL_ATTEMPT", b"0")), int(env.get(b"RANK", b"0"))))
    return found


def wait_until(what, fn, timeout=30.0, interval=0.05):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


class Cluster:
    def __init__(self, agents=3, gpus=2, heartbeat_timeout=2.0, db=None, dir=None,
                 scheduler_args=(), shared_scratch=True):
        self.tmp = dir or tempfile.mkdtemp(prefix="xl-e2e-")
        # False: each node's scratch is its own, as on a real fleet.
        self.shared_scratch = shared_scratch
        self.scheduler_args = list(scheduler_args)
        self.db = db or os.path.join(self.tmp, "xl.db")
        self.heartbeat_timeout = heartbeat_timeout
        self.procs = {}
        self.logs = []
        # Network namespaces (ip netns) a process runs in, by key; where the
        # scheduler listens, and where each agent reaches it (see
        # test_partition.py). Empty: everything on the host's loopback.
        if not hasattr(self, "netns"):
            self.netns = {}
            self.listen_host = "127.0.0.1"
            self.agent_routes = {}
        self.start_scheduler()
        for i in range(agents):
            self.start_agent(f"node-{chr(ord('a') + i)}", gpus=gpus)
        if agents:
            self.wait_nodes(agents)

    # --- processes -------------------------------------------------------
    def _spawn(self, key, argv):
        log = open(os.path.join(self.tmp, f"{key}.log"), "ab")
        self.logs.append(log)
        if key in self.netns:
            argv = ["ip", "netns", "exec", self.netns[key], *argv]
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs[key] = p
        return p

    def start_scheduler(self):
        port_file = os.path.join(self.tmp, "port")
        if os.path.exists(port_file):
            os.unlink(port_file)
        # A restart listens where the agents look for it (the port it had).
        listen = f"{self.listen_host}:{getattr(self, 'port', 0)}"
        self._spawn("scheduler", [
            SCHEDULER, "--listen", listen, "--db", self.db, "--port-file", port_file,
            "--heartbeat-interval", "0.2", "--heartbeat-timeout", str(self.heartbeat_timeout),
            # Below the kernel's ephemeral ports (32768 and up): a client
            # socket of another test may hold any port there.
            "--master-port-base", str(10000 + (os.getpid() % 22) * 1000),
            *self.scheduler_args,
        ])
        wait_until("the scheduler's port file", lambda: os.path.exists(port_file), 20)
        with open(port_file) as f:
            self.port = int(f.read().strip())
        self.address = f"127.0.0.1:{self.port}"

    def start_agent(self, name, gpus=2, run_as="agent", allow_root_jobs=True, extra_args=(),
                    drain=True, **kw):
        """run_as="agent" with allow_root_jobs: the jobs run as whoever runs
        the tests (root in CI), whatever made-up user submits them. drain:
        the agent stops its ranks when the test ends (SIGTERM); without it
        they stay for the next agent on the same work dir."""
        inv = os.path.join(self.tmp, f"{name}.yaml")
        with open(inv, "w") as f:
            # One scratch path for every node of the cluster (unless the
            # cluster says otherwise): it stands for storage the nodes share,
            # so a requeued job finds its checkpoints.
            kw.setdefault("scratch", os.path.join(
                self.tmp, "scratch" if self.shared_scratch else f"scratch-{name}"))
            f.write(inventory_yaml(name, gpus=gpus, **kw))
        work = os.path.join(self.tmp, f"work-{name}")
        os.makedirs(work, exist_ok=True)
        route = self.agent_routes.get(name)  # (scheduler host, own address)
        if route:
            extra_args = ("--address", route[1], *extra_args)
        scheduler = f"{route[0]}:{self.port}" if route else self.address
        return self._spawn(name, [AGENT, "--scheduler", scheduler, "--work-dir", work,
                                  "--inventory", inv, "--name", name,
                                  "--heartbeat-interval-ms", "200", "--run-as", run_as,
                                  *(["--allow-root-jobs"] if allow_root_jobs else []),
                                  *(["--drain"] if drain else []),
                                  *extra_args])

    def kill(self, key, sig=signal.SIGKILL):
        p = self.procs.pop(key)
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
        p.wait(timeout=20)

    def close(self):
        for key in list(self.procs):
            p = self.procs[key]
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for key in list(self.procs):
            p = self.procs.pop(key)
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=5)
        for log in self.logs:
            log.close()
        if not os.environ.get("XL_KEEP_E2E") and not getattr(self, "keep", False):
            shutil.rmtree(self.tmp, ignore_errors=True)

    def log_of(self, key):
        with open(os.path.join(self.tmp, f"{key}.log"), errors="replace") as f:
            return f.read()

    # --- xlctl -----------------------------------------------------------
    def xlctl(self, *args, check=True, timeout=60, cwd=None, user="tester"):
        env = dict(os.environ, XL_SERVER=self.address, XL_USER=user)
        prefix = ["ip", "netns", "exec", self.netns["scheduler"]] if "scheduler" in self.netns else []
        r = subprocess.run([*prefix, XLCTL, *args], capture_output=True, text=True, env=env,
                           timeout=timeout, cwd=cwd or self.tmp)
        if check and r.returncode != 0:
            raise AssertionError(f"xlctl {' '.join(args)} exited {r.returncode}: {r.stderr}")
        return r

    def json(self, *args):
        return json.loads(self.xlctl(*args, "-o", "json").stdout or "{}")

    def job(self, job_id):
        return self.json("get", job_id)

    def nodes(self):
        return self.json("nodes").get("nodes", [])

    def wait_nodes(self, count, state="READY"):
        return wait_until(f"{count} nodes {state}",
                          lambda: len([n for n in self.nodes() if n.get("state") == state]) >= count)

    def wait_state(self, job_id, *states, timeout=60):
        return wait_until(f"job {job_id} in {states}",
                          lambda: (lambda j: j if j.get("state") in states else None)(self.job(job_id)),
                          timeout)

    def submit_file(self, text, name="job.yaml"):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return self.xlctl("submit", path).stdout.strip()


class DevCluster:
    """`xl-scheduler --dev --agents N` in `dir` (a new temporary directory
    when None), as deploy/quickstart.sh starts it: TLS, an admin token, and
    `env` holding what its --dev-env file says (XL_SERVER, XL_TLS_CA,
    XL_TOKEN) for xlctl. `close()` stops it and removes a directory it made."""

    def __init__(self, agents=2, args=(), dir=None, cwd=None, env=None):
        self.own_dir = dir is None
        self.tmp = dir or tempfile.mkdtemp(prefix="xl-dev-e2e-")
        self.cwd = cwd or self.tmp
        self.log = open(os.path.join(self.tmp, "scheduler.log"), "wb")
        port = os.path.join(self.tmp, "port")
        env_file = os.path.join(self.tmp, "xlctl.env")
        self.proc = subprocess.Popen(
            [SCHEDULER, "--dev", "--agents", str(agents), "--listen", "127.0.0.1:0",
             "--port-file", port, "--dev-env", env_file, *args],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
            env=env)
        wait_until("the dev cluster's xlctl.env", lambda: os.path.exists(env_file), 60)
        self.env = dict(os.environ)
        with open(env_file) as f:
            for line in f:
                m = re.match(r"(?:export\s+)?(XL_[A-Z_]+)=(.*)", line.strip())
                if m:
                    self.env[m.group(1)] = m.group(2).strip("'\"")

    def xlctl(self, *args, timeout=600):
        return subprocess.run([XLCTL, *args], capture_output=True, text=True, env=self.env,
                              cwd=self.cwd, timeout=timeout)

    def wait_ready(self, count):
        wait_until(f"{count} READY nodes",
                   lambda: self.xlctl("nodes", "-o", "json").stdout.count('"READY"') >= count, 60)

    def read_log(self):
        self.log.flush()
        with open(os.path.join(self.tmp, "scheduler.log"), errors="replace") as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def close(self):
        self.stop()
        self.log.close()
        if self.own_dir:
            shutil.rmtree(self.tmp, ignore_errors=True)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ReplicatedCluster(Cluster):
    """Cluster with a scheduler of three replicas on Raft (each its own
    database and log under tmp), agents and xlctl given all three addresses.
    Replica keys: "replica-1".."replica-3"."""

    def __init__(self, replicas=3, election_timeout="500ms", api=None, raft=None, **kw):
        self.replicas = replicas
        self.election_timeout = election_timeout
        self.api = api or {i: f"127.0.0.1:{free_port()}" for i in range(1, replicas + 1)}
        self.raft = raft or {i: f"127.0.0.1:{free_port()}" for i in range(1, replicas + 1)}
        super().__init__(**kw)

    def start_scheduler(self):
        for i in range(1, self.replicas + 1):
            self.start_replica(i)
        self.address = ",".join(self.api[i] for i in sorted(self.api))
        wait_until("a leader", self.leader, 20)

    def start_replica(self, i):
        peers = ",".join(f"{j}={self.raft[j]}/{self.api[j]}" for j in sorted(self.raft))
        self._spawn(f"replica-{i}", [
            SCHEDULER, "--replica-id", str(i), "--peers", peers, "--listen", self.api[i],
            "--db", os.path.join(self.tmp, f"replica-{i}.db"),
            "--election-timeout", self.election_timeout,
            "--heartbeat-interval", "0.2", "--heartbeat-timeout", str(self.heartbeat_timeout),
            "--master-port-base", str(10000 + (os.getpid() % 22) * 1000),
            *self.scheduler_args,
        ])

    def servers(self):
        r = self.xlctl("servers", "-o", "json", check=False, timeout=20)
        try:
            return json.loads(r.stdout or "{}").get("replicas", [])
        except ValueError:
            return []

    def nodes(self):
        # Across a failover a call may fail for a moment: no nodes then.
        r = self.xlctl("nodes", "-o", "json", check=False, timeout=30)
        try:
            return json.loads(r.stdout or "{}").get("nodes", []) if r.returncode == 0 else []
        except ValueError:
            return []

    def leader(self):
        """The id of the replica that leads now, or None."""
        for s in self.servers():
            if s.get("leader") and not s.get("unreachable"):
                return int(s["id"])
        return None
