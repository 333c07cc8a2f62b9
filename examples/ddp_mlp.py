"""A DDP training script as a tutorial writes it: an MLP on synthetic data, launched by
torchrun (RANK, WORLD_SIZE, MASTER_ADDR, ... from the environment), device-agnostic.
Nothing in it knows about incastlab; run it on the fabric with

    incastlab run specs/own-script.toml

or by itself on one machine:

    torchrun --nproc-per-node 2 examples/ddp_mlp.py --epochs 1

It makes --epochs x --steps-per-epoch optimizer steps; each step all-reduces the
gradient of build_model()'s parameters (4 bytes each) in DDP's buckets.
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def build_model(features: int, hidden: int, classes: int) -> nn.Module:
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(),
                         nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, classes))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--steps-per-epoch", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--backend", default="auto", help="auto: nccl with GPUs, else gloo")
    args = p.parse_args()

    use_cuda = torch.cuda.is_available()
    backend = args.backend if args.backend != "auto" else ("nccl" if use_cuda else "gloo")
    dist.init_process_group(backend)
    rank = dist.get_rank()
    device = torch.device(f"cuda:{rank % torch.cuda.device_count()}" if use_cuda else "cpu")
    torch.manual_seed(0)  # the same initial model everywhere (DDP broadcasts it anyway)
    model = build_model(args.features, args.hidden, args.classes).to(device)
    ddp = DDP(model, device_ids=[device.index] if use_cuda else None,
              bucket_cap_mb=args.bucket_cap_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard of data
    teacher = torch.randn(args.features, args.classes, generator=torch.Generator()
                          .manual_seed(7))
    for epoch in range(args.epochs):
        for _ in range(args.steps_per_epoch):
            x = torch.randn(args.batch_size, args.features, generator=g)
            y = (x @ teacher).argmax(dim=1)
            opt.zero_grad()
            loss = loss_fn(ddp(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
        if rank == 0:
            print(f"epoch {epoch}: loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
