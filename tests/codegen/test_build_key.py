"""The cache key taken before lowering (codegen/jit/build_key.py).

* a build in a fresh process with a warm cache runs no lowering (the subprocess makes the
  lowering entry point raise) and its kernels compute what ``ta.evaluate`` computes;
* random programs that differ in one decision (a constant's last bit, a mask bound, an axis
  bound, a dtype, a combiner, an attribute, an option, the target) never share a key;
* the same program rebuilt from scratch with other tensor and axis names shares the key
  (names reach neither lowering nor the code; the kernel takes argument names from the call)
  -- except where names reach the kernel: bounds-checked code and raise-mode gathers print
  them in run-time errors, so there they are part of the key;
* an entry whose recorded key text or signature is not this build's is rebuilt, not loaded.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorad.codegen.jit import disk_cache as diskcache
from tensorad.codegen.jit.build_key import describe
from tensorad.codegen.options import Options
from tensorad.codegen.runtime import compiled_cache
from tensorad.codegen.runtime.compiled_cache import CompiledCache
from tensorad.codegen.target import parse_target

import tensorad as ta

BUILD = sys.modules["tensorad.codegen.build"]


class _Decisions:
    """The choices of one random program, drawn from a seed; ``tweak=k`` changes the k-th
    choice by the smallest step of its kind (one ulp, one index, the other dtype...)."""

    def __init__(self, seed: int, tweak: int | None = None) -> None:
        self.rng, self.tweak, self.count = random.Random(seed), tweak, 0

    def _hit(self) -> bool:
        hit = self.count == self.tweak
        self.count += 1
        return hit

    def const(self) -> float:
        x = self.rng.choice([0.5, 1.25, -3.0, 1e-3, 7.0, 0.1])
        return float(np.nextafter(x, np.inf)) if self._hit() else x

    def bound(self, lo: int, hi: int) -> int:
        """An int in [lo, hi]; tweaked to a neighbour inside [lo, hi]."""
        b = self.rng.randint(lo, hi)
        return (b - 1 if b > lo else b + 1) if self._hit() else b

    def pick(self, options: list):
        k = self.rng.randrange(len(options))
        return options[(k + 1) % len(options)] if self._hit() else options[k]


def _program(seed: int, tweak: int | None = None, prefix: str = ""):
    """A small random program (outputs, inputs) named with ``prefix``: a few layers drawn from
    elementwise maps, masked reductions, padded reads, casts and two-input products."""
    d = _Decisions(seed, tweak)
    n, m = d.bound(3, 6), d.bound(4, 7)
    dtype = d.pick(["float32", "float64"])
    X = ta.placeholder((n, m), dtype, prefix + "X")
    W = ta.placeholder((m,), dtype, prefix + "W")
    cur = X
    for layer in range(d.bound(2, 3)):
        cur = _layer(d, d.pick(["map", "masked_sum", "pad", "cast", "product"]), cur, W, f"{prefix}L{layer}",
                     prefix, dtype)
    return [cur], [X, W], d.count


def _layer(d: _Decisions, kind: str, cur, W, name: str, prefix: str, dtype: str):
    n, m = cur.shape
    c = d.const()
    if kind == "map":
        f = d.pick([ta.exp, ta.tanh, ta.sigmoid])
        return ta.compute((n, m), lambda i, j: f(cur[i, j] * c), name=name)
    if kind == "masked_sum":
        kb, wb = d.bound(2, m), d.bound(0, m)
        red = d.pick([ta.sum, ta.max])
        k = ta.reduce_axis((0, kb), prefix + "k")
        s = ta.compute((n,), lambda i: red(cur[i, k] * c, axis=k, where=k < wb), name=name + "s")
        return ta.compute((n, m), lambda i, j: cur[i, j] - s[i], name=name)
    if kind == "pad":
        sh = d.bound(1, 2)
        return ta.compute((n, m), lambda i, j: ta.if_then_else(j >= sh, cur[i, j - sh], c), name=name)
    if kind == "cast":
        other = d.pick(["float64", "float32"])
        wide = ta.compute((n, m), lambda i, j: ta.cast(other, cur[i, j]) + c, name=name + "w")
        return ta.compute((n, m), lambda i, j: ta.cast(dtype, wide[i, j]), name=name)
    return ta.compute((n, m), lambda i, j: cur[i, j] * W[j] + c, name=name)


def _key(outputs, inputs, target="llvm", **options) -> str | None:
    tgt = parse_target(target)
    return describe(outputs, inputs, Options.make({**options, "target": tgt}), tgt, True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**6), st.data())
def test_one_changed_decision_changes_the_key(seed, data):
    outs, ins, count = _program(seed)
    base = _key(outs, ins)
    assert base is not None
    tweak = data.draw(st.integers(0, count - 1), label="tweak")
    outs2, ins2, _ = _program(seed, tweak)
    assert _key(outs2, ins2) != base
    # rebuilt from scratch with other names: the same key (names reach neither lowering nor
    # the code) -- but not where run-time errors print names
    outs3, ins3, _ = _program(seed, prefix="renamed_")
    assert outs3[0].name != outs[0].name and outs3[0] is not outs[0]
    assert _key(outs3, ins3) == base
    assert _key(outs3, ins3, checked=True) != _key(outs, ins, checked=True)


OPTION_CHANGES = [{"fastmath": False}, {"opt_level": 2}, {"vector_width": 4}, {"parallel": False},
                  {"parallel_min_work": 1}, {"fuse": False}, {"microkernel": False},
                  {"tile": (4, 16, 64, 32)}, {"checked": True}, {"variants": True},
                  {"choices": {"L0#0": "loops"}}]


@pytest.mark.parametrize("change", OPTION_CHANGES, ids=lambda c: next(iter(c)))
def test_every_option_and_the_target_are_in_the_key(change):
    outs, ins, _ = _program(7)
    base = _key(outs, ins)
    assert _key(outs, ins, **change) != base
    assert _key(outs, ins, num_threads=3) == base  # (read when the kernel runs, not compiled in)


def test_target_and_cache_sizes_are_in_the_key():
    outs, ins, _ = _program(11)
    host = parse_target("llvm")
    assert _key(outs, ins, "llvm -mcpu=haswell") != _key(outs, ins, "llvm")
    import dataclasses

    other = dataclasses.replace(host, l2=host.l2 * 2)  # the tiles read cache sizes
    assert describe(outs, ins, Options.make({"target": other}), other, True) \
        != _key(outs, ins, host)


def test_identity_not_names_of_tensors_and_axes():
    """Two placeholders of one name are two tensors; one placeholder read twice is one."""
    A, B = ta.placeholder((4,), name="A"), ta.placeholder((4,), name="A")
    two = ta.compute((4,), lambda i: A[i] * B[i], name="Y")
    one = ta.compute((4,), lambda i: A[i] * A[i], name="Y")
    assert _key([two], [A, B]) != _key([one], [A, B])
    assert _key([two], [A, B]) != _key([two], [B, A])  # argument order
    k1, k2 = ta.reduce_axis((0, 4), "k"), ta.reduce_axis((0, 4), "k")
    X = ta.placeholder((4, 4), name="X")
    # both axes are named k: a description by names would read X[i, k] * X[k, k] twice
    rows = ta.compute((4,), lambda i: ta.sum(X[i, k1] * X[k1, k2], axis=[k1, k2]), name="S")
    cols = ta.compute((4,), lambda i: ta.sum(X[i, k1] * X[k2, k1], axis=[k1, k2]), name="S")
    assert _key([rows], [X]) != _key([cols], [X])


def test_a_raise_gather_keeps_names():
    """A gather under mode="raise" prints the tensor's and index's names when it fails."""
    def prog(prefix):
        E, ix = ta.placeholder((5, 3), name=prefix + "E"), ta.placeholder((4,), "int32", prefix + "I")
        return [ta.compute((4, 3), lambda i, j: E.take(ix[i], j), name=prefix + "G")], [E, ix]

    assert _key(*prog("a")) != _key(*prog("b"))


def test_renamed_program_reuses_the_kernel_and_names_its_own_arguments(tmp_path, monkeypatch, rng):
    monkeypatch.setenv("TENSORAD_CACHE_DIR", str(tmp_path))
    outs, ins, _ = _program(3)
    first = ta.build(outs, ins, cache=False)
    outs2, ins2, _ = _program(3, prefix="other_")
    second = ta.build(outs2, ins2, cache=False)
    assert second.compiled is first.compiled  # one compiled kernel
    feed = {t: rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in ins2}
    np.testing.assert_allclose(second(*[feed[t] for t in ins2]), ta.evaluate(outs2, feed)[0], rtol=1e-5,
                               atol=1e-6)
    with pytest.raises(ValueError, match="input other_W: expected shape"):
        second(feed[ins2[0]], np.zeros(1, ins2[1].dtype))
    assert "other_L" in str(second.lowered) and "other_L" not in str(first.lowered)


SCRIPT = r"""
import json, sys
import numpy as np
import tensorad as ta
from tensorad import topi
B = sys.modules["tensorad.codegen.build"]
L = sys.modules["tensorad.codegen.lower"]
if sys.argv[1] == "warm":
    real = L._lower_program
