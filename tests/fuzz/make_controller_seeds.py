#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_controller (corpus/fuzz_controller/):
scenarios of RPC calls and agent messages in the harness's input format,
[op][length lo][length hi][payload], with protobuf text-format payloads (op
bit 7) and, where protoc is found, the same scenarios in the binary wire
format. Run it after changing the harness's ops or the protos."""

import os
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, "..", "..", "proto")
OUT = os.path.join(HERE, "corpus", "fuzz_controller")

OPS = {
    "submit": (0, "xl.v1.SubmitJobRequest"), "get": (1, "xl.v1.GetJobRequest"),
    "list": (2, "xl.v1.ListJobsRequest"), "cancel": (3, "xl.v1.CancelJobRequest"),
    "queue": (4, None), "watch": (5, "xl.v1.WatchJobRequest"),
    "metrics": (6, "xl.v1.GetJobMetricsRequest"), "nodes": (7, "xl.v1.ListNodesRequest"),
    "node": (8, "xl.v1.GetNodeRequest"), "drain": (9, "xl.v1.DrainNodeRequest"),
    "resume": (10, "xl.v1.DrainNodeRequest"), "register": (11, "xl.v1.Register"),
    "agent": (12, "xl.v1.AgentMessage"), "disconnect": (13, None),
    "put": (14, "xl.v1.RendezvousPutRequest"), "rget": (15, "xl.v1.RendezvousGetRequest"),
    "tick": (16, None), "plan": (17, "xl.v1.PlanResourcesRequest"), "echo": (18, None),
    "logs": (19, "xl.v1.StreamLogsRequest"),
}

