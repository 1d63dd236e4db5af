#!/usr/bin/python3
"""A stand-in for the scheduler's dashboard port, for working on the
dashboard (server/web/) without building or running the scheduler.

  /usr/bin/python3 mock_server.py [--port 8080] [--token T] [--expect-out F]
  /usr/bin/python3 mock_server.py --upstream https://127.0.0.1:PORT --upstream-ca CA

It serves server/web/ from disk (as the scheduler does, with the same
Content-Security-Policy), GET /api/info, and POST /api/<Service>/<Method>
for the dashboard's read methods. Answers are made from the .proto files
in proto/xl/v1/: protobuf's JSON mapping with the .proto field names, as
the scheduler prints it (fields with default values printed, int64 and
uint64 as strings, enums as names, unset message fields absent); requests
with unknown fields or enum names are refused with 400 INVALID_ARGUMENT.
The canned cluster moves: a training job's metrics and log grow every
second. With --token every /api call needs "Authorization: Bearer T"
(else 401 UNAUTHENTICATED), as a scheduler with TLS and tokens does.
--expect-out writes what `xlctl nodes -o json` and `xlctl list -o json`
would print for it ({"nodes": ..., "jobs": ...}), for check.mjs.

With --upstream it serves server/web/ from disk and passes /api/ to a real
scheduler's dashboard port: the page as edited, the data of a real cluster.
Plain HTTP; on 127.0.0.1 unless --host says otherwise.
"""

import argparse
import base64
import datetime as dt
import json
import math
import os
import re
import ssl
import sys
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
WEB = os.path.join(ROOT, "server", "web")
PROTO = os.path.join(ROOT, "proto", "xl", "v1")

READ_METHODS = {
    "xl.v1.JobService/GetJob", "xl.v1.JobService/ExplainJob", "xl.v1.JobService/ListJobs",
    "xl.v1.JobService/GetQueue", "xl.v1.JobService/GetJobMetrics", "xl.v1.JobService/PlanResources",
    "xl.v1.JobService/WatchJob", "xl.v1.JobService/StreamLogs", "xl.v1.NodeService/ListNodes",
    "xl.v1.NodeService/GetNode", "xl.v1.QueueService/ListQueues", "xl.v1.QueueService/GetShares",
    "xl.v1.AuthService/WhoAmI",
}
CSP = "default-src 'self'; frame-ancestors 'none'"
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8"}


# ---------------------------------------------------------------- schema ----

class Schema:
    """Messages, enums and services of the .proto files (the subset of the
    language they use: flat messages, maps, repeated fields, oneofs)."""

    def __init__(self, directory):
        self.messages = {}  # name -> [(field, type, label)], label "", "repeated", "map"
        self.enums = {}     # name -> [value names], the first is the default
        self.methods = {}   # "xl.v1.Svc/Method" -> (request type, response type, streaming)
        for name in sorted(os.listdir(directory)):
            if name.endswith(".proto"):
                with open(os.path.join(directory, name)) as f:
                    self._parse(f.read())

    def _parse(self, text):
        text = re.sub(r"//[^\n]*", "", text)
        for m in re.finditer(r"\benum\s+(\w+)\s*\{([^}]*)\}", text):
            self.enums[m.group(1)] = re.findall(r"(\w+)\s*=\s*-?\d+\s*;", m.group(2))
        for m in re.finditer(r"\bmessage\s+(\w+)\s*\{((?:[^{}]|\{[^{}]*\})*)\}", text):
            body = re.sub(r"\boneof\s+\w+\s*\{([^}]*)\}", r"\1", m.group(2))
            fields = []
            for f in re.finditer(r"(repeated\s+)?(map\s*<\s*\w+\s*,\s*[\w.]+\s*>|[\w.]+)\s+(\w+)\s*=\s*\d+\s*;", body):
                typ = f.group(2).replace(" ", "")
                label = "map" if typ.startswith("map<") else ("repeated" if f.group(1) else "")
                if label == "map":
                    typ = typ[4:-1].split(",")[1]
                fields.append((f.group(3), typ, label))
            self.messages[m.group(1)] = fields
        for svc in re.finditer(r"\bservice\s+(\w+)\s*\{([^}]*)\}", text):
            for r in re.finditer(r"rpc\s+(\w+)\s*\(\s*(\w+)\s*\)\s*returns\s*\(\s*(stream\s+)?(\w+)\s*\)", svc.group(2)):
                self.methods[f"xl.v1.{svc.group(1)}/{r.group(1)}"] = (r.group(2), r.group(4), bool(r.group(3)))

    # -- printing, as the scheduler's gateway does (defaults printed), or as
    #    xlctl -o json does (defaults=False) --
    def emit(self, typ, value, defaults=True):
        if typ not in self.messages:
            raise KeyError(f"no message {typ}")
        fields = self.messages[typ]
        known = {f for f, _, _ in fields}
        extra = set(value) - known
        if extra:
            raise KeyError(f"{typ} has no field {sorted(extra)}")
        out = {}
        for name, ftype, label in fields:
            v = value.get(name)
            if label == "repeated":
                items = [self._one(ftype, x, defaults) for x in (v or [])]
                if items or defaults:
                    out[name] = items
            elif label == "map":
                items = {k: self._one(ftype, x, defaults) for k, x in (v or {}).items()}
                if items or defaults:
                    out[name] = items
            elif ftype in self.messages or ftype.startswith("google.protobuf."):
                if v is not None:
                    out[name] = self._one(ftype, v, defaults)
            else:
                x = self._one(ftype, v, defaults)
                if defaults or not self._is_default(ftype, x):
                    out[name] = x
        return out

    def _is_default(self, ftype, x):
        if ftype in self.enums:
            return x == self.enums[ftype][0]
        return x in (0, "0", "", False, 0.0)

    def _one(self, ftype, v, defaults):
        if ftype in self.messages:
            return self.emit(ftype, v or {}, defaults)
        if ftype in self.enums:
            names = self.enums[ftype]
            if v is None:
                return names[0]
            if v not in names:
                raise KeyError(f"{ftype} has no value {v}")
            return v
        if ftype == "google.protobuf.Timestamp":
            return rfc3339(v)
        if ftype == "google.protobuf.Duration":
            return f"{v:g}s" if float(v) != int(v) else f"{int(v)}s"
        if ftype in ("google.protobuf.Int64Value", "google.protobuf.UInt64Value"):
            return str(int(v))
        if ftype.startswith("google.protobuf."):
            return v
        if ftype in ("int64", "uint64", "sint64", "fixed64", "sfixed64"):
            return str(int(v or 0))
        if ftype in ("int32", "uint32", "sint32", "fixed32", "sfixed32"):
            return int(v or 0)
        if ftype in ("double", "float"):
            x = float(v or 0)  # printed as protobuf does: 7000000000, 0.25
            return int(x) if x.is_integer() and abs(x) < 2 ** 53 else x
        if ftype == "bool":
            return bool(v)
        if ftype == "string":
            return str(v or "")
        if ftype == "bytes":
            return base64.b64encode(v or b"").decode()
        raise KeyError(f"unknown type {ftype}")

    # -- parsing a request as protobuf's JSON parser would (strictly) --
    def check(self, typ, value, path=""):
        if not isinstance(value, dict):
            raise ValueError(f"{path or typ}: expected an object")
        fields = {f: (t, lab) for f, t, lab in self.messages[typ]}
        for k, v in value.items():
            if k not in fields:
                raise ValueError(f"invalid JSON in xl.v1.{typ} @ {path}{k}: no such field: '{k}'")
            ftype, label = fields[k]
            items = v if label == "repeated" else list(v.values()) if label == "map" else [v]
            if label and not isinstance(v, list if label == "repeated" else dict):
                raise ValueError(f"{path}{k}: expected {'an array' if label == 'repeated' else 'an object'}")
            for x in items:
                if ftype in self.messages:
                    self.check(ftype, x, f"{path}{k}.")
                elif ftype in self.enums and x not in self.enums[ftype] and not isinstance(x, int):
                    raise ValueError(f"invalid value {json.dumps(x)} for enum type xl.v1.{ftype} @ {path}{k}")
                elif ftype in ("int32", "int64", "uint64", "uint32", "double", "float"):
                    try:
                        float(x)
                    except (TypeError, ValueError):
                        raise ValueError(f"invalid value {json.dumps(x)} for type {ftype} @ {path}{k}")


