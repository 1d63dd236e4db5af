"""A plain PyTorch DDP training script, as people write it for torchrun:
it reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT through
init_method="env://" and knows nothing of xl. It trains a small MLP on data
drawn from a fixed random "teacher" network and checks at the end that every
rank holds the same weights."""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch", type=int, default=64, help="samples per rank per step")
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-3)
    args = p.parse_args()

    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # same initial weights everywhere (DDP also broadcasts)
    teacher = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 10))
    model = DDP(nn.Sequential(nn.Linear(32, args.width), nn.ReLU(),
                              nn.Linear(args.width, args.width), nn.ReLU(),
                              nn.Linear(args.width, 10)))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard
    if rank == 0:
        print(f"ddp: world_size={world} master={os.environ['MASTER_ADDR']}:"
              f"{os.environ['MASTER_PORT']} batch/rank={args.batch}", flush=True)
    start = time.time()
    for step in range(1, args.steps + 1):
        x = torch.randn(args.batch, 32, generator=gen)
        with torch.no_grad():
            y = teacher(x).argmax(dim=1)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0 and (step % 10 == 0 or step == 1 or step == args.steps):
            print(f"step {step:4d}  loss {loss.item():.4f}", flush=True)
    elapsed = time.time() - start
    # Every rank must hold bitwise the same weights after DDP's all-reduce.
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    same = all(torch.equal(gathered[0], g) for g in gathered)
    if rank == 0:
        samples = args.steps * args.batch * world
        print(f"done: {args.steps} steps, {samples / elapsed:.0f} samples/s, "
              f"weights {'identical' if same else 'DIFFERENT'} across ranks", flush=True)
    dist.destroy_process_group()
    if not same:
        raise SystemExit("ranks disagree on the weights")


if __name__ == "__main__":
    main()
