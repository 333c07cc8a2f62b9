"""A data-parallel script without DDP: it averages gradients with all_reduce and starts
from rank 0's weights with broadcast, calling torch.distributed directly. Launched by
torchrun; nothing in it knows about incastlab:

    incastlab run specs/own-script.toml --set workload.script='"examples/collectives.py"' \\
        --set "workload.args=['--steps', '5']"

Each step: one all_reduce per parameter tensor (the gradients, 4 bytes a parameter),
then optimizer.step(); before the first, one broadcast per parameter tensor.
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--width", type=int, default=128)
    args = p.parse_args()

    dist.init_process_group("gloo")
    world = dist.get_world_size()
    model = nn.Sequential(nn.Linear(32, args.width), nn.Tanh(), nn.Linear(args.width, 1))
    for t in model.parameters():
        dist.broadcast(t.data, src=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(dist.get_rank())
    for _ in range(args.steps):
        x = torch.randn(16, 32, generator=g)
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        for t in model.parameters():
            dist.all_reduce(t.grad)
            t.grad /= world
        opt.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
