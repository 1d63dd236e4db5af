"""Partitions made with network namespaces: the scheduler in one namespace,
each agent in its own, joined by a veth pair; a partition takes a link down.
A node cut off past the heartbeat timeout has its job requeued elsewhere,
and the old attempt's rank is gone (its agent's lease ran out) before the new
attempt's starts; when most of the fleet is cut off at once, the brake holds
and nothing is requeued. A replicated scheduler's leader cut off from the
other replicas acknowledges nothing, the others elect a leader, and healed it
follows with nothing of its own. Needs root and `ip netns`; skipped without
them."""

import os
import shutil
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from cluster import Cluster, ReplicatedCluster, rank_processes, wait_until  # noqa: E402


def ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def can_make_namespaces():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    name = f"xlprobe{os.getpid()}"
    if ip("netns", "add", name, check=False).returncode != 0:
        return False
    ip("netns", "del", name, check=False)
    return True


class Namespaces:
    """Removes the namespaces in self.spaces when the cluster closes."""

    def close(self):
        try:
            super().close()
        finally:
            for ns in self.spaces:
                ip("netns", "del", ns, check=False)


class NetnsCluster(Namespaces, Cluster):
    """A scheduler in namespace S and agents node-a, node-b, ... each in its
    own namespace, linked to S by veth pair i (10.77.i.1 in S, 10.77.i.2 in
    the agent's)."""

    def __init__(self, agents, **kw):
        tag = os.getpid() % 100000
        self.netns = {"scheduler": f"xls{tag}"}
        self.listen_host = "0.0.0.0"  # inside S only
        self.agent_routes = {}
        self.links = {}
        self.spaces = [self.netns["scheduler"]]
        ip("netns", "add", self.netns["scheduler"])
        ip("-n", self.netns["scheduler"], "link", "set", "lo", "up")
        names = [f"node-{chr(ord('a') + i)}" for i in range(agents)]
        for i, name in enumerate(names, start=1):
            ns = f"xla{tag}{i}"
            ip("netns", "add", ns)
            self.spaces.append(ns)
            ip("-n", ns, "link", "set", "lo", "up")
            s_end, a_end = f"xs{tag}{i}", f"xa{tag}{i}"
            ip("link", "add", s_end, "type", "veth", "peer", "name", a_end)
            ip("link", "set", s_end, "netns", self.netns["scheduler"])
            ip("link", "set", a_end, "netns", ns)
            ip("-n", self.netns["scheduler"], "addr", "add", f"10.77.{i}.1/24", "dev", s_end)
            ip("-n", ns, "addr", "add", f"10.77.{i}.2/24", "dev", a_end)
            ip("-n", self.netns["scheduler"], "link", "set", s_end, "up")
            ip("-n", ns, "link", "set", a_end, "up")
            self.netns[name] = ns
            self.links[name] = s_end
            self.agent_routes[name] = (f"10.77.{i}.1", f"10.77.{i}.2")
        try:
            # Not loopback: plaintext on a network only this test reaches.
            super().__init__(agents=0, gpus=0, scheduler_args=["--insecure"], **kw)
            for name in names:
                self.start_agent(name, gpus=0)
            self.wait_nodes(agents)
        except BaseException:
            self.close()
            raise

    def cut(self, name):
        ip("-n", self.netns["scheduler"], "link", "set", self.links[name], "down")

    def heal(self, name):
        ip("-n", self.netns["scheduler"], "link", "set", self.links[name], "up")


def rank_pids(job_id, attempt):
    """PIDs of the job's `sleep` ranks of that attempt, whatever namespace."""
    return [pid for pid, job, at, _ in rank_processes("sleep")
            if job == job_id and at == attempt]


JOB = """\
name: {name}
command: ["/bin/sleep", "600"]
resources: {{nodes: 1, gpus_per_node: 0}}
max_retries: 1
grace_period: 1s
"""


