"""xl-train's TensorBoard event file read back by an independent decoder:
Python's protobuf (Debian's) on a minimal copy of TensorFlow's event.proto,
and a bitwise CRC-32C of its own. Every record's two CRCs hold, the first
event is the file version, and the scalars are the run's: one event per
metrics report at its step, train/loss equal to the loss xl-train printed."""

import glob
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

BUILD = os.environ.get("XL_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
TRAIN = os.path.join(BUILD, "agent", "worker", "xl-train")

# The fields of tensorflow/core/util/event.proto and summary.proto that
# scalars use, with their numbers.
EVENT_PROTO = """
syntax = "proto3";
package tbtest;
message SummaryValue { string tag = 1; float simple_value = 2; }
message Summary { repeated SummaryValue value = 1; }
message Event {
  double wall_time = 1;
  int64 step = 2;
  oneof what { string file_version = 3; Summary summary = 5; }
}
"""


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    with open(path, "rb") as f:
        blob = f.read()
    at = 0
    while at < len(blob):
        header = blob[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", blob[at + 8:at + 12])
        data = blob[at + 12:at + 12 + length]
        (data_crc,) = struct.unpack("<I", blob[at + 12 + length:at + 16 + length])
        yield header, length_crc, data, data_crc
        at += 16 + length


class TensorBoard(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="xl-tb-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        with open(os.path.join(self.tmp, "tbtest.proto"), "w") as f:
            f.write(EVENT_PROTO)
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{self.tmp}",
                        f"--python_out={self.tmp}", "tbtest.proto"], check=True, cwd=self.tmp)
        sys.path.insert(0, self.tmp)
        import tbtest_pb2
        self.pb = tbtest_pb2

    def test_a_runs_events_read_back_with_their_crcs_and_values(self):
        ckpt = os.path.join(self.tmp, "ckpt")
        env = {k: v for k, v in os.environ.items() if not k.startswith("XL_")}
        env.update(RANK="0", WORLD_SIZE="1")
        out = subprocess.run(
            [TRAIN, "--spec-json",
             '{"device": "cpu", "steps": 40, "metricsEvery": 10, "hiddenDim": 32, '
             '"inputDim": 16, "classes": 4, "batchPerRank": 16, "learningRate": 0.002}',
             "--checkpoint-dir", ckpt],
            env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        printed = {int(m.group(1)): float(m.group(2))
                   for m in re.finditer(r"step (\d+)/\d+ loss ([0-9.]+)", out.stdout)}
        self.assertEqual(sorted(printed), [10, 20, 30, 40])
        files = glob.glob(os.path.join(ckpt, "tensorboard", "events.out.tfevents.*"))
        self.assertEqual(len(files), 1, files)
        events = []
        for header, length_crc, data, data_crc in records(files[0]):
            self.assertEqual(length_crc, masked(header))
            self.assertEqual(data_crc, masked(data))
            e = self.pb.Event()
            e.ParseFromString(data)
            events.append(e)
        self.assertEqual(events[0].file_version, "brain.Event:2")
        scalars = events[1:]
        self.assertEqual([e.step for e in scalars], [10, 20, 30, 40])
        for e in scalars:
            values = {v.tag: v.simple_value for v in e.summary.value}
            self.assertAlmostEqual(values["train/loss"], printed[e.step], places=3)
            self.assertAlmostEqual(values["train/learning_rate"], 0.002, places=6)
            self.assertGreater(values["train/samples_per_second"], 0)
            self.assertGreater(values["time/step_seconds"], 0)
            for tag in ("time/compute_seconds", "time/allreduce_seconds",
                        "time/data_wait_seconds", "allreduce/bus_gbps", "memory/peak_bytes"):
                self.assertIn(tag, values)
            self.assertGreater(e.wall_time, 1.6e9)


if __name__ == "__main__":
    unittest.main()