def rfc3339(t):
    if isinstance(t, str):
        return t
    d = dt.datetime.fromtimestamp(float(t), dt.timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{d.microsecond:06d}000Z"


# ---------------------------------------------------------------- cluster ----

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
GIB = 1024 ** 3


class ApiError(Exception):
    def __init__(self, status, code, message):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class Cluster:
    """A small fleet that moves with the clock: job 1 trains (a point a
    second, a log line a second per rank), the rest stays as it is."""

    TRAIN_TOTAL = 200000
    STEPS_PER_SECOND = 12

    def __init__(self, schema, history=45):
        self.schema = schema
        self.t0 = time.time()
        self.train_start = self.t0 - history  # points (and log lines) that exist at start
        t0 = self.t0

        self_nodes = []

        def node(name, state, gpus, model, cpus, labels, nics, reason="", hb_age=0.4, nvme=2):
            self_nodes.append(name)
            return {
                "name": name, "state": state, "state_reason": reason, "agent_version": "0.1.0",
                "inventory": {
                    "hostname": name, "address": f"10.0.{len(self_nodes) // 250}.{10 + len(self_nodes)}",
                    "labels": labels, "cpus": cpus, "memory_bytes": 1024 * GIB if gpus else 256 * GIB,
                    "gpus": [{"index": i, "uuid": f"GPU-{name}-{i}", "model": model,
                              "memory_bytes": 80 * GIB, "compute_capability": "9.0" if model == H100 else "8.0"}
                             for i in range(gpus)],
                    "nvme": [{"device": f"nvme{i}n1", "path": f"/mnt/nvme{i}/xl-scratch",
                              "capacity_bytes": 3840755982336, "free_bytes": 3200000000000 - i * 400000000000}
                             for i in range(nvme)],
                    "nics": nics,
                },
                "register_time": t0 - 86400 * 3, "hb_age": hb_age,
            }

        ib = [{"name": "eth0", "kind": "ETHERNET", "gbps": 100}, {"name": "mlx5_0", "kind": "INFINIBAND", "gbps": 400}]
        self.nodes = [
            node("gpu-a1", "READY", 8, H100, 96, {"rack": "r1", "switch": "s1"}, ib),
            node("gpu-a2", "READY", 8, H100, 96, {"rack": "r1", "switch": "s1"}, ib),
            node("gpu-b1", "DRAINED", 8, A100, 64, {"rack": "r2", "switch": "s2"}, ib,
                 reason="drained by alice: NVMe swap, back Thursday"),
            node("gpu-b2", "LOST", 4, A100, 64, {"rack": "r2", "switch": "s2"}, ib,
                 reason="silent for 14s (heartbeat timeout 10s); its jobs were requeued", hb_age=14.2),
            node("cpu-c1", "READY", 0, "", 64, {"rack": "r3"}, [{"name": "eth0", "kind": "ETHERNET", "gbps": 25}], nvme=1),
        ]

        def res(nodes, gpus, ranks=0, **kw):
            r = {"nodes": nodes, "gpus_per_node": gpus, "ranks_per_node": ranks or gpus or 1}
            r.update(kw)
            return r

        def spec(name, queue, command, resources, **kw):
            s = {"name": name, "queue": queue, "command": command, "resources": resources,
                 "working_dir": "/home/alice/exp", "grace_period": 30}
            s.update(kw)
            return s

        def alloc(node, group_rank, gpus, ranks, **kw):
            a = {"node": node, "group_rank": group_rank, "gpu_indices": gpus, "ranks": ranks,
                 "address": self.node(node)["inventory"]["address"], "cpus": 16, "memory_bytes": 128 * GIB}
            a.update(kw)
            return a

        train = {"input_dim": 1024, "hidden_dim": 4096, "hidden_layers": 4, "classes": 64, "batch_per_rank": 256,
                 "steps": self.TRAIN_TOTAL, "learning_rate": 0.001, "precision": "BF16", "metrics_every": 10,
                 "checkpoint_every": 1000, "data": {"synthetic": True}}
        self.jobs = {
            "1": {"id": "1", "user": "alice", "state": "RUNNING", "attempt": 1, "world_size": 8,
                  "reason": "all 8 ranks running",
                  "spec": spec("mlp-h100", "research", [], res(2, 4, nvme_bytes_per_node=500000000000),
                               train=train, time_limit=6 * 3600, env={"PYTHONUNBUFFERED": "1"},
                               checkpoint_dir="/shared/ckpt/{job}"),
                  "allocations": [alloc("gpu-a2", 1, [0, 1, 2, 3], [4, 5, 6, 7], nic_gbps=100, nvme_bytes=500000000000),
                                  alloc("gpu-a1", 0, [0, 1, 2, 3], [0, 1, 2, 3], nic_gbps=100, nvme_bytes=500000000000)],
                  "master_addr": self.node("gpu-a1")["inventory"]["address"], "master_port": 29500,
                  "create_time": self.train_start - 4, "start_time": self.train_start,
                  "events": [(self.train_start - 4, "JOB_STATE_UNSPECIFIED", "PENDING", "submitted by alice"),
                             (self.train_start - 1, "PENDING", "SCHEDULED", "placed on gpu-a1, gpu-a2 (switch s1)"),
                             (self.train_start, "SCHEDULED", "RUNNING", "all 8 ranks running")]},
            "2": {"id": "2", "user": "bob", "state": "PENDING", "attempt": 1, "world_size": 32,
                  "reason": ("needs 4 nodes x (8 GPUs, NVIDIA H100 80GB HBM3); the fleet has only 2 such nodes "
                             "of 4 even when idle, 0 fit now; reserved: expected to start by "
                             "2026-12-03 09:31:00 UTC (in 1h58m) on gpu-a1, gpu-a2 and 2 more, when jobs 1, 3 "
                             "end at the latest (time limits)"),
                  "spec": spec("pretrain-7b", "research", ["/usr/bin/python3", "pretrain.py", "--config", "7b.yaml"],
                               res(4, 8, gpu_models=[H100], min_gpu_memory_bytes=80 * GIB), priority=5,
                               time_limit=3 * 86400),
                  "create_time": t0 - 1500, "estimated_start_time": t0 + 7080,
                  "events": [(t0 - 1500, "JOB_STATE_UNSPECIFIED", "PENDING", "submitted by bob")]},
            "3": {"id": "3", "user": "bob", "state": "RUNNING", "attempt": 2, "world_size": 2, "retries_used": 1,
                  "reason": "all 2 ranks running",
                  "spec": spec("eval-sweep", "default", ["/usr/bin/python3", "eval.py", "--sweep", "lr"], res(1, 2),
                               time_limit=2 * 3600, max_retries=2),
                  "allocations": [alloc("gpu-a1", 0, [4, 5], [0, 1])],
                  "master_addr": self.node("gpu-a1")["inventory"]["address"], "master_port": 29501,
                  "create_time": t0 - 2400, "start_time": t0 - 1700,
                  "events": [(t0 - 2400, "JOB_STATE_UNSPECIFIED", "PENDING", "submitted by bob"),
                             (t0 - 2399, "PENDING", "SCHEDULED", "placed on gpu-b2"),
                             (t0 - 2398, "SCHEDULED", "RUNNING", "all 2 ranks running"),
                             (t0 - 1710, "RUNNING", "PENDING", "node gpu-b2 lost (silent past the heartbeat timeout); requeued, retry 1 of 2"),
                             (t0 - 1701, "PENDING", "SCHEDULED", "placed on gpu-a1"),
                             (t0 - 1700, "SCHEDULED", "RUNNING", "all 2 ranks running")]},
            "4": {"id": "4", "user": "alice", "state": "PENDING", "attempt": 1, "world_size": 1,
                  "reason": "waits for job 1 (after_ok) to succeed",
                  "spec": spec("export", "research", ["/usr/local/bin/export-ckpt"], res(1, 1), after_ok=["1"],
                               time_limit=3600),
                  "create_time": t0 - 30,
                  "events": [(t0 - 30, "JOB_STATE_UNSPECIFIED", "PENDING", "submitted by alice")]},
            "5": {"id": "5", "user": "carol", "state": "SUCCEEDED", "attempt": 1, "world_size": 1,
                  "reason": "all 1 ranks exited 0",
                  "spec": spec("smoke", "default", ["/bin/true"], res(1, 0), time_limit=600),
                  "allocations": [alloc("cpu-c1", 0, [], [0])],
                  "create_time": t0 - 900, "start_time": t0 - 899, "end_time": t0 - 898,
                  "rank_exits": [{"rank": 0, "node": "cpu-c1", "exit_code": 0, "peak_memory_bytes": 2 * 1024 ** 2}],
                  "events": [(t0 - 900, "JOB_STATE_UNSPECIFIED", "PENDING", "submitted by carol"),
                             (t0 - 899.5, "PENDING", "SCHEDULED", "placed on cpu-c1"),
                             (t0 - 899, "SCHEDULED", "RUNNING", "all 1 ranks running"),
                             (t0 - 898, "RUNNING", "SUCCEEDED", "all 1 ranks exited 0")]},
            "6": {"id": "6", "user": "carol", "state": "FAILED", "attempt": 1, "world_size": 2, "exit_code": 137,
                  "reason": "rank 1 on gpu-b1 was killed by signal 9 (out of memory: peak 118.2 GiB of 128 GiB); max_retries 0 spent",
                  "spec": spec("oom-test", "default", ["/usr/bin/python3", "big.py"], res(1, 2), time_limit=600),
                  "allocations": [alloc("gpu-b1", 0, [0, 1], [0, 1])],
                  "create_time": t0 - 3700, "start_time": t0 - 3650, "end_time": t0 - 3300,
                  "rank_exits": [{"rank": 0, "node": "gpu-b1", "exit_code": 143, "signal": 15, "peak_memory_bytes": 60 * GIB,
                                  "message": "stopped: the job is failing"},
                                 {"rank": 1, "node": "gpu-b1", "exit_code": 137, "signal": 9, "peak_memory_bytes": 127 * GIB,
                                  "message": "killed by signal 9 (out of memory)"}],
                  "events": [(t0 - 3700, "JOB_STATE_UNSPECIFIED", "PENDING", "submitted by carol"),
                             (t0 - 3651, "PENDING", "SCHEDULED", "placed on gpu-b1"),
                             (t0 - 3650, "SCHEDULED", "RUNNING", "all 2 ranks running"),
                             (t0 - 3300, "RUNNING", "FAILED", "rank 1 was killed by signal 9 (out of memory)")]},
            # A name and reason with markup: the page must show them as text.
            "7": {"id": "7", "user": "mallory", "state": "CANCELLED", "attempt": 1, "world_size": 1,
                  "reason": "cancelled by mallory: <b>not bold</b> <img src=x onerror=alert(1)>",
                  "spec": spec("<script>alert('x')</script>", "default", ["/bin/sleep", "100"], res(1, 0)),
                  "create_time": t0 - 600, "start_time": t0 - 590, "end_time": t0 - 500,
                  "events": [(t0 - 600, "JOB_STATE_UNSPECIFIED", "PENDING", "submitted by mallory"),
                             (t0 - 590, "PENDING", "RUNNING", "all 1 ranks running"),
                             (t0 - 500, "RUNNING", "CANCELLED", "cancelled by mallory: <i>why</i>")]},
        }
        self.queues = [
            {"spec": {"name": "default", "weight": 1}, "defined": False, "version": 0},
            {"spec": {"name": "research", "weight": 2, "cohort": "lab", "default_time_limit": 4 * 3600,
                      "max_time_limit": 3 * 86400,
                      "quotas": [{"gpu_model": H100, "nominal_gpus": 16, "borrowing_limit_gpus": 8}]},
             "defined": True, "version": 7, "update_time": t0 - 86400, "updated_by": "admin"},
        ]

    def node(self, name):
        return next(n for n in self.nodes if n["name"] == name)

    # -- the training job's history, a function of the clock --
    def train_seconds(self):
        return max(0, int(time.time() - self.train_start))

    def point(self, i):
        """Point i (1-based): step, loss, samples/s."""
        step = min(self.TRAIN_TOTAL, i * self.STEPS_PER_SECOND)
        loss = 0.35 + 2.4 * math.exp(-step / 900.0) + 0.04 * math.sin(i * 1.7) * math.exp(-step / 3000.0)
        sps = 24500 + 900 * math.sin(i / 3.0) + (-6000 if i % 37 == 0 else 0)
        t = self.train_start + i
        return {"job_id": "1", "attempt": 1, "rank": 0, "step": step, "loss": loss, "samples_per_second": sps,
                "step_seconds": 8 * 256 / sps, "compute_seconds": 0.061, "allreduce_seconds": 0.012,
                "data_wait_seconds": 0.0008, "allreduce_bus_gbps": 182.5, "peak_memory_bytes": int(21.4 * GIB),
                "total_steps": self.TRAIN_TOTAL, "mfu": 0.41, "time": t}

    def log_chunk(self, seq):
        """Chunk seq (1-based) of job 1: each second rank 0 writes a line,
        and rank 1 one in two writes (split mid-line)."""
        second, part = divmod(seq - 1, 3)
        p = self.point(second + 1)
        line = (f"step {p['step']}/{self.TRAIN_TOTAL} loss {p['loss']:.4f} samples/s {p['samples_per_second']:.0f} "
                f"step {p['step_seconds'] * 1000:.1f}ms\n")
        if part == 0:
            rank, data = 0, line
        else:
            half = len(line) // 2
            rank, data = 1, (f"[r1 ✓] {line[:half]}" if part == 1 else line[half:])
        return {"job_id": "1", "attempt": 1, "rank": rank, "stream": "STDOUT", "data": data.encode(),
                "time": self.train_start + second + 1, "seq": seq, "end_offset": seq * 40}

    def logs(self, job_id):
        if job_id == "1":
            n = self.train_seconds() * 3
            return n, self.log_chunk
        canned = {
            "3": [(0, "STDOUT", "evaluating lr=1e-4 on 2 GPUs\n"), (1, "STDOUT", "lr=1e-4 acc 0.812\n"),
                  (0, "STDERR", "warning: dataset shard 7 is slow (12 MB/s)\n")],
            "5": [(0, "STDOUT", "")],
            "6": [(0, "STDOUT", "loading 118 GiB of weights\n"),
                  (1, "STDERR", "✗ Traceback (most recent call last):\n  File \"big.py\", line 3\nMemoryError\n")],
            "7": [(0, "STDOUT", "<script>alert('log')</script>\n")],
        }.get(job_id, [])
        chunks = [{"job_id": job_id, "attempt": 1, "rank": r, "stream": st, "data": d.encode(),
                   "time": self.t0 - 100, "seq": i + 1, "end_offset": len(d)} for i, (r, st, d) in enumerate(canned)]
        return len(chunks), lambda seq: chunks[seq - 1]

    def job(self, job_id):
        j = self.jobs.get(job_id)
        if j is None:
            raise ApiError(404, "NOT_FOUND", f"job {job_id} does not exist")
        out = {k: v for k, v in j.items() if k != "events"}
        out["spec"] = dict(j["spec"])
        if job_id == "1":
            n = self.train_seconds()
            if n:
                out["metrics"] = self.point(n)
        return out

    # -- the methods --
    def call(self, method, req, user):
        name = method.split("/")[1]
        return getattr(self, name)(req, user)

    def GetJob(self, req, user):
        return self.job(req.get("job_id", ""))

    def ListJobs(self, req, user):
        states = set(req.get("states") or [])
        limit = int(req.get("page_size") or 100)
        if limit < 0:
            raise ApiError(400, "INVALID_ARGUMENT", "page_size: must not be negative")
        limit = min(limit, 1000)
        below = int(req.get("page_token") or 10 ** 9)
        out, token = [], ""
        for jid in sorted(self.jobs, key=int, reverse=True):
            if int(jid) >= below:
                continue
            j = self.jobs[jid]
            if states and j["state"] not in states:
                continue
            if req.get("user") and j["user"] != req["user"]:
                continue
            if req.get("queue") and j["spec"]["queue"] != req["queue"]:
                continue
            if len(out) == limit:
                token = str(int(jid) + 1)
                break
            out.append(self.job(jid))
        return {"jobs": out, "next_page_token": token}

    def ExplainJob(self, req, user):
        job = self.job(req.get("job_id", ""))
        pending = [j for j in sorted(self.jobs, key=int) if self.jobs[j]["state"] == "PENDING"]
        pos = pending.index(job["id"]) + 1 if job["id"] in pending else 0
        ahead = [{"job_id": j, "user": self.jobs[j]["user"], "priority": self.jobs[j]["spec"].get("priority", 0),
                  "nodes": self.jobs[j]["spec"]["resources"]["nodes"],
                  "gpus_per_node": self.jobs[j]["spec"]["resources"]["gpus_per_node"],
                  "effective_priority": 55.0, "queue": self.jobs[j]["spec"]["queue"],
                  **({"estimated_start_time": self.jobs[j]["estimated_start_time"]}
                     if "estimated_start_time" in self.jobs[j] else {})}
                 for j in pending[:pos - 1]] if pos else []
        prio = job["spec"].get("priority", 0)
        return {"job": job, "position": pos, "pending": len(pending) if pos else 0, "ahead": ahead,
                "gpus_ahead": sum(a["nodes"] * a["gpus_per_node"] for a in ahead),
                "priority": {"priority": prio, "submit_order": int(job["id"]), "effective": prio + 50 + 0.4,
                             "fair_share_factor": 0.5, "fair_share_weight": 100, "age_factor": 0.04, "age_weight": 10,
                             "note": f"{prio} + 100 x 0.500 (fair share) + 10 x 0.040 (age) = {prio + 50.4:.1f}"}}

    def GetQueue(self, req, user):
        live = [n for n in self.nodes if n["state"] != "LOST"]
        total = sum(len(n["inventory"]["gpus"]) for n in live)
        used = sum(len(a["gpu_indices"]) for j in self.jobs.values() if j["state"] in ("RUNNING", "SCHEDULED")
                   for a in j.get("allocations", []))
        ready_free = sum(len(n["inventory"]["gpus"]) for n in self.nodes if n["state"] == "READY") - used
        queues = []
        for q in sorted({j["spec"]["queue"] for j in self.jobs.values()} | {"default"}):
            js = [j for j in self.jobs.values() if j["spec"]["queue"] == q]
            queues.append({
                "queue": q,
                "pending_jobs": sum(j["state"] == "PENDING" for j in js),
                "running_jobs": sum(j["state"] in ("RUNNING", "SCHEDULED") for j in js),
                "gpus_in_use": sum(len(a["gpu_indices"]) for j in js if j["state"] == "RUNNING" for a in j.get("allocations", [])),
                "gpus_requested_pending": sum(j["spec"]["resources"]["nodes"] * j["spec"]["resources"]["gpus_per_node"]
                                              for j in js if j["state"] == "PENDING"),
            })
        return {"queues": queues, "total_gpus": total, "gpus_in_use": used, "gpus_free": ready_free,
                "nodes_ready": sum(n["state"] == "READY" for n in self.nodes),
                "nodes_drained": sum(n["state"] == "DRAINED" for n in self.nodes),
                "nodes_lost": sum(n["state"] == "LOST" for n in self.nodes), "gpus_fragmented": 2}

    def GetJobMetrics(self, req, user):
        job = self.job(req.get("job_id", ""))
        n = self.train_seconds() if job["id"] == "1" else 0
        limit = int(req.get("page_size") or 10000)
        limit = 10000 if limit == 0 or limit > 10000 else limit
        after = int(req.get("page_token") or 0)
        pts = [self.point(i) for i in range(after + 1, min(n, after + limit) + 1)]
        return {"points": pts, "next_page_token": str(after + limit) if len(pts) == limit else ""}

    def WatchJob(self, req, user):
        j = self.jobs.get(req.get("job_id", ""))
        if j is None:
            raise ApiError(404, "NOT_FOUND", f"job {req.get('job_id', '')} does not exist")
        after = int(req.get("after_seq") or 0)
        out = [{"job_id": j["id"], "seq": i + 1, "time": t, "from_state": a, "to_state": b,
                "attempt": j["attempt"] if i == len(j["events"]) - 1 else 1, "reason": r}
               for i, (t, a, b, r) in enumerate(j["events"]) if i + 1 > after]
        if j["state"] in ("PENDING", "SCHEDULED", "RUNNING"):
            time.sleep(0.3)  # the gateway waits for the stream to go idle
        return {"messages": out}

    def StreamLogs(self, req, user):
        job = self.job(req.get("job_id", ""))
        if job["user"] == "mallory":
            raise ApiError(403, "PERMISSION_DENIED", "the logs of mallory's jobs are theirs and admins' only")
        n, chunk = self.logs(job["id"])
        after = int(req.get("after_seq") or 0)
        rank = req.get("rank")
        out = []
        for seq in range(after + 1, n + 1):
            c = chunk(seq)
            if not req.get("all_ranks") and rank not in (None, -1) and c["rank"] != int(rank or 0):
                continue
            out.append(c)
            if len(out) == 2000:
                break
        return {"messages": out}

    def ListNodes(self, req, user):
        limit = int(req.get("page_size") or 500)
        limit = min(limit, 2000)
        after = req.get("page_token") or ""
        names = [n for n in sorted(self.nodes, key=lambda n: n["name"]) if n["name"] > after]
        page = names[:limit]
        return {"nodes": [self.node_view(n) for n in page],
                "next_page_token": page[-1]["name"] if len(names) > limit else "", "security_warning": ""}

    def GetNode(self, req, user):
        for n in self.nodes:
            if n["name"] == req.get("name"):
                return self.node_view(n)
        raise ApiError(404, "NOT_FOUND", f"node {req.get('name')} does not exist")

    def node_view(self, n):
        out = {k: v for k, v in n.items() if k != "hb_age"}
        jobs = [j for j in self.jobs.values() if j["state"] in ("RUNNING", "SCHEDULED")
                for a in j.get("allocations", []) if a["node"] == n["name"]]
        allocs = [a for j in jobs for a in j["allocations"] if a["node"] == n["name"]]
        out["usage"] = {"gpus_in_use": sorted(g for a in allocs for g in a["gpu_indices"]),
                        "cpus_in_use": sum(a["cpus"] for a in allocs),
                        "memory_bytes_in_use": sum(a["memory_bytes"] for a in allocs),
                        "nvme_bytes_in_use": sum(a.get("nvme_bytes", 0) for a in allocs),
                        "nic_gbps_in_use": sum(a.get("nic_gbps", 0) for a in allocs),
                        "job_ids": sorted({j["id"] for j in jobs}, key=int)}
        out["last_heartbeat_time"] = time.time() - n["hb_age"]
        return out

    def ListQueues(self, req, user):
        out = []
        for q in self.queues:
            js = [j for j in self.jobs.values() if j["spec"]["queue"] == q["spec"]["name"]]
            gpus = sum(len(a["gpu_indices"]) for j in js if j["state"] == "RUNNING" for a in j.get("allocations", []))
            out.append(dict(q, pending_jobs=sum(j["state"] == "PENDING" for j in js),
                            running_jobs=sum(j["state"] == "RUNNING" for j in js),
                            gpus_in_use={H100 if q["spec"].get("quotas") else "*": gpus} if gpus else {},
                            gpus_borrowed=0))
        return {"queues": out}

    def GetShares(self, req, user):
        return {"rows": [{"queue": "research", "weight": 2, "share": 0.667, "gpu_hours": 412.5, "usage": 0.71,
                          "fair_share_factor": 0.48, "running_gpus": 8, "pending_jobs": 2},
                         {"queue": "default", "weight": 1, "share": 0.333, "gpu_hours": 168.0, "usage": 0.29,
                          "fair_share_factor": 0.55, "running_gpus": 2, "pending_jobs": 0}],
                "half_life": 7 * 86400, "fair_share_weight": 100, "age_weight": 10, "max_age": 7 * 86400}

    def WhoAmI(self, req, user):
        return user

    def PlanResources(self, req, user):
        return plan(req.get("model") or {}, self)


CATALOGUE = {  # name: (memory bytes, bf16 TFLOP/s)
    "H200-141GB": (143771 * 2 ** 20, 989), "H100-SXM-80GB": (81559 * 2 ** 20, 989),
    "A100-80GB": (81920 * 2 ** 20, 312), "A100-40GB": (40960 * 2 ** 20, 312), "L40S-48GB": (46068 * 2 ** 20, 362),
}


def plan(m, cluster):
    """A rough planner (the real one is common/planner/): enough arithmetic
    for the page to show a Plan of the right shape."""
    t = m.get("transformer") or {}
    shape = all(t.get(k) for k in ("layers", "hidden_size", "heads", "vocab_size"))
    params = float(m.get("parameters") or 0)
    if bool(params) + bool(shape) + bool(m.get("mlp")) != 1:
        raise ApiError(400, "INVALID_ARGUMENT",
                       "parameters: required: give parameters (like 7.5e9), a transformer shape or an mlp shape"
                       if not (params or shape) else "parameters: give one of parameters, transformer and mlp, not several")
    seq = int(t.get("sequence_length") or 0)
    if shape:
        L, hs, V = int(t["layers"]), int(t["hidden_size"]), int(t["vocab_size"])
        params = 12 * L * hs * hs + V * hs
    prec = m.get("precision") or "BF16"
    sharding = m.get("sharding") or "NO_SHARDING"
    micro = int(m.get("micro_batch_size") or 1)
    tp, pp = int(m.get("tensor_parallel") or 1), int(m.get("pipeline_parallel") or 1)
    per_node = int(m.get("gpus_per_node") or 8)
    mfu = float(m.get("mfu") or 0.4)
    wb = 4 if prec == "FP32" else 2
    weights, grads, opt, master = wb * params, wb * params, 8 * params, (0 if prec == "FP32" else 4 * params)
    act = (34 * seq * (shape and int(t["hidden_size"]) or 0) * micro * (shape and int(t["layers"]) or 0)) if shape else 0
    fleet = sorted({g["model"] for n in cluster.nodes for g in n["inventory"]["gpus"]})
    wanted = m.get("gpu_model") or ""
    models = [(x, CATALOGUE.get(x, (80 * GIB, 312 if "A100" in x else 989))) for x in ([wanted] if wanted else fleet or list(CATALOGUE))]
    gpus = int(m.get("gpus") or 0)
    fits, chosen = [], None
    for name, (mem, tflops) in models:
        need_dp = 1
        while True:
            dp = gpus // (tp * pp) if gpus else need_dp
            div = {"ZERO_1": (1, 1, dp), "ZERO_2": (1, dp, dp), "ZERO_3": (dp, dp, dp)}.get(sharding, (1, 1, 1))
            states = (weights / div[0] + grads / div[1] + (opt + master) / div[2]) / (tp * pp)
            total = states + act / tp + max(GIB, 0.05 * (states + act))
            ok = total <= mem / 1.05
            if ok or gpus or need_dp >= 4096 or sharding == "NO_SHARDING":
                break
            need_dp *= 2
        in_fleet = sum(1 for n in cluster.nodes if n["state"] != "LOST" for g in n["inventory"]["gpus"] if g["model"] == name)
        fits.append({"model": name, "memory_bytes": mem, "peak_tflops": tflops, "fits": ok,
                     "max_micro_batch": micro if ok else 0, "in_fleet": in_fleet,
                     "note": "" if ok else "try ZeRO-3 or more GPUs"})
        if chosen is None and ok:
            chosen = (name, mem, tflops, dp, total, states)
    if chosen is None:
        name, (mem, tflops) = models[0]
        chosen = (name, mem, tflops, dp, total, states)
    name, mem, tflops, dp, total, states = chosen
    n = dp * tp * pp
    tokens_step = (m.get("global_batch_size") or micro * dp) * max(seq, 1)
    tps = n * tflops * 1e12 * mfu / (6 * params)
    train_tokens = float(m.get("train_tokens") or m.get("dataset_tokens") or 0)
    warnings = [] if fits and fits[0]["fits"] else [f"does not fit on {name} GPUs as asked: shard (ZeRO-3) or add GPUs"]
    if not shape:
        warnings.append("activations are not included: give the transformer shape (--layers --hidden --heads --vocab --seq) to count them")
    model = {"parameters": params if not shape else 0, "transformer": {**{k: 0 for k in ("layers", "hidden_size", "heads", "vocab_size", "sequence_length", "ffn_hidden_size")}, **t},
             "precision": prec, "optimizer": m.get("optimizer") or "ADAMW", "sharding": sharding, "tensor_parallel": tp,
             "pipeline_parallel": pp, "micro_batch_size": micro, "global_batch_size": m.get("global_batch_size") or micro * dp,
             "recompute": m.get("recompute") or "NO_RECOMPUTE", "sequence_parallel": bool(m.get("sequence_parallel")),
             "dataset_tokens": m.get("dataset_tokens") or 0, "dataset_bytes": m.get("dataset_bytes") or 0,
             "gpu_model": wanted, "mfu": mfu, "gpus": gpus, "gpus_per_node": per_node,
             "checkpoints_kept": m.get("checkpoints_kept") or 2, "comm_share": m.get("comm_share") or 0.25,
             "train_tokens": m.get("train_tokens") or 0}
    return {
        "model": model, "parameters": params,
        "memory_per_gpu": {"weights_bytes": int(weights / tp / pp), "gradients_bytes": int(grads / tp / pp),
                           "optimizer_bytes": int(opt / tp / pp), "master_weights_bytes": int(master / tp / pp),
                           "activations_bytes": int(act / tp), "workspace_bytes": int(max(GIB, 0.05 * (states + act))),
                           "total_bytes": int(total)},
        "gpus_that_fit": fits, "gpus": n, "nodes": math.ceil(n / per_node), "data_parallel": dp,
        "checkpoint_bytes": int(14 * params), "nvme_bytes_per_node": int(28 * params),
        "read_bytes_per_second_per_node": 0, "allreduce_bytes_per_step": int(2 * params),
        "nic_gbps_needed": 0 if n <= per_node else round(2 * params * 8 / 1e9 / 2, 1),
        "step_seconds": tokens_step / tps, "tokens_per_second": tps,
        "train_seconds": train_tokens / tps if train_tokens else 0,
        "warnings": warnings,
        "arithmetic": [f"parameters = {params:.3g}" + (" (given)" if not shape else " (from the shape)"),
                       f"model states = {(weights + grads + opt + master) / params:.0f} B/param x {params:.3g} = {(weights + grads + opt + master) / 1e9:.1f} GB",
                       f"memory per GPU = {total / 1e9:.1f} GB on {name} ({mem / GIB:.1f} GiB)",
                       f"GPUs = {dp} x {tp} x {pp} = {n}; nodes = ceil({n} / {per_node}) = {math.ceil(n / per_node)}",
                       f"tokens/s = {n} x {tflops}e12 x {mfu} / (6 x {params:.3g}) = {tps:.0f}",
                       "(mock_server.py: rough numbers; the scheduler's planner is common/planner/)"],
        "gpu_model": name,
    }


# ----------------------------------------------------------------- server ----

def make_handler(args, schema, cluster):
    upstream_ctx = None
    if args.upstream and args.upstream.startswith("https:"):
        upstream_ctx = ssl.create_default_context(cafile=args.upstream_ca) if args.upstream_ca else ssl._create_unverified_context()
        upstream_ctx.check_hostname = False

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):
            if args.verbose:
                sys.stderr.write("mock: " + fmt % a + "\n")

        def send(self, status, body, ctype="application/json", extra=()):
            data = body if isinstance(body, bytes) else body.encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            for k, v in extra:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def error(self, status, code, message):
            self.send(status, json.dumps({"code": code, "message": message}))

        def do_GET(self):
            path = self.path.split("?")[0]
            if path == "/api/info":
                if args.upstream:
                    return self.proxy("GET", b"")
                return self.send(200, json.dumps({"auth_enabled": bool(args.token), "version": "0.1.0-mock"}))
            if path.startswith("/api/"):
                return self.error(405, "INVALID_ARGUMENT", "POST the request message as JSON")
            name = "index.html" if path == "/" else path.lstrip("/")
            if name not in ("index.html", "app.js", "style.css"):
                return self.send(404, f"nothing at {path}; the dashboard is at /\n", "text/plain; charset=utf-8")
            with open(os.path.join(WEB, name), "rb") as f:
                body = f.read()
            self.send(200, body, TYPES[os.path.splitext(name)[1]],
                      [("Content-Security-Policy", CSP)])

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path = self.path.split("?")[0]
            if not path.startswith("/api/"):
                return self.send(405, "use GET\n", "text/plain")
            method = path[5:]
            if args.upstream:
                return self.proxy("POST", body)
            if method not in READ_METHODS:
                return self.error(404, "NOT_FOUND", f"no API method '{method}' here; the dashboard's API serves "
                                  "the read methods of xl.v1; use xlctl or gRPC for the rest")
            user = {"name": "alice", "kind": "user", "admin": True, "auth_enabled": bool(args.token)}
            if args.token:
                auth = self.headers.get("Authorization") or ""
                if not auth:
                    return self.error(401, "UNAUTHENTICATED", "no credential: this scheduler takes calls only "
                                      "with a user's token (\"authorization: Bearer <token>\")")
                if auth != "Bearer " + args.token:
                    return self.error(401, "UNAUTHENTICATED", "the token is not valid (unknown, expired or revoked)")
            else:
                user = {"name": self.headers.get("x-xl-user") or "anonymous", "kind": "anonymous",
                        "auth_enabled": False}
            req_type, resp_type, streaming = schema.methods[method]
            try:
                req = json.loads(body or b"{}")
                schema.check(req_type, req)
            except (ValueError, json.JSONDecodeError) as e:
                return self.error(400, "INVALID_ARGUMENT", f"the body is not a xl.v1.{req_type} in JSON: {e}")
            try:
                resp = cluster.call(method, req, user)
            except ApiError as e:
                return self.error(e.status, e.code, e.message)
            if streaming:
                # As the gateway: at most 2000 messages, and it stops once
                # the answer passes 4 MiB.
                msgs, size = [], 0
                for x in resp["messages"][:2000]:
                    msgs.append(schema.emit(resp_type, x))
                    size += len(json.dumps(msgs[-1], separators=(",", ":"))) + 1
                    if size >= 4 << 20:
                        break
                out = {"messages": msgs}
            else:
                out = schema.emit(resp_type, resp)
            self.send(200, json.dumps(out))

        def proxy(self, verb, body):
            headers = {"Content-Type": "application/json"}
            for h in ("Authorization", "x-xl-user"):
                if self.headers.get(h):
                    headers[h] = self.headers[h]
            req = urllib.request.Request(args.upstream.rstrip("/") + self.path, data=body if verb == "POST" else None,
                                         method=verb, headers=headers)
            try:
                with urllib.request.urlopen(req, context=upstream_ctx, timeout=30) as r:
                    self.send(r.status, r.read())
            except urllib.error.HTTPError as e:
                self.send(e.code, e.read())
            except OSError as e:
                self.error(503, "UNAVAILABLE", f"mock_server.py: upstream {args.upstream}: {e}")

    return Handler


