"""The work gate's corpus: programs whose gradient work is pinned in ``work.json``.

* ``topi-<layer>-<small|medium>``: every ``ta.topi`` layer at two shapes (``layers.py``);
* ``tvm-<form>``: the forms of TVM's autodiff tests, written with ``ta.compute``
  (``tvm_forms.py``);
* ``bench-<name>``: every benchmark workload of every suite (``benchmarks/workloads.py``), at
  its full shapes, differentiated with respect to the inputs it names;
* ``family-<name>``: the workloads, families, hand-gap classes and the holdout of
  ``tests/simplify/workloads.py``;
* ``fuzz-<seed>``: the fuzz generator's programs of seeds ``0 .. FUZZ_SEEDS - 1`` (float64,
  with respect to their float inputs, drawn without the stream ``forms49`` so that the sample
  stays fixed), those that have a float input and a float output.

Each program is differentiated with ``ta.JacobianRecursive`` and a head of its output's shape,
then the forward and the gradient are lowered for each pinned target of :data:`TARGETS` (the
strategies chosen depend on the target), with a named CPU's caches, not the host's
(``fuzz.cheap.pinned``): the counts are the same on every machine.  ``FAST`` marks the programs of
the default test tier; the rest run in the full tier (``TENSORAD_WORK_GATE=full``, and ``make fuzz``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import tensorad as ta
from tensorad.ir import placeholders

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GOLDEN = os.path.join(HERE, "work.json")
TARGETS = {"skylake-avx512": "llvm -mcpu=skylake-avx512", "haswell": "llvm -mcpu=haswell"}
FUZZ_SEEDS = 60

Built = tuple[ta.Tensor, list]


def _load(name: str, path: str):
    """The module at ``path`` as ``name`` (the tests folder is not on ``sys.path``)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Entry:
    """One program of the corpus: its name and how to build ``(output, differentiated inputs)``."""

    name: str
    build: Callable[[], Built]
    fast: bool = False


def topi_entries() -> Iterator[Entry]:
    layers = _load("golden_layers", os.path.join(HERE, "layers.py"))
    for shape, dims in layers.SHAPES.items():
        for name, build in layers.LAYERS.items():
            yield Entry(f"topi-{name}-{shape}", lambda b=build, d=dims: b(d), fast=shape == "small")


def tvm_entries() -> Iterator[Entry]:
    forms = _load("golden_tvm_forms", os.path.join(HERE, "tvm_forms.py"))
    for name, build in forms.FORMS.items():
        yield Entry(f"tvm-{name}", build, fast=True)


def bench_entries() -> Iterator[Entry]:
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from benchmarks import sys_tensorad, workloads

    def build(w) -> Built:
        ints = w.params.get("ints", {})
        p = {k: ta.placeholder(s, "int32" if k in ints else "float32", k)
             for k, s in w.input_shapes(tiny=False).items()}
        return sys_tensorad.topi_forward(w.kind, p, w.params), [p[g] for g in w.grads]

    for w in workloads.select(None, workloads.SUITES):
        yield Entry(f"bench-{w.name}", lambda w=w: build(w), fast=w.suite == "seed")


def family_entries() -> Iterator[Entry]:
    W = _load("simplify_workloads", os.path.join(ROOT, "tests", "simplify", "workloads.py"))
    for group in (W.all_workloads, W.family_workloads, W.gap_workloads, W.holdout_workloads):
        for wl in group():
            yield Entry(f"family-{wl.name}", lambda wl=wl: (wl.output, wl.inputs), fast=True)


def fuzz_program(seed: int) -> Built | None:
    """The float64 program of fuzz ``seed`` and its float inputs, or ``None`` when it has no
    float input, no float output, or the language rejects it."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from fuzz.checks import Invalid, load
    from fuzz.program import generate

    try:
        ns = load(generate(seed, forms49=False).render("float64"))
    except Invalid:
        return None
    wrt = [t for t in ns["INPUTS"] if t.dtype in ta.FLOAT_DTYPES]
    return (ns["OUT"], wrt) if wrt and ns["OUT"].dtype in ta.FLOAT_DTYPES else None


def fuzz_entries() -> Iterator[Entry]:
    for seed in range(FUZZ_SEEDS):
        if fuzz_program(seed) is not None:
            yield Entry(f"fuzz-{seed}", lambda s=seed: fuzz_program(s), fast=seed < 10)


def entries(full: bool = True) -> list[Entry]:
    """The corpus (only its fast tier unless ``full``), in a fixed order."""
    found = [e for group in (topi_entries, tvm_entries, bench_entries, family_entries, fuzz_entries)
             for e in group()]
    return [e for e in found if full or e.fast]


@dataclass(frozen=True)
class Measured:
    """One program's works: ``counts[target] = (forward, backward)`` as ``ta.lower`` gives them
    (what the golden file pins), and the cheap-gradient :class:`~fuzz.cheap.Cost` for
    :data:`CHEAP_TARGET`."""

    counts: dict
    cost: object


CHEAP_TARGET = "skylake-avx512"


def measure(entry: Entry, targets: dict[str, str] = TARGETS) -> Measured:
    """The works of one program, differentiated once and lowered for each target."""
    from fuzz.cheap import gradient_cost, pinned

    out, wrt = entry.build()
    head = ta.placeholder(out.shape, out.dtype, "H")
    grads = list(ta.JacobianRecursive(out, wrt, head))
    inputs = placeholders([out])
    counts = {key: (ta.lower([out], inputs, target=pinned(spec)).work,
                    ta.lower(grads, inputs + [head], target=pinned(spec)).work)
              for key, spec in targets.items()}
    cost = gradient_cost(out, wrt, grads=grads, head=head, target=TARGETS[CHEAP_TARGET])
    return Measured(counts, cost)


def read_golden(path: str = GOLDEN) -> dict:
    with open(path) as f:
        return json.load(f)


def write_golden(counts: dict[str, dict[str, tuple[int, int]]], path: str = GOLDEN) -> None:
    """``counts`` (``{name: {target: (forward, backward)}}``) as ``{target: {name: [forward,
    backward]}}``."""
    table: dict = {key: {} for key in TARGETS}
    for name, per_target in counts.items():
        for key, pair in per_target.items():
            table[key][name] = list(pair)
    with open(path, "w") as f:
        json.dump(table, f, indent=1, sort_keys=True)
        f.write("\n")


def differences(golden: dict, name: str, counts: dict[str, tuple[int, int]]
                ) -> tuple[list[str], list[str], list[str]]:
    """Program ``name``'s ``counts`` against ``golden``, one line each: the rises (regressions),
    the falls (improvements) and the targets the golden file has no count of."""
    rises, falls, missing = [], [], []
    for key, now_pair in counts.items():
        old = golden.get(key, {}).get(name)
        if old is None:
            missing.append(f"{name} [{key}]: not in {os.path.basename(GOLDEN)}")
            continue
        for what, was, now in zip(("forward", "backward"), old, now_pair):
            if now > was:
                rises.append(f"{name} [{key}]: {what} work rose {was} -> {now} ({now / max(was, 1):.3g}x)")
            elif now < was:
                falls.append(f"{name} [{key}]: {what} work fell {was} -> {now} ({now / max(was, 1):.3g}x)")
    return rises, falls, missing
