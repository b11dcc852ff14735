"""Data-parallel training of the tensorad CNN with torch DistributedDataParallel.

    python examples/ddp_cnn.py                   # 2 processes (gloo, loopback), 10 steps

tensorad has no distributed runtime of its own: its layers (``@ta.torch.op`` functions) are
PyTorch operators, so ``DistributedDataParallel`` averages their parameters' gradients like any
other.  Each of the
two processes trains on its half of every global batch; afterwards this script trains the same
model in one process on the whole global batches and checks that both reach the same
parameters (within float32 rounding: the gradient sums are split differently).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_cnn import BATCH, TensorADCNN, initial_parameters, synthetic_data  # noqa: E402

WORLD, LR, TOLERANCE = 2, 0.05, 2e-5


def batches(steps: int, rank: int = 0, world: int = 1):
    """The global batch of each step (this rank's contiguous share of it)."""
    images, labels = synthetic_data()
    share = BATCH // world
    for step in range(steps):
        lo = (step * BATCH) % len(images) + rank * share
        yield images[lo:lo + share], labels[lo:lo + share]


def sgd(model: torch.nn.Module, steps: int, rank: int = 0, world: int = 1) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for x, y in batches(steps, rank, world):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()  # DDP: gradients are all-reduced (averaged) across the processes here
        opt.step()
        losses.append(loss.detach())
    return [float(v) for v in losses]


def worker(rank: int, port: int, steps: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    torch.set_num_threads(1)
    model = torch.nn.parallel.DistributedDataParallel(TensorADCNN(initial_parameters()))
    losses = torch.tensor(sgd(model, steps, rank, WORLD))
    dist.all_reduce(losses)  # the global batch's loss: the mean of the two halves' means
    if rank == 0:
        torch.save({"params": [p.detach() for p in model.module.parameters()],
                    "losses": (losses / WORLD).tolist()}, out)
    # The model goes before the process group.  Its DDP reducer holds the group too, and were
    # the reducer the last holder, the group's destructor would wait for gloo's threads while
    # holding the GIL that one of them may need to free a finished all-reduce's tensors: a
    # deadlock of PyTorch's that hangs the worker on its way out now and then.
    # ``destroy_process_group`` then drops the last reference, with the GIL released.
    del model
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def warm_kernel_cache() -> None:
    """Build the workers' kernels once, here: tensorad's disk cache then gives them to both
    processes (linked in milliseconds) instead of each compiling them."""
    model = TensorADCNN(initial_parameters())
    x, y = next(batches(1, 0, WORLD))
    F.cross_entropy(model(x), y).backward()


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args(argv)
    # one thread per process, as torchrun sets it: tensorad's kernels read OMP_NUM_THREADS too
    # (the processes inherit it)
    os.environ["OMP_NUM_THREADS"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "ddp.pt")
        warm_kernel_cache()
        mp.spawn(worker, args=(free_port(), args.steps, out), nprocs=WORLD)
        ddp = torch.load(out)
    single = TensorADCNN(initial_parameters())
    losses = sgd(single, args.steps)
    for step, (a, b) in enumerate(zip(ddp["losses"], losses)):
        print(f"step {step:3d}  ddp loss {a:.6f}  single-process loss {b:.6f}")
    diff = max(float((p - q.detach()).abs().max()) for p, q in zip(ddp["params"], single.parameters()))
    print(f"max parameter difference {diff:.3g} (tolerance {TOLERANCE})")
    if not diff <= TOLERANCE:
        raise SystemExit("DDP and single-process training disagree")
    return diff


if __name__ == "__main__":
    main()