@unittest.skipUnless(can_make_namespaces(), "needs root and ip netns")
class Partition(unittest.TestCase):
    def test_a_cut_off_node_is_requeued_elsewhere_and_its_rank_gone_first(self):
        c = NetnsCluster(agents=3)
        self.addCleanup(c.close)
        job_id = c.submit_file(JOB.format(name="cut"))
        job = c.wait_state(job_id, "RUNNING")
        victim = job["allocations"][0]["node"]
        old = wait_until("the rank", lambda: rank_pids(job_id, 1), 10)
        cut = time.monotonic()
        c.cut(victim)
        requeued = old_gone = new_started = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and new_started is None:
            now = time.monotonic() - cut
            if old_gone is None and not any(os.path.exists(f"/proc/{p}") for p in old):
                old_gone = now
            if requeued is None and int(c.job(job_id).get("attempt", 1)) >= 2:
                requeued = now
            if rank_pids(job_id, 2):
                new_started = now
            time.sleep(0.05)
        print(f"\npartition: requeued {requeued:.1f}s after the cut (heartbeat timeout "
              f"{c.heartbeat_timeout}s), old rank gone at {old_gone:.1f}s, new attempt's "
              f"rank started at {new_started:.1f}s", file=sys.stderr)
        self.assertIsNotNone(new_started, "attempt 2 never started")
        self.assertLess(requeued, 2 * c.heartbeat_timeout + 1)
        self.assertIsNotNone(old_gone)
        self.assertLessEqual(old_gone, new_started, "two attempts ran at once")
        job = c.wait_state(job_id, "RUNNING")
        self.assertNotEqual(job["allocations"][0]["node"], victim)
        # A lost node spends a retry (the job may have been what broke it).
        self.assertEqual(int(job.get("retries_used", 0)), 1, job)
        # Healed: the node comes back, and nothing of attempt 1 runs again.
        c.heal(victim)
        wait_until("the node back", lambda: any(n["name"] == victim and n.get("state") == "READY"
                                                and not n.get("state_reason") for n in c.nodes()), 30)
        time.sleep(1)
        self.assertEqual(rank_pids(job_id, 1), [])
        job = c.job(job_id)
        self.assertEqual(job["state"], "RUNNING")
        self.assertEqual(int(job["attempt"]), 2)

    def test_the_brake_holds_when_most_of_the_fleet_is_cut_off(self):
        c = NetnsCluster(agents=3)
        self.addCleanup(c.close)
        # Jobs on node-a and node-b only; those two (of three) are cut off.
        job = JOB.replace("gpus_per_node: 0}", "gpus_per_node: 0, exclude_nodes: [node-c]}")
        ids = [c.submit_file(job.format(name=f"b{i}"), name=f"b{i}.yaml") for i in range(3)]
        for job_id in ids:
            c.wait_state(job_id, "RUNNING")
        cut = ["node-a", "node-b"]
        for name in cut:
            c.cut(name)
        time.sleep(3 * c.heartbeat_timeout)
        for job_id in ids:
            self.assertEqual(int(c.job(job_id).get("attempt", 1)), 1, c.job(job_id))
        reasons = [n.get("state_reason", "") for n in c.nodes() if n["name"] in cut]
        self.assertTrue(all("went silent at once" in r for r in reasons), reasons)
        self.assertTrue(all(n.get("state") != "LOST" for n in c.nodes()), c.nodes())


if __name__ == "__main__":
    unittest.main(verbosity=2)


class ReplicaNetnsCluster(Namespaces, ReplicatedCluster):
    """Three scheduler replicas, each in its own namespace with two links:
    its API on a bridge in namespace H (where the agents and xlctl run,
    10.78.0.i) and its Raft port on a bridge in namespace R (10.79.0.i). A
    cut takes a replica's Raft link down: cut off from the other replicas,
    still reachable by clients."""

    def __init__(self, agents=2, **kw):
        tag = os.getpid() % 100000
        self.hub, self.raft_ns = f"xlh{tag}", f"xlr{tag}"
        self.spaces = [self.hub, self.raft_ns]
        self.raft_links = {}
        self.netns = {"scheduler": self.hub}
        self.listen_host = "0.0.0.0"
        self.agent_routes = {}
        for ns in self.spaces:
            ip("netns", "add", ns)
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", ns, "link", "add", "br0", "type", "bridge")
            ip("-n", ns, "link", "set", "br0", "up")
        # Clients (agents, xlctl) in H reach the replicas' API over br0.
        ip("-n", self.hub, "addr", "add", "10.78.0.254/24", "dev", "br0")
        try:
            for i in (1, 2, 3):
                ns = f"xlq{tag}{i}"
                ip("netns", "add", ns)
                self.spaces.append(ns)
                ip("-n", ns, "link", "set", "lo", "up")
                self.netns[f"replica-{i}"] = ns
                for net, (hub, subnet) in enumerate(((self.hub, 78), (self.raft_ns, 79))):
                    inner, outer = f"xq{tag}{i}{net}", f"xo{tag}{i}{net}"
                    ip("link", "add", inner, "type", "veth", "peer", "name", outer)
                    ip("link", "set", inner, "netns", ns)
                    ip("link", "set", outer, "netns", hub)
                    ip("-n", ns, "addr", "add", f"10.{subnet}.0.{i}/24", "dev", inner)
                    ip("-n", ns, "link", "set", inner, "up")
                    ip("-n", hub, "link", "set", outer, "master", "br0")
                    ip("-n", hub, "link", "set", outer, "up")
                    if hub == self.raft_ns:
                        self.raft_links[i] = outer
            for i in range(agents):
                self.netns[f"node-{chr(ord('a') + i)}"] = self.hub
            super().__init__(agents=agents, gpus=0,
                             api={i: f"10.78.0.{i}:7000" for i in (1, 2, 3)},
                             raft={i: f"10.79.0.{i}:7100" for i in (1, 2, 3)},
                             # Not loopback: plaintext on a network only this test reaches.
                             scheduler_args=["--insecure", "--lease", "10"], **kw)
        except BaseException:
            self.close()
            raise

    def cut(self, i):
        ip("-n", self.raft_ns, "link", "set", self.raft_links[i], "down")

    def heal(self, i):
        ip("-n", self.raft_ns, "link", "set", self.raft_links[i], "up")


