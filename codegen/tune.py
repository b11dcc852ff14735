"""``ta.lower`` and ``ta.build``, with ``tune=True`` decided before either runs: measure the candidate
strategies of a program and keep the winners per target, passed on as pinned ``choices``.

Every *point* offered several candidates, the costliest at :data:`MIN_CYCLES` or more by the cost model, is
measured, heaviest first: built with each candidate pinned and run on random data of the actual shapes,
the least of a few timed calls winning.  The winners are stored in the disk cache under the untuned loop
program, the options that change speed and the target's :func:`.jit.engine.fingerprint` (``cache=False``:
neither read nor written).  ``kernel.measured`` says how many candidates a build measured."""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from tensorad.ir import trace
from tensorad.ir.collect import fewer_collections
from tensorad.ir.tensor import Tensor

from .build import Prepared
from .build import build as build_kernel
from .jit import disk_cache as diskcache
from .jit.engine import fingerprint
from .lower import LoweredFunc, check_arguments
from .lower import lower as lower_program
from .options import Options
from .runtime.kernel import Kernel
from .target import Target, default_num_threads, parse_target

MIN_RUNS, MAX_RUNS = 3, 20
RUN_BUDGET = 0.1  # seconds of timed calls per candidate (at least MIN_RUNS calls)
MIN_CYCLES = 100_000.0  # ~30-50 us: points estimated below it keep the cost model's choice


@functools.wraps(lower_program)  # (the user's documentation is the driver's)
def lower(outputs: Sequence[Tensor] | Tensor, inputs: Sequence[Tensor] | Tensor = (),
          name: str = "kernel", **options: Any) -> LoweredFunc:
    target = Options.make(options).target
    if options.get("tune"):
        options, _ = _tuned_options(outputs, inputs, name, options, target)
    return lower_program(outputs, inputs, name, **options)


@functools.wraps(build_kernel)  # (the user's documentation is the driver's)
@fewer_collections()
def build(outputs: Sequence[Tensor] | Tensor, inputs: Sequence[Tensor] | Tensor = (),
          target: str | Target = "llvm", name: str = "kernel", cache: bool = True, **options: Any) -> Kernel:
    return prepare(outputs, inputs, target, name, cache, **options).kernel()


def prepare(outputs: Sequence[Tensor] | Tensor, inputs: Sequence[Tensor] | Tensor = (),
            target: str | Target = "llvm", name: str = "kernel", cache: bool = True,
            **options: Any) -> Prepared:
    """``build``'s program keyed, ``tune=True`` measured first: its estimate and its kernel
    (:class:`.build.Prepared`)."""
    measured = 0
    if options.get("tune") is True and isinstance(target, (str, Target)) and isinstance(cache, bool):
        Options.make({**options, "target": parse_target(target)})  # (bad options: their errors first)
        with diskcache.disabled(not cache):
            options, measured = _tuned_options(outputs, inputs, name, options, parse_target(target))
    return Prepared(outputs, inputs, target, name, cache, options, measured)


def _tuned_options(outputs, inputs, name: str, options: dict[str, Any],
                   target: Target | None) -> tuple[dict[str, Any], int]:
    """``options`` with ``tune`` replaced by its measured winners as pinned choices, and how many measured."""
    outputs, inputs = check_arguments(outputs, inputs, name)
    target = target or parse_target()
    plain = {k: v for k, v in options.items() if k not in ("tune", "target")}
    plain["variants"] = True
    base = lower_program(outputs, inputs, name, target=target, **plain)
    pinned = dict(Options.make({**options, "target": target}).choices)
    found, measured = tuned_choices(base, outputs, inputs, name, plain, target)
    return {**{k: v for k, v in options.items() if k != "tune"}, "variants": True,
            "choices": {**pinned, **found}}, measured


def tuned_choices(base, outputs: list[Tensor], inputs: list[Tensor], name: str, options: dict[str, Any],
                  target: Target) -> tuple[dict[str, str], int]:
    """``{point: label}`` for every point of ``base`` (untuned) worth measuring, from the disk cache or
    measured and stored; and the number of candidates measured."""
    points = worth_measuring(base)
    if not points:
        return {}, 0
    key = _key(base, options, target)
    found = _read(key, base)
    if found is not None:
        trace.record("tune cached", 0.0, name)
        return found, 0
    rng = np.random.default_rng(0)
    data = [_random(t, rng) for t in inputs]
    plain = {k: v for k, v in options.items() if k not in ("tune", "choices", "target")}
    choices: dict[str, str] = dict(options.get("choices") or {})
    measured = 0
    with trace.stage("tune", name):
        for point, labels in points:  # (each candidate built pinned and timed; the first fastest wins)
            timed = [(_time(build_kernel(outputs, inputs, target=target, name=name,
                                         choices={**choices, point: label}, **plain), data), label)
                     for label in labels]
            measured += len(labels)
            choices[point] = min(timed, key=lambda t: t[0])[1]
    diskcache.put(key, json.dumps({"choices": choices}, sort_keys=True).encode())
    return choices, measured


def worth_measuring(base) -> list[tuple[str, tuple[str, ...]]]:
    """``(point, labels)`` of the points of ``base`` to measure: those estimated at
    :data:`MIN_CYCLES` or more, the heaviest first (ties in program order)."""
    cycles = base.estimates
    heavy = [(point, labels) for point, labels, _ in base.offered if cycles.get(point, 0.0) >= MIN_CYCLES]
    return sorted(heavy, key=lambda pl: -cycles[pl[0]])


def _key(base, options: dict[str, Any], target: Target) -> str:
    speed = tuple(options.get(k) for k in ("num_threads", "opt_level", "vector_width", "fastmath"))
    threads = options.get("num_threads") or default_num_threads()
    text = "\n".join(["tensorad tune 2", base.text, repr(speed), str(threads), fingerprint(target)])
    return hashlib.sha256(text.encode()).hexdigest()


def _read(key: str, base) -> dict[str, str] | None:
    """The stored choices, if they are well formed and name points and labels ``base`` offers."""
    payload = diskcache.get(key)
    if payload is None:
        return None
    try:
        choices = json.loads(payload.decode())["choices"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None
    offered = {point: labels for point, labels, _ in base.offered}
    if not isinstance(choices, dict) or any(
            not isinstance(p, str) or not isinstance(v, str) or v not in offered.get(p, ())
            for p, v in choices.items()):
        return None
    return choices


def _random(t: Tensor, rng: np.random.Generator) -> np.ndarray:
    """Data for input ``t``: standard normal floats; zero integers and booleans (a valid index, label)."""
    if t.dtype.startswith("float"):
        return rng.standard_normal(t.shape).astype(t.dtype)
    return np.zeros(t.shape, dtype=t.dtype)


def _time(kernel, data: list[np.ndarray]) -> float:
    """The least of a few timed calls (after one untimed call: first-touch, caches)."""
    out = kernel(*data)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    best = float("inf")
    spent, runs = 0.0, 0
    while runs < MIN_RUNS or (spent < RUN_BUDGET and runs < MAX_RUNS):
        start = time.perf_counter()
        kernel(*data, out=outs if len(outs) > 1 else outs[0])
        took = time.perf_counter() - start
        best, spent, runs = min(best, took), spent + took, runs + 1
    return best