def expect_json(schema, cluster):
    """What xlctl nodes -o json and xlctl list -o json print for the mock
    (xlctl leaves out fields with default values)."""
    nodes = schema.emit("ListNodesResponse", cluster.ListNodes({"page_size": 2000}, None), defaults=False)
    jobs = schema.emit("ListJobsResponse", cluster.ListJobs({"page_size": 1000}, None), defaults=False)
    return {"nodes": nodes, "jobs": jobs}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    ap.add_argument("--token", default="", help="require this bearer token (auth on)")
    ap.add_argument("--expect-out", default="", help="write the xlctl-shaped expect.json for check.mjs here")
    ap.add_argument("--upstream", default="", help="pass /api/ to this scheduler dashboard URL instead")
    ap.add_argument("--upstream-ca", default="", help="CA certificate of the upstream (else not verified)")
    ap.add_argument("--history", type=int, default=45,
                    help="seconds job 1 has trained at start: its metrics points and 3 log chunks each")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    schema = Schema(PROTO)
    cluster = Cluster(schema, args.history)
    if args.expect_out:
        with open(args.expect_out, "w") as f:
            json.dump(expect_json(schema, cluster), f, indent=1)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(args, schema, cluster))
    server.daemon_threads = True
    print(f"mock_server.py: dashboard on http://{args.host}:{server.server_address[1]}/"
          f"{' (passing /api/ to ' + args.upstream + ')' if args.upstream else ''}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