@unittest.skipUnless(can_make_namespaces(), "needs root and ip netns")
class ReplicaPartition(unittest.TestCase):
    def test_a_cut_off_leader_stops_and_rejoins_with_nothing_of_its_own(self):
        c = ReplicaNetnsCluster(agents=2)
        self.addCleanup(c.close)
        job_id = c.submit_file(JOB.format(name="before"))
        c.wait_state(job_id, "RUNNING")
        ranks = wait_until("the rank", lambda: rank_pids(job_id, 1), 10)
        old = c.leader()
        cut = time.monotonic()
        c.cut(old)
        # Cut off from the others, the old leader stops acting: its
        # submits are refused (it no longer leads), never acknowledged.
        lost = os.path.join(c.tmp, "lost.yaml")
        with open(lost, "w") as f:
            f.write(JOB.format(name="lost"))
        refused_at, acked = None, 0
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            r = c.xlctl("--server", c.api[old], "--timeout", "2s", "submit", lost, check=False)
            if r.returncode != 0:
                refused_at = time.monotonic() - cut
                break
            acked += 1
            time.sleep(0.05)
        self.assertIsNotNone(refused_at, "the cut-off leader kept acknowledging")
        self.assertEqual(acked, 0, "the cut-off leader acknowledged a submit it could not commit")
        # The other two elect a leader and go on scheduling.
        new = wait_until("a new leader", lambda: (lambda l: l if l and l != old else None)(c.leader()), 20)
        elected_at = time.monotonic() - cut
        after = c.submit_file(JOB.format(name="after"), name="after.yaml")
        c.wait_state(after, "RUNNING", "PENDING")
        print(f"\nreplica partition: the cut-off leader acknowledged nothing; its first submit "
              f"failed {refused_at:.2f}s after the cut "
              f"(election timeout 0.5s); replica {new} led {elected_at:.2f}s after it", file=sys.stderr)
        self.assertLess(refused_at, 3.0)
        # Healed: the old leader follows, holds what the others hold, and
        # nothing the cut-off side was asked for exists anywhere.
        c.heal(old)

        def caught_up():
            s = {int(x["id"]): x for x in c.servers()}
            return (old in s and not s[old].get("leader") and new in s and s[new].get("leader")
                    and int(s[old].get("applied_index", 0)) >= int(s[new].get("commit_index", 0)))
        wait_until("the old leader caught up as a follower", caught_up, 30)
        names = sorted(j.get("spec", {}).get("name", "") for j in c.json("list", "--all-pages").get("jobs", []))
        self.assertEqual(names.count("lost"), 0, names)
        self.assertIn("after", names)
        self.assertEqual(rank_pids(job_id, 1), ranks)
        import sqlite3
        for i in (1, 2, 3):
            db = sqlite3.connect(f"file:{c.tmp}/replica-{i}.db?mode=ro", uri=True, timeout=5)
            try:
                rows = [r[0] for r in db.execute("SELECT id FROM jobs ORDER BY id")]
            finally:
                db.close()
            self.assertEqual(len(rows), len(names), f"replica {i}")