else:
    def refuse(*a, **k):
        raise AssertionError("lowering ran on a warm cache")
    real, L._lower_program = L._lower_program, refuse
X = ta.placeholder((2, 3, 9, 9), "float32", "X")
W = ta.placeholder((4, 3, 3, 3), "float32", "W")
Y = topi.nn.relu(topi.nn.conv2d(X, W, 2, 1))
H = ta.placeholder(Y.shape, "float32", "H")
grads = list(ta.JacobianRecursive(Y, [X, W], H))
fwd = ta.build([Y], [X, W])
bwd = ta.build(grads, [X, W, H])
rng = np.random.default_rng(0)
x, w, h = (rng.standard_normal(t.shape).astype(np.float32) for t in (X, W, H))
feed = {X: x, W: w, H: h}
err = [float(np.max(np.abs(got - want))) for got, want in
       zip([fwd(x, w), *bwd(x, w, h)], ta.evaluate([Y, *grads], feed))]
L._lower_program = real  # kernel.lowered lowers on demand
origins = [fwd.origin, bwd.origin]
stats = {"compiled": origins.count("compiled"), "loaded": origins.count("disk")}
print(json.dumps({"stats": stats, "err": err, "text": str(bwd.lowered), "work": bwd.work,
                  "lowered_work": bwd.lowered.work}))
