"""Prometheus /metrics of a real cluster, read with Prometheus' own
text-format parser (python3-prometheus-client): the scheduler's and every
agent's, their numbers against `xlctl -o json`, and the Grafana dashboard in
deploy/ naming only metrics that exist."""

import json
import os
import re
import sys
import http.client
import textwrap
import unittest
import urllib.parse
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, os.path.dirname(__file__))
from cluster import Cluster, wait_until  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
MODEL = "NVIDIA H100 80GB HBM3"


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        raw = r.read()
    if os.environ.get("XL_DUMP_SCRAPE"):
        open(os.environ["XL_DUMP_SCRAPE"], "wb").write(raw)
    text = raw.decode()
    samples = {}
    families = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = family.type
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return families, samples


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


def total(samples, name, **labels):
    return sum(v for (n, ls), v in samples.items()
               if n == name and all(dict(ls).get(k) == w for k, w in labels.items()))


class Observability(unittest.TestCase):
    def test_the_http_port_refuses_dns_rebinding(self):
        """Security review F8: without TLS (the one-user loopback mode, where
        every caller is an admin), a page of another site whose name now
        resolves to 127.0.0.1 must not read the API or /metrics."""
        c = Cluster(agents=0, scheduler_args=["--metrics-listen", "127.0.0.1:0",
                                              "--dashboard-host", "xl.example"])
        self.addCleanup(c.close)
        url = wait_until("the scheduler's metrics address", lambda: re.search(
            r"metrics on (http://127\.0\.0\.1:\d+)/metrics", c.log_of("scheduler")))
        port = urllib.parse.urlsplit(url.group(1)).port

        def ask(method, path, host, origin=None):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            headers = {"Host": host, "Content-Type": "application/json"}
            if origin:
                headers["Origin"] = origin
            conn.request(method, path, body=b"{}" if method == "POST" else None,
                         headers=headers)
            r = conn.getresponse()
            body = r.read().decode()
            conn.close()
            return r.status, body

        api = "/api/xl.v1.JobService/ListJobs"
        status, body = ask("POST", api, "evil.example")
        self.assertEqual(status, 403, body)
        self.assertIn("--dashboard-host", body)
        self.assertEqual(ask("GET", "/metrics", f"evil.example:{port}")[0], 403)
        self.assertEqual(ask("GET", "/", "evil.example")[0], 403)
        # Its own names pass: IP addresses, localhost, --dashboard-host.
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "xl.example", "[::1]"):
            self.assertEqual(ask("POST", api, host)[0], 200, host)
        self.assertEqual(ask("GET", "/healthz", "anything")[0], 200)
        # A page of another origin may not call the API; its own may.
        status, body = ask("POST", api, f"127.0.0.1:{port}", origin="http://evil.example")
        self.assertEqual(status, 403, body)
        self.assertIn("PERMISSION_DENIED", body)
        self.assertEqual(ask("POST", api, f"127.0.0.1:{port}",
                             origin=f"http://127.0.0.1:{port}")[0], 200)

    def test_scheduler_and_agent_metrics_match_the_cluster(self):
        c = Cluster(agents=0, scheduler_args=["--metrics-listen", "127.0.0.1:0"])
        self.addCleanup(c.close)
        url = wait_until("the scheduler's metrics address", lambda: re.search(
            r"metrics on (http://127\.0\.0\.1:\d+)/metrics", c.log_of("scheduler")))
        sched = url.group(1) + "/metrics"
        for name in ("node-a", "node-b"):
            c.start_agent(name, gpus=2, extra_args=("--metrics-listen", "127.0.0.1:0"))
        c.wait_nodes(2)
        agents = {name: wait_until(f"{name}'s metrics address", lambda name=name: re.search(
            r"metrics on (http://127\.0\.0\.1:\d+)/metrics", c.log_of(name))).group(1) + "/metrics"
            for name in ("node-a", "node-b")}

        # A CPU training job on both nodes, a job holding one GPU, one that
        # can never fit now (3 nodes), and one waiting for it.
        train = c.submit_file(textwrap.dedent("""\
            name: observed
            queue: default
            resources: {nodes: 2, ranks_per_node: 1, gpus_per_node: 0}
            env: {OMP_NUM_THREADS: "1", OPENBLAS_NUM_THREADS: "1"}
            train: {input_dim: 32, hidden_dim: 64, hidden_layers: 2, classes: 8,
                    batch_per_rank: 32, steps: 2000000, learning_rate: 0.003,
                    metrics_every: 20, device: cpu}
            """), "train.yaml")
        gpu = c.submit_file("name: holder\nresources: {nodes: 1, ranks_per_node: 1, gpus_per_node: 1}\n"
                            "command: [sleep, '600']\n", "gpu.yaml")
        wide = c.submit_file("name: wide\nresources: {nodes: 3, ranks_per_node: 1, gpus_per_node: 1}\n"
                             "command: [sleep, '1']\n", "wide.yaml")
        after = c.submit_file(f"name: after\nafter_ok: ['{wide}']\n"
                              "resources: {nodes: 1, ranks_per_node: 1, gpus_per_node: 0}\n"
                              "command: [true]\n", "after.yaml")
        c.wait_state(train, "RUNNING")
        c.wait_state(gpu, "RUNNING")
        wait_until("training metrics", lambda: c.job(train).get("metrics", {}).get("step"), 60)
        # A rejected submit counts too.
        c.xlctl("submit", os.path.join(c.tmp, "missing.yaml"), check=False)

        fam, s = scrape(sched)
        listed = c.json("list", "--all-pages").get("jobs", [])
        self.assertEqual(len(listed), 4)
        by_state = {}
        for j in listed:
            by_state[j["state"]] = by_state.get(j["state"], 0) + 1
        for state, n in by_state.items():
            self.assertEqual(total(s, "xl_jobs", state=state), n, (state, by_state))
        self.assertEqual(value(s, "xl_jobs", state="RUNNING", queue="default"), 2)
        self.assertEqual(value(s, "xl_jobs", state="PENDING", queue="default"), 2)
        self.assertEqual(value(s, "xl_pending_jobs", queue="default", reason="resources"), 1)
        self.assertEqual(value(s, "xl_pending_jobs", queue="default", reason="dependency"), 1)
        nodes = c.nodes()
        self.assertEqual(value(s, "xl_nodes", state="READY"), len(nodes))
        self.assertEqual(value(s, "xl_gpus_capacity", model=MODEL),
                         sum(len(n["inventory"]["gpus"]) for n in nodes))
        in_use = sum(len(n.get("usage", {}).get("gpus_in_use", [])) for n in nodes)
        self.assertEqual(in_use, 1)
        self.assertEqual(value(s, "xl_gpus_allocated", model=MODEL), in_use)
        self.assertEqual(value(s, "xl_gpus_free", model=MODEL), 4 - in_use)
        for n in nodes:
            age = value(s, "xl_agent_heartbeat_age_seconds", node=n["name"])
            self.assertIsNotNone(age, n["name"])
            self.assertLess(age, 2.0)
        # Counters and histograms: four accepted submits, one rejected (its
        # file was missing: xlctl never called the API, so none), passes ran,
        # the store committed.
        self.assertEqual(fam["xl_jobs_submitted"], "counter")
        self.assertEqual(value(s, "xl_jobs_submitted_total", result="accepted"), 4)
        self.assertEqual(value(s, "xl_submit_latency_seconds_count"), 4)
        self.assertEqual(fam["xl_submit_latency_seconds"], "histogram")
        self.assertGreater(total(s, "xl_scheduling_pass_duration_seconds_count"), 0)
        self.assertGreater(value(s, "xl_store_commit_writes_count"), 0)
        self.assertGreater(value(s, "xl_store_commit_duration_seconds_count"), 0)
        # The training job's progress, labelled with its job, queue and user.
        job = c.job(train)
        labels = dict(job=train, queue="default", user=job["user"])
        step = value(s, "xl_job_step", **labels)
        self.assertIsNotNone(step, [k for k in s if k[0] == "xl_job_step"])
        self.assertGreater(step, 0)
        self.assertLessEqual(step, int(c.job(train)["metrics"]["step"]))
        self.assertIsNotNone(value(s, "xl_job_loss", **labels))
        self.assertGreater(value(s, "xl_job_samples_per_second", **labels), 0)
        self.assertGreater(value(s, "xl_job_allreduce_bus_bandwidth_bytes_per_second", **labels), 0)
        self.assertGreater(value(s, "xl_job_peak_memory_bytes", **labels), 0)
        # CPU training has no peak to measure MFU against: the series is absent.
        self.assertIsNone(value(s, "xl_job_mfu_ratio", **labels))

        # The agents: connected, acknowledged, their GPUs and ranks.
        ranks = 0
        for name, url in agents.items():
            _, a = scrape(url)
            self.assertEqual(value(a, "xl_agent_connected"), 1, name)
            self.assertLess(value(a, "xl_agent_scheduler_ack_age_seconds"), 2.0, name)
            self.assertEqual(value(a, "xl_agent_gpus", model=MODEL), 2, name)
            ranks += value(a, "xl_agent_ranks_running")
        self.assertEqual(ranks, 3)  # 2 training ranks + the GPU holder

        # A cancel shows as a finished job and a rank exit.
        c.xlctl("cancel", gpu)
        c.wait_state(gpu, "CANCELLED")
        _, s = scrape(sched)
        self.assertEqual(value(s, "xl_jobs_finished_total", state="CANCELLED"), 1)
        wait_until("the holder's exit on its agent", lambda: sum(
            value(scrape(u)[1], "xl_agent_rank_exits_total") for u in agents.values()) >= 1, 30)

        # Every metric the Grafana dashboard queries is one of these.
        exposed = set(fam) | {n for n, _ in s}
        for url in agents.values():
            f, a = scrape(url)
            exposed |= set(f) | {n for n, _ in a}
        with open(os.path.join(ROOT, "deploy", "grafana", "xl-dashboard.json")) as f:
            dashboard = json.load(f)
        exprs = []

        def walk(node):
            if isinstance(node, dict):
                for k, v in node.items():
                    if k in ("expr", "query", "definition") and isinstance(v, str):
                        exprs.append(v)
                    walk(v)
            elif isinstance(node, list):
                for v in node:
                    walk(v)
        walk(dashboard)
        named = set()
        for e in exprs:
            named |= set(re.findall(r"\bxl_[a-z_]+", e))
        self.assertTrue(named, "the dashboard queries no xl_ metric")
        missing = sorted(n for n in named if n not in exposed)
        self.assertEqual(missing, [], "the Grafana dashboard names metrics /metrics lacks")


if __name__ == "__main__":
    unittest.main()
