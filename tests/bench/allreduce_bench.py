#!/usr/bin/python3
"""All-reduce from 4 KiB to 256 MiB on 2 and 4 ranks: xl's CPU path (Gloo
ring over TCP on loopback) against Open MPI's MPI_Allreduce over the same
transport (--mca pml ob1 --mca btl tcp,self), with Open MPI's shared-memory
figure beside it. Prints bus bandwidth (2(n-1)/n x bytes / time) and the
ratio xl / MPI-TCP. Each side runs --repeat times, interleaved, and each
size's median time is used, so one noisy run on a small machine does not
decide a ratio.

    tests/bench/allreduce_bench.py --build-dir build [--max-mib 256] [--repeat 3]
"""
import argparse
import os
import subprocess
import sys


def run(cmd, timeout=900):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        sys.exit(f"allreduce_bench: {' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    out = {}
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            out[int(parts[0])] = float(parts[1])
    return out


def mpirun(binary, n, btl, max_bytes):
    base = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n),
            "--mca", "pml", "ob1", "--mca", "btl", btl]
    if "tcp" in btl:
        base += ["--mca", "btl_tcp_if_include", "lo"]
    return run(base + [binary, str(max_bytes)])


def median(runs):
    """Per size, the median of the seconds-per-op the runs measured."""
    out = {}
    for size in runs[0]:
        ts = sorted(r[size] for r in runs if size in r)
        out[size] = ts[len(ts) // 2]
    return out


def human(b):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if b < 1024:
            return f"{b:.0f} {unit}"
        b /= 1024
    return f"{b:.0f} TiB"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", default="build")
    p.add_argument("--max-mib", type=int, default=256)
    p.add_argument("--ranks", default="2,4")
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    max_bytes = a.max_mib << 20
    xl = os.path.join(a.build_dir, "tests", "bench", "allreduce_bench")
    mpi = os.path.join(a.build_dir, "tests", "bench", "mpi_allreduce")
    if not os.path.exists(mpi):
        sys.exit("allreduce_bench: mpi_allreduce was not built; install openmpi-bin "
                 "libopenmpi-dev (deploy/install-deps) and rebuild")
    print(f"{'ranks':>5} {'size':>9} {'xl gloo tcp':>12} {'mpi tcp':>10} {'mpi shm':>10} {'xl/mpi-tcp':>10}   (bus GB/s)")
    ratios_1m = []
    for n in [int(x) for x in a.ranks.split(",")]:
        runs = {"ours": [], "tcp": [], "shm": []}
        for _ in range(a.repeat):
            runs["ours"].append(run([xl, "--ranks", str(n), "--max-bytes", str(max_bytes)]))
            runs["tcp"].append(mpirun(mpi, n, "tcp,self", max_bytes))
            runs["shm"].append(mpirun(mpi, n, "vader,self", max_bytes))
        ours, tcp, shm = (median(runs[k]) for k in ("ours", "tcp", "shm"))
        for size in sorted(ours):
            bus = lambda t: 2 * (n - 1) / n * size / t / 1e9 if t else 0
            bx, bt, bs = bus(ours[size]), bus(tcp.get(size, 0)), bus(shm.get(size, 0))
            ratio = bx / bt if bt else 0
            if size >= (1 << 20):
                ratios_1m.append(ratio)
            print(f"{n:>5} {human(size):>9} {bx:>12.3f} {bt:>10.3f} {bs:>10.3f} {ratio:>10.2f}")
    if ratios_1m:
        worst = min(ratios_1m)
        print(f"\nfrom 1 MiB up: xl / Open MPI over TCP = {worst:.2f}x at worst, "
              f"{sum(ratios_1m) / len(ratios_1m):.2f}x on average (goal >= 0.9x: "
              f"{'met' if worst >= 0.9 else 'NOT met'})")


if __name__ == "__main__":
    main()