"""


def _run(cache_dir, mode):
    env = {k: v for k, v in os.environ.items() if k != "TENSORAD_NO_DISK_CACHE"}
    env["TENSORAD_CACHE_DIR"] = str(cache_dir)
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, f"rc={out.returncode}\n{out.stderr[-3000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_warm_cache_in_a_new_process_runs_no_lowering(tmp_path):
    warm = _run(tmp_path, "warm")
    assert warm["stats"]["compiled"] == 2 and max(warm["err"]) < 1e-4
    again = _run(tmp_path, "refuse")  # lowering raises in this process
    assert again["stats"] == {"compiled": 0, "loaded": 2}
    assert max(again["err"]) < 1e-4
    assert again["text"] == warm["text"] and again["work"] == warm["work"] == again["lowered_work"]


def _entry(key):
    payload = diskcache.get(key)
    meta, obj, zsrc = BUILD._unpack_entry(payload)
    return meta, obj, zsrc


def _rewrite(key, meta, obj, zsrc):
    import struct

    head = json.dumps(meta).encode()
    diskcache.put(key, struct.pack("<III", len(head), len(obj), len(zsrc)) + head + obj + zsrc)


@pytest.mark.parametrize("attack", ["key text", "signature shape", "signature temps", "work"])
def test_entry_for_another_key_text_or_signature_is_rebuilt(tmp_path, monkeypatch, rng, attack):
    monkeypatch.setenv("TENSORAD_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TENSORAD_NO_DISK_CACHE", raising=False)
    monkeypatch.setattr(compiled_cache, "COMPILED", CompiledCache())
    A = ta.placeholder((6, 5), "float64", "A")
    S = ta.compute((6,), lambda i: A[i, 0], name="S")
    k = ta.reduce_axis((0, 5), "k")
    T = ta.compute((6,), lambda i: ta.sum(A[i, k] * 0.5, axis=k), name="T")
    Y = ta.compute((6, 5), lambda i, j: A[i, j] - T[i] + S[i], name="Y")
    kern = ta.build([Y], [A], materialize=[T], fuse=False)
    key = kern.compiled.key
    meta, obj, zsrc = _entry(key)
    assert meta["key"].startswith("buildkey") and meta["signature"]["temps"]
    if attack == "key text":  # a colliding digest: the entry of another program under this key
        half, quarter = (f"f{np.float64(c).tobytes().hex()}" for c in (0.5, 0.25))
        meta["key"] = meta["key"].replace(half, quarter)
        assert meta["key"] != kern.compiled.meta["key"]
    elif attack == "signature shape":
        meta["signature"]["inputs"][0][0] = [6, 6]
    elif attack == "signature temps":
        meta["signature"]["temps"] = []
    else:
        meta["signature"]["work"] = "many"
    _rewrite(key, meta, obj, zsrc)
    monkeypatch.setattr(compiled_cache, "COMPILED", CompiledCache())  # a new process: only the disk has it
    again = ta.build([Y], [A], materialize=[T], fuse=False)
    assert again.origin == "compiled"
    a = rng.standard_normal((6, 5))
    np.testing.assert_allclose(again(a), a - 0.5 * a.sum(1, keepdims=True) + a[:, :1], rtol=1e-12)
    monkeypatch.setattr(compiled_cache, "COMPILED", CompiledCache())  # the rebuilt entry loads
    assert ta.build([Y], [A], materialize=[T], fuse=False).origin == "disk"
