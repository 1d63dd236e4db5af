"""The PyTorch side of train_bench.py: the same MLP (Linear+ReLU x layers,
softmax cross-entropy), AdamW and batch as xl-train, data-parallel with DDP
over gloo, one process per rank. Prints one JSON line from rank 0:
{"samples_per_second": ..., "blas": ...} measured after the warm-up steps."""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

p = argparse.ArgumentParser()
p.add_argument("--input", type=int, required=True)
p.add_argument("--hidden", type=int, required=True)
p.add_argument("--layers", type=int, required=True)
p.add_argument("--classes", type=int, required=True)
p.add_argument("--batch", type=int, required=True)
p.add_argument("--steps", type=int, required=True)
p.add_argument("--warmup", type=int, required=True)
p.add_argument("--threads", type=int, default=1)
a = p.parse_args()
torch.set_num_threads(a.threads)
dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
mods, d = [], a.input
for _ in range(a.layers):
    mods += [nn.Linear(d, a.hidden), nn.ReLU()]
    d = a.hidden
mods.append(nn.Linear(d, a.classes))
model = DDP(nn.Sequential(*mods))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
gen = torch.Generator().manual_seed(rank)
x = torch.randn(a.batch, a.input, generator=gen)
y = torch.randint(0, a.classes, (a.batch,), generator=gen)
for step in range(a.steps):
    if step == a.warmup:
        dist.barrier()
        t0 = time.perf_counter()
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
dist.barrier()
elapsed = time.perf_counter() - t0
if rank == 0:
    cfg = torch.__config__.show()
    blas = "unknown"
    for line in cfg.splitlines():
        if "BLAS_INFO" in line:
            blas = line.split("BLAS_INFO=")[1].split(",")[0]
    # "generic" means the libblas.so.3 interface; name the library loaded.
    with open("/proc/self/maps") as maps:
        libs = sorted({l.split()[-1] for l in maps
                       if os.path.basename(l.split()[-1]).startswith(("libblas", "libopenblas"))})
    if libs:
        blas += " -> " + ", ".join(os.path.relpath(l, "/usr/lib/x86_64-linux-gnu") for l in libs)
    print(json.dumps({"samples_per_second": (a.steps - a.warmup) * a.batch * world / elapsed,
                      "blas": blas}), flush=True)
dist.destroy_process_group()
