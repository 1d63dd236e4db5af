#!/usr/bin/python3
"""CPU training throughput: xl-train (CBLAS + Gloo) against PyTorch DDP
(python3-torch, gloo) with the same MLP, batch, ranks and threads per rank, on
six shapes from 32 to 4096 wide and 64 to 1024 inputs. The ratio is of
whole-process timings: from starting the ranks to the last one's exit, the
same steps on both sides (xl-train making a fresh teacher batch every step,
PyTorch reusing one tensor), so start-up counts for both; the steady-state
ratio (after the warm-up steps) is printed beside it. A shape is GEMM-bound
when its hidden width is 2048 or more: BLAS then runs the GEMMs near peak on
both sides and the goal is parity; elsewhere the goal is 1.5x. Each side runs
--repeat times, interleaved, and the medians are compared, so one noisy run on
a small machine does not decide a ratio.

    tests/bench/train_bench.py --build-dir build [--ranks 2] [--threads 1] [--repeat 3]
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = [  # name, input, hidden, layers, classes, batch, steps, warmup, goal
    ("tiny", 64, 32, 2, 8, 32, 3000, 300, 1.5),
    ("small", 512, 256, 3, 10, 64, 2000, 200, 1.5),
    ("narrow-deep", 128, 512, 4, 16, 64, 1200, 100, 1.5),
    ("medium", 1024, 1024, 4, 16, 64, 400, 40, 1.5),
    ("wide", 1024, 2048, 2, 32, 128, 60, 6, 1.0),
    ("gemm-bound", 1024, 4096, 4, 16, 256, 12, 3, 1.0),
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def system_blas():
    try:
        return os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    except OSError:
        return "unknown"


def run_xl(xl_train, size, ranks, threads):
    name, inp, hid, layers, classes, batch, steps, warmup, _ = size
    spec = json.dumps({"input_dim": inp, "hidden_dim": hid, "hidden_layers": layers,
                       "classes": classes, "batch_per_rank": batch, "steps": steps,
                       "metrics_every": warmup, "device": "cpu", "learning_rate": 1e-3})
    tmp = tempfile.mkdtemp(prefix="xl-train-bench-")
    procs, metrics_r = [], None
    t0 = time.perf_counter()
    try:
        for r in range(ranks):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(ranks), XL_JOB_ID="bench",
                       XL_ATTEMPT="1", OMP_NUM_THREADS=str(threads),
                       OPENBLAS_NUM_THREADS=str(threads), XL_NODE_ADDRESS="127.0.0.1")
            pass_fds = ()
            if r == 0:
                metrics_r, metrics_w = os.pipe()
                env["XL_METRICS_FD"] = str(metrics_w)
                pass_fds = (metrics_w,)
            procs.append(subprocess.Popen(
                [xl_train, "--spec-json", spec, "--rendezvous-dir", tmp,
                 "--checkpoint-dir", os.path.join(tmp, f"ckpt{r}"),
                 "--tensorboard-dir", "none"],
                env=env, pass_fds=pass_fds, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
            if r == 0:
                os.close(metrics_w)
        with os.fdopen(metrics_r) as f:
            lines = [json.loads(l) for l in f if l.strip()]
        for p in procs:
            if p.wait(timeout=900) != 0:
                sys.exit(f"train_bench: xl-train failed: {p.stderr.read().decode()[-2000:]}")
        wall = time.perf_counter() - t0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    whole = steps * batch * ranks / wall
    # Reports cover metrics_every steps each; the first one holds the warm-up.
    timed = lines[1:] or lines
    samples = sum((int(m["step"]) - int(prev["step"])) for prev, m in zip(lines, lines[1:])) if len(lines) > 1 else 0
    if samples == 0:
        return whole, timed[-1]["samples_per_second"]
    seconds = sum((int(m["step"]) - int(prev["step"])) / m["samples_per_second"]
                  for prev, m in zip(lines, lines[1:]))
    return whole, samples / seconds


def run_torch(size, ranks, threads):
    name, inp, hid, layers, classes, batch, steps, warmup, _ = size
    port = free_port()
    procs = []
    t0 = time.perf_counter()
    for r in range(ranks):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS=str(threads))
        procs.append(subprocess.Popen(
            ["/usr/bin/python3", os.path.join(HERE, "torch_ddp_mlp.py"), "--input", str(inp),
             "--hidden", str(hid), "--layers", str(layers), "--classes", str(classes),
             "--batch", str(batch), "--steps", str(steps), "--warmup", str(warmup),
             "--threads", str(threads)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out = None
    for r, p in enumerate(procs):
        stdout, stderr = p.communicate(timeout=900)
        if p.returncode != 0:
            sys.exit(f"train_bench: torch rank {r} failed: {stderr[-2000:]}")
        if r == 0:
            out = json.loads(stdout.strip().splitlines()[-1])
    out["whole"] = steps * batch * ranks / (time.perf_counter() - t0)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--only", default="", help="comma-separated size names")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    xl_train = os.path.join(a.build_dir, "agent", "worker", "xl-train")
    print(f"ranks {a.ranks}, threads/rank {a.threads}; xl-train BLAS: {system_blas()} "
          f"(libblas.so.3 through Debian's alternatives)")
    rows = []
    for size in SIZES:
        if a.only and size[0] not in a.only.split(","):
            continue
        xls, torches = [], []
        for _ in range(a.repeat):
            xls.append(run_xl(xl_train, size, a.ranks, a.threads))
            torches.append(run_torch(size, a.ranks, a.threads))
        med = lambda v: sorted(v)[len(v) // 2]
        rows.append((size, med([x[0] for x in xls]), med([x[1] for x in xls]),
                     med([t["whole"] for t in torches]),
                     med([t["samples_per_second"] for t in torches]), torches[0]["blas"]))
    print(f"\n{'shape':<12} {'model':<20} {'batch':>5} {'steps':>5} {'xl/s':>8} {'torch/s':>8} "
          f"{'ratio':>6} {'goal':>5}  {'result':<8} {'steady xl/s':>11} {'torch/s':>8} {'ratio':>6}")
    for size, xw, xs, tw, ts, blas in rows:
        name, inp, hid, layers, classes, batch, steps = size[:7]
        goal = size[8]
        ratio = xw / tw
        print(f"{name:<12} {f'{inp}->{hid}x{layers}->{classes}':<20} {batch:>5} {steps:>5} "
              f"{xw:>8.0f} {tw:>8.0f} {ratio:>6.2f} {goal:>4.1f}x  "
              f"{'met' if ratio >= goal else 'NOT met':<8} {xs:>11.0f} {ts:>8.0f} {xs / ts:>6.2f}")
    print(f"\nsamples/s: whole process (start to exit, the ratio judged), then steady "
          f"state after the warm-up. torch BLAS: {rows[0][5] if rows else '?'}")


if __name__ == "__main__":
    main()
