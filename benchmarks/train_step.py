"""``python -m benchmarks.train_step``: one SGD training step of the example CNN, in PyTorch.

The model is ``examples/torch_cnn.py``'s (conv2d 3x3 + bias -> relu -> 2x2 max pool -> flatten
-> dense, cross-entropy loss, SGD), at a benchmark size.  Forms timed, each a full step
(forward, loss, backward, parameter update) on the same batch and initial parameters:

* ``tensorad``: the model's layers are ``ta.torch.function`` operators (eager PyTorch around them);
* ``eager``: the same model with PyTorch's own operators;
* ``compile``: that model under ``torch.compile`` (inductor);
* ``tensorad+compile``: the tensorad model under ``torch.compile(fullgraph=True)``.

Forms are measured interleaved (one step of each, round after round) and the medians are
reported, with the ratios to eager and the machine's load: on a shared machine only
side-by-side ratios mean something.  Nothing is asserted; the losses of the first step are
checked to agree.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _example():
    spec = importlib.util.spec_from_file_location("torch_cnn", os.path.join(ROOT, "examples", "torch_cnn.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _parameters(torch, channels: int, side: int, classes: int):
    gen = torch.Generator().manual_seed(0)
    hidden = channels * (side // 2) ** 2
    return [torch.randn(channels, 1, 3, 3, generator=gen) * 0.3, torch.zeros(channels),
            torch.randn(classes, hidden, generator=gen) * hidden ** -0.5, torch.zeros(classes)]


def _step(torch, model, x, y, lr=0.05):
    """One SGD step; a closure over its own parameters, so each form updates its own copy."""
    F = torch.nn.functional
    params = list(model.parameters())

    def run():
        loss = F.cross_entropy(model(x), y)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p.sub_(lr * g)
        return loss.detach()
    return run


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.train_step", description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--side", type=int, default=28)
    ap.add_argument("--channels", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile forms")
    args = ap.parse_args(argv)
    from .threads import apply_thread_limit, configure_torch

    apply_thread_limit(args.threads)
    import torch

    configure_torch(torch, args.threads)
    cnn = _example()
    params = _parameters(torch, args.channels, args.side, 10)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(args.batch, 1, args.side, args.side, generator=gen)
    y = torch.randint(0, 10, (args.batch,), generator=gen)
    models = {"tensorad": cnn.TensorADCNN(params, num_threads=args.threads), "eager": cnn.TorchCNN(params)}
    if not args.no_compile:
        models["compile"] = torch.compile(cnn.TorchCNN(params))
        layers = cnn.TensorADCNN(params, num_threads=args.threads)
        layers(x)  # tensorad builds its functions eagerly, outside the traced graph
        models["tensorad+compile"] = torch.compile(layers, fullgraph=True)
    steps, first, warm = {}, {}, {}
    for name, model in models.items():
        steps[name] = _step(torch, model, x, y)
        t0 = time.perf_counter()
        first[name] = float(steps[name]())  # builds kernels / compiles; the first loss
        for _ in range(2):
            steps[name]()
        warm[name] = time.perf_counter() - t0
    samples: dict[str, list[float]] = {name: [] for name in models}
    load0 = os.getloadavg()[0]
    for _ in range(args.rounds):
        for name, run in steps.items():
            t0 = time.perf_counter()
            run()
            samples[name].append(time.perf_counter() - t0)
    load1 = os.getloadavg()[0]
    med = {name: statistics.median(s) * 1e3 for name, s in samples.items()}
    print(f"one training step, CNN batch {args.batch}x1x{args.side}x{args.side}, {args.channels} channels, "
          f"{args.threads} thread(s); load average {load0:.2f} -> {load1:.2f}; "
          f"medians of {args.rounds} interleaved rounds")
    print(f"  {'form':18s} {'ms/step':>9s} {'vs eager':>9s} {'first loss':>11s} {'warm-up s':>10s}")
    for name in models:
        print(f"  {name:18s} {med[name]:9.3f} {med[name] / med['eager']:8.2f}x {first[name]:11.6f} "
              f"{warm[name]:10.2f}")
    return {"median_ms": med, "first_loss": first, "load": (load0, load1)}


if __name__ == "__main__":
    main()