SCENARIOS = {
    "lifecycle": [
        ("submit", 'spec { name: "a" command: "/bin/echo" command: "hi" '
                   'resources { gpus_per_node: 2 } env { key: "K" value: "v" } }'),
        ("tick", b"\x64\x00"), ("echo", b"\x00"),
        ("agent", 'log { job_id: "1" attempt: 1 rank: 0 stream: STDOUT data: "hi\\n" '
                  'end_offset: 3 } seq: 1'),
        ("agent", 'metrics { job_id: "1" attempt: 1 rank: 0 step: 5 loss: 0.5 total_steps: 10 }'),
        ("agent", 'heartbeat { seq: 7 }'),
        ("put", 'key: "nccl" value: "abc"'), ("rget", 'keys: "nccl" keys: "other"'),
        ("tick", b"\xe8\x03"), ("echo", b"\x01"), ("tick", b"\x10\x00"),
        ("get", 'job_id: "1"'), ("list", 'page_size: 10'), ("watch", 'job_id: "1"'),
        ("logs", 'job_id: "1" all_ranks: true'), ("metrics", 'job_id: "1"'),
        ("queue", b""),
    ],
    "cancel": [
        ("submit", 'spec { command: "/bin/sleep" command: "100" resources { nodes: 2 } }'),
        ("submit", 'spec { command: "/bin/true" queue: "q2" priority: 5 }'),
        ("tick", b"\x01\x00"), ("echo", b"\x00"),
        ("cancel", 'job_id: "1" reason: "stop"'), ("cancel", 'job_id: "2"'),
        ("echo", b"\x1f"), ("tick", b"\x00\x10"),
        ("list", 'states: CANCELLED states: PENDING user: "alice" queue: "q2"'),
        ("list", 'page_token: "2"'),
    ],
    "nodes": [
        ("register", 'name: "n3" instance_id: "x" inventory { hostname: "n3" cpus: 4 '
                     'memory_bytes: 1000 gpus { index: 0 model: "A100" memory_bytes: 1 } '
                     'gpus { index: 3 } nics { name: "ib0" kind: INFINIBAND gbps: 200 } '
                     'labels { key: "rack" value: "r1" } } '
                     'ranks { job_id: "9" attempt: 1 rank: 0 state: RANK_RUNNING }'),
        ("drain", 'name: "n3" reason: "maintenance"'), ("node", 'name: "n3"'),
        ("resume", 'name: "n3"'), ("nodes", 'page_size: 1'), ("nodes", 'page_token: "n1"'),
        ("disconnect", b""), ("tick", b"\xff\xff"), ("node", 'name: "n1"'),
        ("drain", 'name: "nope"'),
    ],
    "retries": [
        ("submit", 'idempotency_key: "k1" spec { command: "/bin/false" max_retries: 2 '
                   'time_limit { seconds: 5 } grace_period { seconds: 1 } }'),
        ("submit", 'idempotency_key: "k1" spec { command: "/bin/false" }'),
        ("tick", b"\x01\x00"), ("echo", b"\x07"), ("tick", b"\x00\x40"),
        ("echo", b"\x00"), ("tick", b"\x10\x27"), ("echo", b"\x03"), ("tick", b"\x10\x27"),
        ("agent", 'rank_status { job_id: "1" attempt: 1 rank: 0 state: RANK_EXITED '
                  'exit_code: 1 processes_remaining: true }'),
        ("watch", 'job_id: "1" after_seq: 1'),
    ],
    "train": [
        ("submit", 'spec { train { input_dim: 8 hidden_dim: 8 classes: 2 steps: 10 device: "cpu" } '
                   'resources { nodes: 1 ranks_per_node: 2 } }'),
        ("submit", 'spec { command: "/bin/true" model { parameters: 7e9 precision: BF16 } }'),
        ("plan", 'model { transformer { layers: 2 hidden_size: 64 heads: 4 vocab_size: 100 '
                 'sequence_length: 16 } sharding: ZERO_3 }'),
        ("plan", 'model { mlp { input_dim: 8 hidden_dim: 8 hidden_layers: 1 classes: 2 } }'),
        ("tick", b"\x01\x00"), ("echo", b"\x00"),
        ("agent", 'metrics { job_id: "1" attempt: 1 rank: 0 step: 10 total_steps: 10 }'),
        ("metrics", 'job_id: "1" page_size: 1'), ("metrics", 'job_id: "1" page_token: "x"'),
    ],
    "hostile": [
        ("submit", 'spec { name: "a; DROP TABLE jobs;--" command: "/bin/echo" '
                   'command: "$(touch /tmp/x)" env { key: "A" value: "`id`%s%n" } '
                   'working_dir: "/tmp/../../etc" queue: "default" }'),
        ("submit", 'spec { command: "" env { key: "XL_X" value: "1" } }'),
        ("submit", 'spec { command: "x\\000y" }'),
        ("get", 'job_id: "-1"'), ("get", 'job_id: "99999999999999999999"'),
        ("cancel", 'job_id: "1\' OR 1=1"'), ("logs", 'job_id: "1" rank: -5 after_seq: -1'),
        ("list", 'page_size: -1'), ("list", 'page_size: 2147483647 page_token: "-9"'),
        ("agent", 'log { job_id: "1" attempt: 99 rank: 99 data: "x" } seq: 18446744073709551615'),
        ("put", 'scope { job_id: "1" attempt: 1 token: "wrong" } key: "k" value: "v"'),
        ("rget", 'scope { job_id: "1" } keys: "k" timeout { seconds: -1 }'),
    ],
}


def payload_bytes(kind, body, binary):
    if isinstance(body, bytes):
        return body
    if not binary:
        return body.encode()
    msg = OPS[kind][1]
    protos = [os.path.join("xl", "v1", f) for f in os.listdir(os.path.join(PROTO, "xl", "v1"))
              if f.endswith(".proto")]
    return subprocess.run(["protoc", "-I" + PROTO, "--encode=" + msg, *protos],
                          input=body.encode(), capture_output=True, check=True,
                          cwd=PROTO).stdout


def encode(steps, binary):
    out = b""
    for kind, body in steps:
        op = OPS[kind][0]
        if not binary and not isinstance(body, bytes):
            op |= 0x80
        data = payload_bytes(kind, body, binary)
        out += bytes([op]) + struct.pack("<H", len(data)) + data
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    binary = shutil.which("protoc") is not None
    for name, steps in SCENARIOS.items():
        with open(os.path.join(OUT, name + ".text"), "wb") as f:
            f.write(encode(steps, False))
        if binary:
            with open(os.path.join(OUT, name + ".bin"), "wb") as f:
                f.write(encode(steps, True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
