"""The differential checks run on each fuzzed program (in a worker process, :mod:`.runner`).

Every check compares tensorad with an oracle it did not compute:

* ``forward``:   ``ta.build`` (the drawn options) against ``ta.evaluate``, the kernel called
  as the program's ``calling`` says (plain arrays, ``out=`` arrays, strided views, objects
  offering only ``__dlpack__``);
* ``checked``:   ``ta.build(checked=True)`` against ``ta.evaluate`` (and no ``IndexError``);
* ``optimizer``: each tensor after ``OptimizeAndLiftNonzeronessConditions`` and after
  ``InlineNonReductions`` of the tensors it reads, and the reverse gradient with
  ``optimize=True``, against the unoptimized forms, all through ``ta.evaluate``; and that
  gradient read back from the differentiation cache by the program defined anew, against it;
* ``reverse``:   the built reverse gradient (a random head) against central finite differences
  in float64 of a strict forward kernel (itself checked by ``forward``);
* the reverse gradient of these checks has, on a third of the seeds, one tensor's derivative
  replaced by an ``override`` rule (its own gradient: the true derivative);
* ``jvp``:       ``u . (J^T h)`` from the reverse gradient against ``h . (J u)`` from ``ta.jvp``
  (a quarter of the seeds also with two heads at once, a head of shape ``(2,) + out.shape``);
* ``hvp``:       ``ta.hessian_vector_product`` of ``sum(OUT * h)`` against finite differences of
  its built gradient along ``v``;
* ``jacobian``:  the full Jacobian, ``ta.Jacobian`` of each input (optimized on even seeds) and
  ``ta.gradient`` without a head, built with the drawn options, against central finite
  differences of every output element (programs whose Jacobians have at most
  :data:`JACOBIAN_MAX` elements);
* ``split``:     ``ta.function``'s forward built with the drawn options and its backward built
  *differently* (:func:`split_options`: fast math flipped, another target, the rest drawn
  again), the backward run on the forward's residuals (a checkpoint policy per seed, named or
  a function), against
  ``ta.evaluate`` of the outputs and of the unoptimized gradient;
* ``cheap_gradient``: the cheap-gradient principle (:mod:`.cheap`): the reverse gradient of
  ``OUT`` with respect to its float inputs does at most four forwards' work plus one read of
  the inputs and of the head (``ta.lower(...).work``, exact), unless :data:`.cheap.ALLOWED`
  names the program.  Not one of :data:`ALL` (the differential checks the test suite rotates
  over): ``python -m fuzz`` runs it on every program by default (:data:`EVERY`).
* ``sizes``: one extent made a size variable ``n``: bound at that extent, the program's values;
  built once, at three more, the values, optimized and raw gradients and work of the program
  written at that size, bit for bit; the program over ``n`` from 1 (from its extent where a read
  leaves a tensor below it) built once, at its least size, the next and two sizes past a vector's
  width, against ``ta.evaluate`` (by default too, like ``cheap_gradient``).

Every check also fails when LLVM writes a diagnostic ("remark: ... loop not vectorized") to the
process's stderr: a user's build prints nothing.

Derivative checks run on the float64 version of the program, and only on ``safe`` programs
(smooth where the data lies).  A check returns ``None`` or raises :class:`Mismatch` with what
differs; any other exception is a failure of the program too (a crash of tensorad).
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import re
import sys
import tempfile
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np

from . import data as fdata

FORWARD = ("forward", "checked", "optimizer")
DERIVATIVE = ("reverse", "jvp", "hvp", "split", "jacobian")
SPLIT_POLICIES = ("default", "save_all", "recompute_all")
ALL = FORWARD + DERIVATIVE
WORK = ("cheap_gradient",)
SIZES = ("sizes",)
EVERY = ALL + WORK + SIZES  # what ``python -m fuzz`` runs by default
FINITE_DIFFERENCES = ("reverse", "hvp", "jacobian")  # not run on a program with steps (``Program.steps``)
JACOBIAN_MAX = 4096  # elements of an input's full Jacobian that the ``jacobian`` check builds


class Mismatch(AssertionError):
    """tensorad disagrees with an oracle."""


class Invalid(Exception):
    """The generated program is not a valid program (a generator bug, reported apart)."""


def load(source: str) -> dict:
    ns: dict = {}
    try:
        exec(compile(source, "<fuzz program>", "exec"), ns)
    except Exception as e:  # the language rejected the program
        raise Invalid(f"{type(e).__name__}: {e}") from e
    return ns


# ---- comparison -------------------------------------------------------------------------------

def compare(what: str, got, want, dtype: str, *, ref64=None, lenient: bool = False,
            rtol: float | None = None, strong_zero: bool = False, noise=None, alternatives=()):
    """``got`` against ``want`` (and, for float32, a float64 reference ``ref64``: an element
    passes when it is close to either).  Non-finite values must match exactly unless
    ``lenient`` (reassociated sums of huge values may overflow differently).  With
    ``strong_zero`` an element that ``want`` has non-finite may be anything: nonzeroness
    lifting skips a masked term whose other factor is inf or NaN (docs/conventions.md).
    ``noise``: per element, how far rounding alone may move it (added to the tolerance).
    ``alternatives``: other correct roundings of ``want`` (its sums in other orders); an element
    also passes when it passes against one of them, by the same rules (an inf where an order
    overflows, but not any finite value there)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        raise Mismatch(f"{what}: shape {got.shape} != {want.shape}")
    if dtype not in ("float16", "bfloat16", "float32", "float64"):
        # an integer that floats decide (an argmax's index) may follow another order's winner,
        # or move as far as a few ulps of the inputs move it (``noise``, fast math only): seed
        # 427930's argmax of sin of products near 1e41, whose every ulp moves the sine anywhere
        wrong = got != want
        for alt in alternatives:
            wrong &= got != np.asarray(alt)
        if noise is not None:
            wrong &= np.abs(got.astype(np.float64) - want.astype(np.float64)) > noise
        if wrong.any():
            bad = np.argwhere(wrong)[:3].tolist()
            raise Mismatch(f"{what}: integers differ at {bad}: {got[tuple(np.array(bad).T)]} != "
                           f"{want[tuple(np.array(bad).T)]}")
        return
    # (half dtypes only store: their arithmetic, and an integer cast from it, is float32's)
    rtol = rtol if rtol is not None else (1e-8 if dtype == "float64" else 2e-3)
    kw = dict(ref64=ref64, lenient=lenient, rtol=rtol, strong_zero=strong_zero, noise=noise)
    odd, far, g, w, err, allowed = _failures(got, want, **kw)
    for alt in alternatives:
        if not (odd.any() or far.any()):
            break
        a_odd, a_far = _failures(got, alt, **kw)[:2]
        fine = ~(a_odd | a_far)
        odd, far = odd & ~fine, far & ~fine
    if odd.any():
        k = tuple(np.argwhere(odd)[0])
        raise Mismatch(f"{what}: non-finite values differ at {list(k)}: got {g[k]!r}, want {w[k]!r}")
    if far.any():
        k = tuple(np.argwhere(far)[0])
        raise Mismatch(f"{what}: at {list(k)} got {g[k]!r}, want {w[k]!r} (|diff| {err[k]:.3g} > "
                       f"{allowed[k]:.3g}; {int(far.sum())} of {far.size} elements differ)")


def _failures(got, want, *, ref64, lenient: bool, rtol: float, strong_zero: bool, noise):
    """:func:`compare`'s verdict per element of float arrays: where non-finite values differ
    (never with ``lenient``), where finite ones are further apart than allowed, and the values,
    errors and allowances the message quotes."""
    g, w = np.asarray(got).astype(np.float64), np.asarray(want).astype(np.float64)
    fg, fw = np.isfinite(g), np.isfinite(w)
    if strong_zero:
        g = np.where(fw, g, w)
        fg = np.isfinite(g)
    odd = np.zeros(g.shape, bool)
    if not lenient:
        odd = ~((fg == fw) & np.where(~fw, (np.isnan(g) == np.isnan(w)) & ((g == w) | np.isnan(w)), True))
    both = fg & fw
    scale = max(1.0, float(np.max(np.abs(w[both]), initial=0.0)))
    allowed = rtol * np.abs(w) + rtol * scale  # (|w| + scale overflows beside 1e308)
    if noise is not None:
        allowed = allowed + noise
    with np.errstate(all="ignore"):
        err = np.where(both, np.abs(g - w), 0.0)
    if ref64 is not None:
        r = np.asarray(ref64, np.float64)
        with np.errstate(all="ignore"):  # (inf - inf where g is not finite: masked out)
            err = np.minimum(err, np.where(both & np.isfinite(r), np.abs(g - r), np.inf))
    with np.errstate(invalid="ignore"):
        far = both & (err > allowed)
    return odd, far, g, w, err, allowed


FD_STEPS = (1, 64, 4096)  # multiples of the base step tried where the differences decide nothing


def compare_fd(what: str, got, central, eps: float, *, rtol: float) -> int:
    """``got`` (a derivative) against central differences, an oracle that checks itself.

    ``central(step)`` gives the estimates and a bound of their rounding noise (one ulp of each
    value differenced, times the head, over ``2 step``).  Where ``got`` disagrees with the
    estimate at ``eps``, an element is *decided* at the first step ``s`` of ``FD_STEPS * eps``
    where the estimates at ``s`` and ``2 s`` agree (to the comparison's tolerance) and the noise
    of both is under a quarter of it; a mismatch is called only against a decided estimate.
    Undecided elements say nothing about ``got``: a kink or a tie in every window, a function
    that varies faster than any step can follow (``sin`` of 1e234), or values so
    large that their ulps drown every difference (a constant 51-fold product beside
    ``4.5 x``).  Decided elements are compared exactly as :func:`compare` does.  Returns the
    number of undecided elements (reported by the runner: the oracle's abstentions are counted,
    never silent)."""
    first = central(eps)
    fd, noise = first[:2]
    try:
        compare(what, got, fd, "float64", rtol=rtol)
        return 0
    except Mismatch:
        pass
    ref = np.zeros(np.shape(fd))
    decided = np.zeros(np.shape(fd), bool)
    for m in FD_STEPS:
        at_s = first if m == 1 else central(m * eps)
        at_2s = central(2 * m * eps)
        (a, na), (b, nb) = at_s[:2], at_2s[:2]
        ok = fd_stable(a, b, rtol, np.maximum(na, nb)) & ~decided
        if len(at_s) > 2 and len(at_2s) > 2:  # (a centred kink: its estimates agree at every step)
            ok &= ~fd_kink(a, at_s[2], at_2s[2], rtol, np.maximum(na, nb))
        ref[ok] = np.asarray(a)[ok]
        decided |= ok
        if decided.all():
            break
    undecided = int(decided.size - np.count_nonzero(decided))
    note = f" ({undecided} elements whose differences decide nothing not compared)" if undecided else ""
    compare(what + note, np.where(decided, got, 0.0), np.where(decided, ref, 0.0), "float64", rtol=rtol)
    return undecided


def fd_kink(estimate, skew, skew2, rtol: float, noise):
    """Where the differences straddle a kink of the function: ``skew`` is ``|f(x + s) - 2 f(x) +
    f(x - s)| / s``, the gap between the forward and backward differences at step ``s``, and
    ``skew2`` the same at ``2 s``.  A smooth function's gap grows with the step (``s |f''|``); a
    kink's stays the gap between its one-sided derivatives -- ``minimum(a, b)`` at ``a == b``
    (bfloat16 data ties often): forward 0, backward 1, central 1/2 at every
    step, which the kernel's one-sided rule (1) cannot match and which no step decides."""
    with np.errstate(all="ignore"):
        tol = rtol * np.abs(estimate) + 4 * np.asarray(noise) + 1e-12
        return (skew > 10 * tol) & (skew2 < 1.5 * skew)


def fd_stable(a, b, rtol: float, noise=None):
    """Where two finite-difference estimates of one derivative agree: both finite and within
    ``rtol * (|a| + scale)``, and (given) their rounding ``noise`` under a quarter of that; the
    scale (as in :func:`compare`) is the largest magnitude among the elements whose two
    estimates agree to a relative 1e-3 (garbage from an unconverged element must not widen
    the tolerance of the others)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    finite = np.isfinite(a) & np.isfinite(b)
    with np.errstate(all="ignore"):
        diff = np.where(finite, np.abs(a - b), np.inf)
        close = finite & (diff <= 1e-3 * np.maximum(np.abs(a), np.abs(b)))
    scale = max(1.0, float(np.max(np.abs(a[close]), initial=0.0)))
    tol = rtol * (np.abs(np.where(finite, a, 0.0)) + scale)
    ok = finite & (diff <= tol)
    if noise is not None:
        ok &= np.asarray(noise, np.float64) <= tol / 4
    return ok


def fd_noise(values, weights=None):
    """One ulp of each value (weighted), summed over the last axes: the least rounding noise
    in a difference of computed values (NaN/inf give inf)."""
    with np.errstate(all="ignore"):
        u = np.where(np.isfinite(values), np.spacing(np.abs(np.asarray(values, np.float64))), np.inf)
        if weights is not None:
            u = np.where(weights != 0, u * np.abs(weights), 0.0)
    return u


class SavePolicy:
    """A checkpoint policy function (``ta.function(policy=f)``): saves the tensors whose name
    hashes, with the seed, to an even number -- a mix no named policy makes."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def __call__(self, tensor) -> bool:
        import zlib

        return (zlib.crc32(tensor.name.encode()) + self.seed) % 2 == 0

    def __repr__(self) -> str:
        return f"SavePolicy({self.seed})"


def split_policy(seed: int):
    """``split``'s checkpoint policy: a named one by the seed, a function for a quarter of
    the seeds (the others keep the policy they had before functions were drawn)."""
    if (seed // 3) % 4 == 1:
        return SavePolicy(seed)
    return SPLIT_POLICIES[seed % len(SPLIT_POLICIES)]


def split_options(options: dict, seed: int) -> dict:
    """Build options for ``split``'s backward that differ from the forward's ``options``: fast
    math flipped, another named target, the other options drawn again.  Deterministic per seed,
    from a generator of its own (the programs and options of every seed stay as they were)."""
    import random

    from .options import TARGETS, draw_options

    r = random.Random(seed * 1_000_003 + 7)
    other = draw_options(r, r)
    other["fastmath"] = not options.get("fastmath", True)
    other["target"] = r.choice([t for t in TARGETS if t != options.get("target", TARGETS[0])])
    return other


class DLPackOnly:
    """An input seen by a kernel only through the DLPack protocol (as a torch or JAX array
    would be)."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = array

    def __dlpack__(self, *args, **kwargs):
        return self._array.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def strided(a: np.ndarray, reverse: bool) -> np.ndarray:
    """``a``'s values as a non-contiguous view: every other element of a wider array along the
    last axis, or (``reverse``) a view with a negative stride."""
    if a.ndim == 0:
        return a
    if reverse:
        return np.ascontiguousarray(a[..., ::-1])[..., ::-1]
    wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
    wide[..., ::2] = a
    return wide[..., ::2]


def call_as(kernel, args: list, outputs: list, calling: str, seed: int):
    """``kernel(*args)`` called the way ``calling`` says (:data:`.program.CALLING`,
    :data:`.program.CALLING22`), its outputs as a tuple; with ``out=``, the arrays given must
    be the arrays returned (filled with NaN first: an element the kernel does not write shows);
    ``export``: through the shared library ``kernel.export`` writes, loaded back by ``ta.load``;
    ``threads``: after ``kernel.num_threads`` is set to another count."""
    if calling == "export":
        import tensorad as ta

        with tempfile.TemporaryDirectory() as tmp:
            kernel = ta.load(kernel.export(os.path.join(tmp, "fuzzed.so")))
            return _tuple(kernel(*args))
    if calling == "threads":
        kernel.num_threads = 1 + seed % 4
        return _tuple(kernel(*args))
    if calling == "strided":
        args = [strided(a, (seed + k) % 2 == 1) for k, a in enumerate(args)]
    elif calling == "dlpack":  # (NumPy exports no DLPack for ml_dtypes' bfloat16)
        args = [DLPackOnly(a) if a.dtype.kind in "fiu" else a for a in args]
    if calling != "out":
        return _tuple(kernel(*args))
    outs = tuple(np.full(t.shape, np.nan if t.dtype.startswith("float") else -7,
                         fdata.np_dtype(t.dtype)) for t in outputs)
    got = _tuple(kernel(*args, out=outs if len(outs) > 1 else outs[0]))
    if len(got) != len(outs) or any(g is not o for g, o in zip(got, outs)):
        raise Mismatch("a kernel called with out= returned other arrays than the ones given")
    return got


def _prod(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


# ---- the checks ---------------------------------------------------------------------------------

class GradCase(NamedTuple):
    """The float64 program's output, its float inputs (differentiated), all its inputs, the
    head ``_H`` and tangents ``_U`` (placeholders), and the feed of all of them."""

    out: object
    ins: list
    all_ins: list
    head: object
    tangents: list
    feed: dict


class Case:
    """One program with its data and options, as a worker sees it."""

    def __init__(self, job: dict) -> None:
        import tensorad as ta

        self.ta = ta
        self.job = job
        self.ns = load(job["source"])
        self.ns64 = load(job["source64"]) if job["dtype"] != "float64" else self.ns
        self.options = dict(job["options"])
        self.seed = job["seed"]
        self.profile = job["data"]
        self.dtype = job["dtype"]
        self.outputs = list(self.ns["TENSORS"]) if job.get("all_outputs", True) else [self.ns["OUT"]]
        self.inputs = list(self.ns["INPUTS"])
        self.feed = fdata.feed(self.inputs, self.profile, self.seed)
        self.lenient = self.profile in ("wide", "huge") and self.options.get("fastmath", True)
        self.calling = job.get("calling", "plain")
        self.half = self.dtype in ("float16", "bfloat16")
        self.undecided = 0  # derivative elements the finite differences could not judge
        self.chain_nans = 0  # derivative NaNs that are IEEE's 0 * inf of the chain rule
        self.builds = 0  # (seeds the candidates pinned under ``tune``: :meth:`build`)

    def build(self, outputs, inputs, **extra):
        """``ta.build`` with the program's options.  A program drawn with ``tune`` also pins a
        random candidate (seeded) at every point offered several: tune measures only the points
        heavy enough to time (:data:`tensorad.codegen.tune.MIN_CYCLES`), so the fuzzer covers the
        other candidates of the small programs it makes itself."""
        opts = {**self.options, **extra}
        if opts.get("tune"):
            plain = {k: v for k, v in opts.items() if k != "tune"}
            offered = self.ta.lower(outputs, inputs, **{**plain, "variants": True}).offered
            self.builds += 1
            r = random.Random(self.seed * 1009 + self.builds)
            opts.update(variants=True, choices={point: r.choice(labels) for point, labels, _ in offered})
        return self.ta.build(outputs, inputs, **opts)

    def args(self, feed=None):
        feed = feed or self.feed
        return [feed[p] for p in self.inputs]

    def _outs64(self):
        """The same outputs in the float64 program, and its feed (the same values)."""
        ins64 = self.ns64["INPUTS"]
        outs64 = list(self.ns64["TENSORS"]) if self.job.get("all_outputs", True) else [self.ns64["OUT"]]
        feed64 = {p64: self.feed[p].astype(np.float64) if p64.dtype == "float64" else self.feed[p]
                  for p, p64 in zip(self.inputs, ins64)}
        return outs64, feed64

    def _reference(self):
        want = _tuple(self.ta.evaluate(self.outputs, self.feed))
        ref64 = None
        if self.dtype != "float64":
            outs64, feed64 = self._outs64()
            ref64 = _tuple(self.ta.evaluate(outs64, feed64))
        return want, ref64

    def _compare_all(self, what, got, want, ref64):
        extra = None
        for k, (t, g, w) in enumerate(zip(self.outputs, got, want)):
            if _casts_floats(t) and self.dtype != "float64":
                # an integer made from float data (``int64(erf(x) * 1e10)``): one ulp of the
                # float moves it by |value| * ulp, so it is judged as a float of the program's
                # dtype, also against the float64 program's integers -- and
                # against the integers of the other summation orders: past a ``%`` an ulp moves
                # it anywhere (``int64(c * 1e10) % 5`` of a float32 product, the
                # strict kernel's index-order sum an ulp from NumPy's)
                args = dict(ref64=None if ref64 is None else ref64[k], lenient=self.lenient)
                try:
                    compare(f"{what} {t.name}", g, w, self.dtype, **args)
                except Mismatch:
                    extra = self.allowance(want) if extra is None else extra
                    compare(f"{what} {t.name}", g, w, self.dtype, alternatives=extra[1][k], **args)
                continue
            # half storage: a stored value may round to the neighbouring half where a kernel sums
            # in another order than evaluate (one ulp: 2^-8 for bfloat16), and carry it on
            rtol = 3e-2 if self.half else (
                None if self.options.get("fastmath", True) or t.dtype != "float32" else 1e-3)
            args = dict(ref64=None if ref64 is None else ref64[k], lenient=self.lenient, rtol=rtol)
            try:
                compare(f"{what} {t.name}", g, w, t.dtype, **args)
            except Mismatch:
                extra = self.allowance(want) if extra is None else extra
                noise, alternatives = extra
                compare(f"{what} {t.name}", g, w, t.dtype, noise=noise[k], alternatives=alternatives[k],
                        **args)

    def allowance(self, want) -> tuple[list, list]:
        """Per element of each output (whose ``evaluate`` values are ``want``), how far a correct
        kernel may be from ``want`` by rounding alone -- the spread over summation orders
        (:meth:`order_spread`, any kernel) plus, for a fast-math kernel, the conditioning of the
        element (:meth:`rounding_noise`) -- and the other orders' values (each a reference an
        element may match instead).  Asked only after a kernel disagrees."""
        spread, alternatives = self.order_spread(self.outputs, self.feed, want)
        if self.options.get("fastmath", True):
            spread = [s + n for s, n in zip(spread, self.rounding_noise(want))]
        if self.dtype != "float64":  # float32 math rounded once: NumPy's may be an ulp off,
            from tensorad.reference import evaluate_in_order  # which a step turns into 1

            rounded = _tuple(evaluate_in_order(list(self.outputs), self.feed, "numpy", rounded_math=True))
            alternatives = [alts + [r] for alts, r in zip(alternatives, rounded)]
        return spread, alternatives

    def order_spread(self, tensors, feed, want, factor: float = 2.0, regrouped: bool = False
                     ) -> tuple[list, list]:
        """The program's values with its sums and products folded one term at a time, in
        index order and in reverse (``tensorad.reference.evaluate_in_order``), instead of NumPy's
        pairwise order, per output, and axis by axis (partial sums over the inner axes, then
        their sum) where sums may be regrouped -- by the optimizer (``regrouped``)
        or a fast-math kernel's partial sums: ``factor`` times how far they are from ``want``
        where both are finite (0 elsewhere), and the list of those values.

        A kernel may sum in any order (a strict one in index order, a vectorized one in lanes,
        a parallel one in pieces); each is an IEEE rounding of the same formula.  An
        order-sensitive element -- ``layer_norm`` of 16 equal values of 1.22e120:
        NumPy's pairwise mean is exact and gives 0, an index-order mean is an ulp off and gives
        ``ulp / ulp = 1`` -- cannot be judged closer than its spread; an element whose orders
        agree gets no allowance, so a wrong value (a term missing) still fails.  ``factor``: a
        third order may err on the other side of ``want``.  The mixed orders fold neighbouring
        elements of a reduction in opposite orders: two elements equal in every single order
        may differ in a kernel, which fast math lets order them apart, and a comparison of them
        flip (``select(t0[0, 0] >= t0[i, 1], ...)`` of a custom product equal
        along ``i``); a strict kernel (``fastmath=False``) folds every element in index
        order, so it gets the single orders only.  Where an order overflows and
        ``want`` does not, that order's inf is a value to match, not an allowance."""
        from tensorad.reference import evaluate_in_order

        worst = [np.zeros(np.shape(w)) for w in want]
        alternatives: list = [[] for _ in want]
        fast = self.options.get("fastmath", True)
        mixed = ("mixed", "mixed-odd") if fast else ()
        nested = ("nested",) if fast or regrouped else ()
        for order in ("sequential", "reversed") + nested + mixed:
            moved = _tuple(evaluate_in_order(list(tensors), feed, order))
            for k, (m, w) in enumerate(zip(moved, want)):
                alternatives[k].append(m)
                m, w = np.asarray(m), np.asarray(w)
                if m.dtype.kind != "f" and m.dtype.name != "bfloat16":
                    continue
                m, w = m.astype(np.float64), w.astype(np.float64)
                with np.errstate(all="ignore"):
                    d = np.where(np.isfinite(m) & np.isfinite(w), factor * np.abs(m - w), 0.0)
                worst[k] = np.maximum(worst[k], d)
        if regrouped:  # optimized code may give a zero the other sign (docs/conventions.md),
            # and so an infinity made from it (pow(-(0.0), -3) under a max)
            for k, m in enumerate(_tuple(evaluate_in_order(list(tensors), feed, "numpy",
                                                           unsigned_zeros=True))):
                alternatives[k].append(m)
        return worst, alternatives

    def rounding_noise(self, want, ulps: int = 4, draws: int = 2) -> list:
        """Per element of each output, how far ``evaluate``'s value moves when every float
        input moves by up to ``ulps`` ulps (the largest over ``draws`` random draws and their
        mirror images), times ``ulps``: the conditioning of that element.  The mirror of a draw
        moves a nearly linear element the other way, so an element that a rounding can push
        either side of a steep point (``tanh`` of a sum whose terms +-1e60 cancel: an FMA's
        unrounded product leaves 1e44 of them) is found by every draw, not by
        half of them.  Fast-math may reassociate a reduction, whose
        rounding then differs by a few ulps of its terms; an element that amplifies such a
        difference past the tolerance (``cos`` of a product near 1e9) cannot be
        judged closer than this.  Asked only after a fast-math kernel disagrees."""
        rng = np.random.default_rng(self.seed)
        worst = [np.zeros(np.shape(w)) for w in want]
        steps = [{p: rng.uniform(-ulps, ulps, np.shape(v)) * np.finfo(np.asarray(v).dtype).eps
                  for p, v in self.feed.items() if np.asarray(v).dtype.kind == "f"}
                 for _ in range(draws)]
        for step in steps + [{p: -s for p, s in draw.items()} for draw in steps]:
            feed = {p: (np.asarray(v) * (1 + step[p])).astype(np.asarray(v).dtype) if p in step else v
                    for p, v in self.feed.items()}
            _widen(worst, _tuple(self.ta.evaluate(self.outputs, feed)), want)
        return [ulps * w for w in worst]

    def forward(self):
        want, ref64 = self._reference()
        kernel = self.build(self.outputs, self.inputs)
        got = _tuple(call_as(kernel, self.args(), self.outputs, self.calling, self.seed))
        self._compare_all(f"build (called with {self.calling} arguments)", got, want, ref64)

    def checked(self):
        want, ref64 = self._reference()
        try:
            got = _tuple(self.build(self.outputs, self.inputs, checked=True)(*self.args()))
        except IndexError as e:
            raise Mismatch(f"checked build reports an out-of-bounds access: {e}") from e
        self._compare_all("checked build", got, want, ref64)

    def optimizer(self):
        ta = self.ta
        for t in self.outputs:
            if t.dtype not in ta.FLOAT_DTYPES:
                continue
            opt = ta.OptimizeAndLiftNonzeronessConditions(t)
            inlined = ta.InlineNonReductions(t, _elementwise_reads(t))
            want, got, flat = ta.evaluate([t, opt, inlined], self.feed)
            self._compare_orders("optimized", [got], [t], self.feed, want=[want], lenient=self.lenient,
                                 strong_zero=True, rtol=3e-2 if self.half else None, regrouped=True)
            self._compare_orders("with the tensors it reads inlined", [flat], [t], self.feed, want=[want],
                                 lenient=self.lenient, rtol=3e-2 if self.half else None, regrouped=True)
        if not self.job.get("safe"):
            return
        ns, feed = self._grad_setup()
        out, ins, H = ns["OUT"], ns["_FIN"], ns["_H"]
        g_opt = self._gradient()
        g_raw = ta.JacobianRecursive(out, ins, H, optimize=False)
        vals = ta.evaluate(list(g_opt) + list(g_raw), feed)
        n = len(ins)
        self._compare_orders("optimized gradient", vals[:n], list(g_raw), feed, want=vals[n:],
                             strong_zero=True, regrouped=True)
        self._gradient_read_back(ns, feed, vals[:n])

    def _gradient_read_back(self, ns, feed, values) -> None:
        """The differentiation cache: the program defined anew (new tensors of the same names)
        differentiates to what :meth:`_gradient` computed and the disk cache keeps -- the same
        canonical text (``describe_graph``: ops, nodes, constants, ranges, names) and, under
        ``ta.evaluate`` on the same data, the same values.  (Not with an ``override``: never
        cached.)"""
        from tensorad.codegen.jit import disk_cache as diskcache
        from tensorad.codegen.jit.build_key import describe_graph

        if not diskcache.enabled() or self._override(ns) is not None:
            return
        ta = self.ta
        ns2 = load(self.job["source64"] if self.job["dtype"] != "float64" else self.job["source"])
        fin2 = [p for p in ns2["INPUTS"] if p.dtype in ta.FLOAT_DTYPES]
        H2 = ta.placeholder(ns2["OUT"].shape, "float64", name="head")
        again = list(ta.JacobianRecursive(ns2["OUT"], fin2, H2))
        if describe_graph(again).text != describe_graph(self._gradient()).text:
            raise Mismatch("the gradient read back from the differentiation cache is not the one computed")
        feed2 = {p2: feed[p] for p, p2 in zip(list(ns["INPUTS"]) + [ns["_H"]], list(ns2["INPUTS"]) + [H2])}
        for t, got, want in zip(again, ta.evaluate(again, feed2), values):
            if not np.array_equal(np.asarray(got), np.asarray(want), equal_nan=True):
                raise Mismatch(f"{t.name}: the gradient read back from the differentiation cache has "
                               f"other values than the one computed")

    # ---- derivatives (float64) ------------------------------------------------------------
    def sizes(self):
        """The program with one extent ``e`` made a size variable ``n >= e`` (``job["sized"]``): bound at
        ``e`` it computes the program's bits; built once, at ``e + 3`` its output gives the bits and
        its optimized gradient the work of the program written at that size, both gradients (raw
        and optimized) its values within rounding."""
        sized = self.job.get("sized")
        if sized is None:
            return
        try:
            sym, static = load(sized["symbolic"]), load(sized["static"])
        except Invalid:  # a read leaves its tensor at some size
            return
        from tensorad.ir.expr import SizeDecisionError

        with contextlib.suppress(SizeDecisionError):  # a decision made only at static sizes: a clear error
            self._sizes(sym, static, sized)

    def _sizes(self, sym: dict, static: dict, sized: dict) -> None:
        ta = self.ta
        own = ta.evaluate(sym["OUT"], dict(zip(sym["INPUTS"], self.args())))
        _same("the program bound at its own size", own, ta.evaluate(self.ns["OUT"], self.feed))
        options = {k: v for k, v in self.options.items() if k != "tune"}
        outs, raws = [[ns["OUT"]] for ns in (sym, static)], []
        if self.job["safe"] and sym["OUT"].dtype in ta.FLOAT_DTYPES:
            for ns, out in zip((sym, static), outs):
                fin = [p for p in ns["INPUTS"] if p.dtype in ta.FLOAT_DTYPES]
                ns["INPUTS"].append(head := ta.placeholder(ns["OUT"].shape, ns["OUT"].dtype, name="head"))
                out += ta.JacobianRecursive(ns["OUT"], fin, head)
                raws.append(ta.JacobianRecursive(ns["OUT"], fin, head, optimize=False))
        feed = fdata.feed(static["INPUTS"], self.profile, self.seed)
        args = [feed[p] for p in static["INPUTS"]]
        if raws:  # the raw symbolic gradient, evaluated at the new size
            values = [ta.evaluate(r, dict(zip(ns["INPUTS"], args))) for r, ns in zip(raws, (sym, static))]
            for t, g, w in zip(raws[1], *values):  # (within rounding: a raw max's gradient splits ties
                # by a winner's flat index where the extents are static, its sums grouped otherwise)
                compare(f"raw {t.name} at size {sized['at']}", g, w, t.dtype)
        got = _tuple(ta.build(outs[0], sym["INPUTS"], **options)(*args))
        want = _tuple(ta.build(outs[1], static["INPUTS"], **options)(*args))
        _same(f"{outs[1][0].name} at size {sized['at']}", got[0], want[0])
        for t, g, w in zip(outs[1][1:], got[1:], want[1:]):  # (within rounding: a factor that is a
            # constant at static sizes may stay in the sum's terms where a size's is taken out of it)
            compare(f"{t.name} at size {sized['at']}", g, w, t.dtype)
        at = {"n": sized["at"]}
        work = [ta.lower(o, ns["INPUTS"], **options, **({"sizes": at} if ns is sym else {})).work
                for o, ns in zip(outs, (sym, static))]
        if work[0] != work[1]:
            raise Mismatch(f"work at size {sized['at']}: {work[0]} bound, {work[1]} written at that size")
        self._every_size(sized, options)

    def _every_size(self, sized: dict, options: dict) -> None:
        """The program over a size that may be 1 (``sized["from_one"]``; where a read leaves its tensor at
        some size, from its own extent), built once, at the least size, the next, and sizes past a
        vector's width by an odd count, against ``ta.evaluate`` of the program at each size."""
        try:
            sym = load(sized.get("from_one", sized["symbolic"]))  # (a job written by hand may name none)
        except Invalid:
            sym = load(sized["symbolic"])
        ta = self.ta
        size = ta.symbolic.program_sizes(sym["INPUTS"] + [sym["OUT"]])[0]
        kernel = ta.build(sym["OUT"], sym["INPUTS"], **options)
        least = size.arg.min
        for n in sorted({least, least + 1, sized["at"] + 14, 2 * sized["at"] + 35}):
            bound = ta.bind(sym["INPUTS"], n=n)
            feed = fdata.feed(bound, self.profile, self.seed + n)
            args = [feed[p] for p in bound]
            try:
                want = ta.evaluate(sym["OUT"], dict(zip(sym["INPUTS"], args)))
            except IndexError:  # (data drawn for the program's extent indexes past a tensor at this size)
                continue
            compare(f"{sym['OUT'].name} built once, at size {n}", kernel(*args), want, sym["OUT"].dtype,
                    lenient=self.lenient, rtol=3e-2 if self.half else None)

    def _grad_setup(self):
        """The float64 program with a head ``_H``, tangents ``_U``, its float inputs ``_FIN`` and a
        feed for all of them."""
        if "_H" in self.ns64:
            return self.ns64, self._feed64
        ta, ns = self.ta, self.ns64
        _, feed = self._outs64()
        out = ns["OUT"]
        fin = [p for p in ns["INPUTS"] if p.dtype in ta.FLOAT_DTYPES]
        ns["_FIN"] = fin
        ns["_H"] = ta.placeholder(out.shape, "float64", name="head")
        ns["_U"] = [ta.placeholder(p.shape, "float64", name=f"u_{p.name}") for p in fin]
        rng = np.random.default_rng(self.seed + 1)
        # a head of zero where the output is not finite (an empty max is -inf): finite
        # differences mean nothing there
        finite = self._finite = np.isfinite(self.ta.evaluate([out], feed)[0])
        feed[ns["_H"]] = np.where(finite, rng.uniform(-1, 1, out.shape), 0.0)
        for u in ns["_U"]:
            feed[u] = rng.uniform(-1, 1, u.shape)
        self._feed64 = feed
        return ns, feed

    def _gradient(self) -> list:
        """The (optimized) reverse gradient of the float64 program with the head ``_H``: made
        once, shared by the optimizer, reverse and jvp checks."""
        if not hasattr(self, "_grad_tensors"):
            ns, _ = self._grad_setup()
            self._grad_tensors = list(self.ta.JacobianRecursive(ns["OUT"], ns["_FIN"], ns["_H"],
                                                                override=self._override(ns)))
        return self._grad_tensors

    def _override(self, ns) -> dict | None:
        """On a third of the seeds, the derivative of one computed tensor of one direct input
        replaced by a hand-written rule (API.md 2, ``override``): that tensor's own reverse
        gradient for the head it is given -- the true derivative, so every oracle still holds;
        the rule also checks that it receives the program's own tensor objects."""
        from tensorad.ir.rewrite import op_reads, tensor_graph
        from tensorad.ir.tensor import ComputeOp

        if self.seed % 3 != 2:
            return None
        ta = self.ta
        on_path = set(tensor_graph([ns["OUT"]]))
        for t in ns["TENSORS"]:
            if (t in on_path and isinstance(t.op, ComputeOp) and t.op.num_outputs == 1
                    and t.dtype in ta.FLOAT_DTYPES and len(reads := op_reads(t.op)) == 1
                    and reads[0].dtype in ta.FLOAT_DTYPES):
                def rule(out, x, head, t=t, x0=reads[0]):
                    if out is not t or x is not x0:
                        raise Mismatch(f"override of {t.name}: called with other tensor objects "
                                       f"({out.name}, {x.name})")
                    return ta.JacobianRecursive(out, [x], head)[0]
                return {t: rule}
        return None

    def _gradient_values(self) -> tuple:
        """The gradient built with the drawn options and run on the feed (reverse and jvp
        compare the same kernel's values with their oracles: built once)."""
        if not hasattr(self, "_grad_values"):
            ns, feed = self._grad_setup()
            all_ins = ns["INPUTS"] + [ns["_H"]]
            self._grad_values = _tuple(self.build(self._gradient(), all_ins)(
                *[feed[p] for p in all_ins]))
        return self._grad_values

    def chain_rule_nans(self, values, tensors, feed) -> list:
        """``values`` (a kernel's arrays of the derivative ``tensors``) with each NaN that is
        IEEE's ``0 * inf`` in the chain rule replaced by the derivative's value with strong
        zeros.  Such a NaN comes from a zero adjoint (a losing side of a ``maximum``, a branch
        never taken, a sigmoid saturated at inf) times an infinite local derivative (a max or
        min over an empty box, ``log`` of it): PyTorch and JAX give the same
        NaN.  An element is replaced only where ``ta.evaluate`` of the same
        tensors, in IEEE arithmetic, is NaN too (so the kernel computed the program's meaning)
        and the strong-zero evaluation is finite; the oracle then judges that value, and the
        replaced elements are counted (``chain_nans``), never silent."""
        from tensorad.reference import evaluate_in_order

        values = [np.asarray(v) for v in values]
        if not any(np.isnan(v).any() for v in values):
            return values
        ieee = self.ta.evaluate(list(tensors), feed)
        strong = evaluate_in_order(list(tensors), feed, "numpy", strong_zero=True)
        out = []
        for v, i, s in zip(values, ieee, strong):
            swap = np.isnan(v) & np.isnan(i) & np.isfinite(s)
            self.chain_nans += int(np.count_nonzero(swap))
            out.append(np.where(swap, s, v))
        return out

    def _fd_ready(self) -> bool:
        """Derivatives are checked on safe programs with float inputs whose output is finite at
        the data (an empty max is -inf; a product with it is inf, and 0 * inf poisons a head)."""
        if not self.job.get("safe"):
            return False
        ns, feed = self._grad_setup()
        return bool(ns["_FIN"]) and bool(np.all(self._finite))

    def _derivative_case(self) -> GradCase | None:
        """What every derivative check starts from (None: the program is not checked by finite
        differences, :meth:`_fd_ready`)."""
        if not self._fd_ready():
            return None
        ns, feed = self._grad_setup()
        return GradCase(ns["OUT"], ns["_FIN"], ns["INPUTS"], ns["_H"], ns["_U"], feed)

    def reverse(self):
        if (g := self._derivative_case()) is None:
            return
        ta, feed, out, ins, H, all_ins = self.ta, g.feed, g.out, g.ins, g.head, g.all_ins
        grads = self.chain_rule_nans(self._gradient_values(), self._gradient(), feed)
        fwd = ta.build([out], all_ins, fastmath=False, parallel=False)
        h = feed[H]

        def run(f):
            return fwd(*[f[p] for p in all_ins])

        f0 = run(feed)

        def central(p, eps):
            """``h . (f(x + eps e_j) - f(x - eps e_j)) / 2 eps`` for every element ``j`` of ``p``:
            the outputs are subtracted element by element before the sum with ``h`` (a sum of
            huge constant outputs would swallow the difference); with the noise and
            the one-sided differences' gap (:func:`fd_kink`)."""
            fd, noise, skew = np.zeros(p.shape), np.zeros(p.shape), np.zeros(p.shape)
            base = feed[p]
            for j in np.ndindex(*p.shape):
                plus, minus = base.copy(), base.copy()
                plus[j] += eps
                minus[j] -= eps
                fp, fm = run({**feed, p: plus}), run({**feed, p: minus})
                with np.errstate(all="ignore"):
                    fd[j] = np.sum(np.where(h != 0, (fp - fm) * h, 0.0)) / (2 * eps)
                    noise[j] = np.sum(fd_noise(fp, h) + fd_noise(fm, h)) / (2 * eps)
                    skew[j] = abs(np.sum(np.where(h != 0, ((fp - f0) - (f0 - fm)) * h, 0.0))) / eps
            return fd, noise, skew

        for p, g in zip(ins, grads):
            self.undecided += compare_fd(f"reverse gradient wrt {p.name} vs finite differences", g,
                                         lambda eps, p=p: central(p, eps), 1e-6, rtol=1e-4)

    def torch(self):
        """A layer (:mod:`.layers`) against PyTorch: the forward kernel (the drawn dtype and
        options) against ``torch.nn.functional`` in float64, and the reverse gradient with a
        random head (the float64 program, the drawn options) against PyTorch's autograd."""
        source = self.job.get("torch")
        if not source:
            return
        import torch

        ref = load(source)["REF"]
        ns, feed = self._grad_setup()
        fin = set(ns["_FIN"])
        xs = {p: torch.tensor(feed[p], requires_grad=p in fin) for p in ns["INPUTS"]}
        y = ref(torch, torch.nn.functional, *[xs[p] for p in ns["INPUTS"]])
        want = y.detach().numpy()
        out = self.ns["OUT"]
        got = _tuple(self.build([out], self.inputs)(*self.args()))[0]
        compare(f"forward {out.name} vs PyTorch (float64)", got, want, self.dtype,
                rtol=None if self.options.get("fastmath", True) or self.dtype != "float32" else 1e-3)
        head = torch.tensor(feed[ns["_H"]])
        grads = torch.autograd.grad(y, [xs[p] for p in ns["_FIN"]], head, allow_unused=True)
        for p, g, w in zip(ns["_FIN"], self._gradient_values(), grads):
            w = np.zeros(p.shape) if w is None else w.numpy()
            compare(f"gradient wrt {p.name} vs PyTorch autograd (float64)", g, w, "float64", rtol=1e-7)

    def jvp(self):
        if (g := self._derivative_case()) is None:
            return
        ta, feed, out, ins, H, U, all_ins = self.ta, g.feed, g.out, g.ins, g.head, g.tangents, g.all_ins
        grads = self.chain_rule_nans(self._gradient_values(), self._gradient(), feed)
        tangent = ta.jvp(out, ins, U)
        jv = self.chain_rule_nans([self.build([tangent], all_ins + U)(
            *[feed[p] for p in all_ins + U])], [tangent], feed)[0]
        lhs = float(np.sum(jv * feed[H]))
        rhs = float(sum(np.sum(g * feed[u]) for g, u in zip(grads, U)))
        evaluated = functools.cache(lambda: ta.evaluate([tangent], feed)[0])  # (asked on a mismatch)

        def moved() -> tuple[float, float]:
            """Both sides at the inputs moved by a few ulps (asked on a mismatch)."""
            rng = np.random.default_rng(self.seed + 3)
            f = {p: feed[p] * (1 + 4 * np.finfo(np.float64).eps * rng.choice([-1.0, 1.0], np.shape(feed[p])))
                 if np.issubdtype(np.asarray(feed[p]).dtype, np.floating) else feed[p] for p in all_ins}
            f = {**feed, **f}
            jv_m = self.chain_rule_nans([self.build([tangent], all_ins + U)(*[f[p] for p in all_ins + U])],
                                        [tangent], f)[0]
            g_m = self.chain_rule_nans(_tuple(self.build(self._gradient(), all_ins + [H])(
                *[f[p] for p in all_ins + [H]])), self._gradient(), f)
            return float(np.sum(jv_m * f[H])), float(sum(np.sum(g * f[u]) for g, u in zip(g_m, U)))

        self._identity("h . jvp(u) vs u . reverse(h)", lhs, rhs, evaluated, feed[H], self._gradient(),
                       feed, U, moved=moved)
        if self.seed % 4 == 1:  # several heads at once (a head with a prefix), each against jvp
            H2 = ta.placeholder((2,) + out.shape, "float64", name="heads")
            rng = np.random.default_rng(self.seed + 2)
            h2 = np.stack([feed[H], np.where(self._finite, rng.uniform(-1, 1, out.shape), 0.0)])
            rev2 = list(ta.JacobianRecursive(out, ins, H2))
            feed2 = {**feed, H2: h2}
            g2 = self.chain_rule_nans(_tuple(self.build(rev2, all_ins + [H2])(
                *[feed[p] for p in all_ins], h2)), rev2, feed2)
            for k in range(2):
                rhs2 = float(sum(np.sum(g[k] * feed[u]) for g, u in zip(g2, U)))
                self._identity(f"h[{k}] . jvp(u) vs u . reverse(h)[{k}] (a head with a prefix)",
                               float(np.sum(jv * h2[k])), rhs2, evaluated, h2[k], rev2, feed2, U, k)

    def _identity(self, what: str, lhs: float, rhs: float, evaluated, h, rev, feed, U, k=None,
                  moved=None) -> None:
        """``h . J u`` (built jvp) against ``u . J^T h`` (built reverse), to ``1e-7``.  A program
        whose derivative rounding decides -- a layer norm over equal values, whose ``x - mean``
        is an ulp's residue times ``rstd = 1/sqrt(eps)`` (the reverse gradient from
        ``ta.evaluate`` and from the kernel 21 apart in 7,400) -- is allowed twice how far the
        same two sides move when ``ta.evaluate`` computes them instead (other summation
        orders), or, where ``moved`` gives them at the inputs moved by a few ulps, how far they move
        there (a formula that rounds otherwise: rounding, not the formula, decides such a derivative);
        a derivative that is wrong, not rounded, moves neither."""
        try:
            compare(what, np.array(lhs), np.array(rhs), "float64", rtol=1e-7)
            return
        except Mismatch:
            vals = _tuple(self.ta.evaluate(list(rev), feed))
            lhs_e = float(np.sum(evaluated() * h))
            rhs_e = float(sum(np.sum((g if k is None else g[k]) * feed[u]) for g, u in zip(vals, U)))
            noise = abs(lhs - lhs_e) + abs(rhs - rhs_e)
            if moved is not None:
                lhs_m, rhs_m = moved()
                noise = max(noise, abs(lhs - lhs_m) + abs(rhs - rhs_m))
            if not np.isfinite(noise):
                raise
        compare(what, np.array(lhs), np.array(rhs), "float64", rtol=1e-7, noise=np.array(2 * noise))

    def hvp(self):
        if (g := self._derivative_case()) is None:
            return
        ta, feed, out, ins, H, V, all_ins = self.ta, g.feed, g.out, g.ins, g.head, g.tangents, g.all_ins
        if out.ndim:
            ax = [ta.reduce_axis((0, n), name=f"l{d}") for d, n in enumerate(out.shape)]
            L = ta.compute((), lambda: ta.sum(out[tuple(ax)] * H[tuple(ax)], axis=ax), name="loss")
        else:
            L = ta.compute((), lambda: out[()] * H[()], name="loss")
        hvp = list(ta.hessian_vector_product(L, ins, V))
        hv = self.chain_rule_nans(_tuple(self.build(hvp, all_ins + [H] + V)(
            *[feed[p] for p in all_ins + [H] + V])), hvp, feed)
        gk = ta.build(ta.gradient(L, ins), all_ins + [H], fastmath=False)

        memo: dict = {}

        def grad_at(eps):
            if eps not in memo:
                f = dict(feed)
                for p, v in zip(ins, V):
                    f[p] = feed[p] + eps * feed[v]
                memo[eps] = _tuple(gk(*[f[p] for p in all_ins + [H]]))
            return memo[eps]

        def central(k, eps):
            gp, gm, g0 = grad_at(eps)[k], grad_at(-eps)[k], grad_at(0.0)[k]
            with np.errstate(all="ignore"):
                return ((gp - gm) / (2 * eps), (fd_noise(gp) + fd_noise(gm)) / (2 * eps),
                        np.abs((gp - g0) - (g0 - gm)) / eps)

        for k, (p, a) in enumerate(zip(ins, hv)):
            self.undecided += compare_fd(f"hvp wrt {p.name} vs finite differences of the gradient", a,
                                         lambda eps, k=k: central(k, eps), 1e-5, rtol=1e-4)

    def jacobian(self):
        """Full Jacobians (``ta.Jacobian``, ``ta.gradient`` without a head) against central
        differences of every output element; the forward kernel is strict (checked by
        ``forward``)."""
        if (g := self._derivative_case()) is None:
            return
        ta, feed, out, ins, all_ins = self.ta, g.feed, g.out, g.ins, g.all_ins
        ins = [p for p in ins if _prod(out.shape) * _prod(p.shape) <= JACOBIAN_MAX]
        if not ins:
            return
        optimize = self.seed % 2 == 0
        tensors = [ta.Jacobian(out, p, optimize=optimize) for p in ins] + list(ta.gradient(out, ins))
        got = self.chain_rule_nans(_tuple(self.build(tensors, all_ins)(
            *[feed[p] for p in all_ins])), tensors, feed)
        fwd = ta.build([out], all_ins, fastmath=False, parallel=False)

        f0 = fwd(*[feed[q] for q in all_ins])

        def central(p, eps):
            fd, noise = np.zeros(out.shape + p.shape), np.zeros(out.shape + p.shape)
            skew = np.zeros(out.shape + p.shape)
            for j in np.ndindex(*p.shape):
                plus, minus = feed[p].copy(), feed[p].copy()
                plus[j] += eps
                minus[j] -= eps
                fp = fwd(*[(plus if q is p else feed[q]) for q in all_ins])
                fm = fwd(*[(minus if q is p else feed[q]) for q in all_ins])
                at = (Ellipsis,) + j
                with np.errstate(all="ignore"):
                    fd[at] = (fp - fm) / (2 * eps)
                    noise[at] = (fd_noise(fp) + fd_noise(fm)) / (2 * eps)
                    skew[at] = np.abs((fp - f0) - (f0 - fm)) / eps
            return fd, noise, skew

        n = len(ins)
        for k, p in enumerate(ins):
            for what, value in ((f"Jacobian(optimize={optimize})", got[k]),
                                ("gradient without a head", got[n + k])):
                self.undecided += compare_fd(f"{what} wrt {p.name} vs finite differences", value,
                                             lambda eps, p=p: central(p, eps), 1e-6, rtol=1e-4)

    def split(self):
        """The backward built unlike the forward reads the forward's residuals (saved
        reductions, a max's winner and tie values): both sides must agree on what was saved."""
        if (g := self._derivative_case()) is None:
            return
        ta, feed, out, ins, H, all_ins = self.ta, g.feed, g.out, g.ins, g.head, g.all_ins
        policy = split_policy(self.seed)
        back = split_options(self.options, self.seed)
        fwd = ta.function(out, all_ins, wrt=ins, policy=policy, **self.options)
        bwd = ta.function(out, all_ins, wrt=ins, policy=policy, **back)
        y, res = fwd.forward(*[feed[p] for p in all_ins])
        self._compare_orders(f"forward with residuals ({policy}, {self.options})", [y], [out], feed)
        grads = _tuple(bwd.backward(res, feed[H]))
        # A layer (PyTorch its oracle, the ``torch`` check) is compared with its optimized
        # gradient: evaluating the unoptimized one sums over every input element per point --
        # 2e10 points for a 5x5 convolution's (17 GiB, or no answer in 600
        # s).  The residuals' agreement is what this check is about.
        plain = self.job.get("torch") is None
        what = (f"backward built with {back} on the residuals ({policy}) of a forward built with "
                f"{self.options}")
        self._compare_orders(what, grads, list(ta.JacobianRecursive(out, ins, H, optimize=not plain)),
                             feed, rtol=1e-6, strong_zero=True,
                             more_noise=lambda: self.recomputation_noise(bwd, res, feed[H]))

    def recomputation_noise(self, fn, residuals, head, ulps: int = 4, draws: int = 2) -> list:
        """Per gradient of ``fn`` (a ``ta.function``), how far its backward program, evaluated
        on the ``residuals`` a forward saved, moves when every float value it reads rounds on
        its own by up to ``ulps`` ulps (``evaluate_in_order(jitter=)``; the largest over
        ``draws`` draws and their mirrors), times ``ulps``.  A backward built unlike its
        forward recomputes from the saved values what the forward rounded one way -- a fast-math
        kernel contracts ``x - sum * (1/n)`` into a fused multiply-add where the strict forward
        rounded the product -- so a layer norm's centred row, exactly zero in the forward whose
        variance it made, is a rounding residue in the backward, divided by ``sqrt(eps)``
        (a gradient of 1e23 against 288, over a row of three equal values of
        1.7e16).  Asked only after a backward disagrees."""
        from tensorad.reference import evaluate_in_order

        given = dict(zip(fn.backward_inputs, [*residuals, head]))
        feed = {p: v for p, v in given.items() if p.is_placeholder}
        given = {p: v for p, v in given.items() if not p.is_placeholder}
        program = fn.backward_grads

        def run(jitter=None):
            return _tuple(evaluate_in_order(program, feed, "numpy", given=given, jitter=jitter))

        base = run()
        worst = [np.zeros(np.shape(b)) for b in base]
        for draw in range(draws):
            for sign in (1, -1):
                _widen(worst, run((self.seed * 31 + draw, sign * ulps)), base)
        return [ulps * w for w in worst]

    # ---- work -----------------------------------------------------------------------------
    def cheap_gradient(self):
        """:mod:`.cheap`'s invariant on ``OUT``'s gradient with respect to the float inputs,
        lowered with the default options for the drawn target (skylake-avx512 when none is
        drawn: the counts do not depend on the machine); layer programs are named
        ``layer-<seed>``, the others ``fuzz-<seed>``."""
        from .cheap import PINNED_TARGET, gradient_cost, violation

        ta, ns = self.ta, self.ns64
        out = ns["OUT"]
        fin = [p for p in ns["INPUTS"] if p.dtype in ta.FLOAT_DTYPES]
        if not fin or out.dtype not in ta.FLOAT_DTYPES:
            return
        cost = gradient_cost(out, fin, target=self.options.get("target", PINNED_TARGET))
        why = violation(f"{'layer' if self.job.get('torch') else 'fuzz'}-{self.seed}", cost)
        if why:
            raise Mismatch(why)

    def _compare_orders(self, what: str, got, tensors, feed, want=None, regrouped: bool = False,
                        more_noise=None, **kw) -> None:
        """``got`` against ``want``, the values of ``tensors`` (``evaluate``'s when not given),
        each element allowed its spread over summation orders (:meth:`order_spread`; with
        ``regrouped``, the optimizer's regrouped sums, and its zeros of either sign, too) once a
        first comparison fails: the optimizer regroups sums and a kernel orders them.
        ``more_noise``: a function giving, per tensor, more rounding allowance (asked only
        after the spread alone is not enough)."""
        want = _tuple(self.ta.evaluate(tensors, feed)) if want is None else want
        extra = more = None
        for k, (t, g, w) in enumerate(zip(tensors, got, want)):
            try:
                compare(f"{what} {t.name}", g, w, t.dtype, **kw)
            except Mismatch:
                if extra is None:
                    extra = self.order_spread(tensors, feed, want, regrouped=regrouped)
                try:
                    compare(f"{what} {t.name}", g, w, t.dtype, noise=extra[0][k],
                            alternatives=extra[1][k], **kw)
                except Mismatch:
                    if more_noise is None:
                        raise
                    more = more_noise() if more is None else more
                    compare(f"{what} {t.name}", g, w, t.dtype, noise=extra[0][k] + more[k],
                            alternatives=extra[1][k], **kw)


def _same(what: str, got, want) -> None:
    """Bit-identical values (NaN equal to NaN, bfloat16's too: NumPy's kind ``V``), else a
    :class:`Mismatch`."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or not np.array_equal(got, want, equal_nan=got.dtype.kind in "fcV"):
        raise Mismatch(f"{what}: values differ from the static program's")


def _widen(worst: list, moved, base) -> None:
    """``worst[k]``: the largest finite distance so far of each output's elements from ``base``."""
    for k, (m, b) in enumerate(zip(moved, base)):
        with np.errstate(all="ignore"):
            d = np.abs(np.asarray(m, np.float64) - np.asarray(b, np.float64))
        worst[k] = np.maximum(worst[k], np.where(np.isfinite(d), d, 0.0))


def _elementwise_reads(t) -> list:
    """The computed tensors ``t`` reads that hold no reduction (``InlineNonReductions``'s
    candidates)."""
    from tensorad.ir.expr import Op
    from tensorad.ir.rewrite import op_reads, walk
    from tensorad.ir.tensor import ComputeOp

    if not isinstance(t.op, ComputeOp):
        return []
    return [u for u in op_reads(t.op) if isinstance(u.op, ComputeOp) and u.op.num_outputs == 1
            and not any(n.op is Op.REDUCE for b in u.op.body for n in walk(b))]


def _casts_floats(t) -> bool:
    """Whether integer tensor ``t`` depends on a cast of a float to an integer (a step of data)."""
    from tensorad.ir.dtype import is_float, is_int
    from tensorad.ir.expr import Op
    from tensorad.ir.rewrite import tensor_graph, walk
    from tensorad.ir.tensor import ComputeOp

    if not is_int(t.dtype):
        return False
    return any(n.op is Op.CAST and is_int(n.dtype) and is_float(n.src[0].dtype)
               for u in tensor_graph([t]) if isinstance(u.op, ComputeOp)
               for b in u.op.body for n in walk(b))


def run_checks(job: dict) -> list[dict]:
    """Run ``job["checks"]`` on one program; one result per check (``ok``, ``fail`` with the
    message, or ``invalid`` when the program itself is rejected)."""
    import traceback

    try:
        case = Case(job)
    except Invalid as e:
        if _rejects_overflow(e):
            return [{"check": "define", "status": "ok"}]
        return [{"check": "define", "status": "invalid", "message": str(e)}]
    except Exception as e:  # data or setup: a failure of tensorad
        return [{"check": "define", "status": "fail", "message": _describe(e, traceback.format_exc())}]
    results = []
    for name in job["checks"]:
        try:
            case.undecided = case.chain_nans = 0
            with _quiet_llvm(name):
                getattr(case, name)()
            result = {"check": name, "status": "ok"}
            if case.undecided:
                result["undecided"] = case.undecided
            if case.chain_nans:
                result["chain_nans"] = case.chain_nans
            results.append(result)
        except Mismatch as e:
            results.append({"check": name, "status": "fail", "message": str(e), "hint": triage(job, name)})
        except Exception as e:
            if _rejects_overflow(e):
                results.append({"check": name, "status": "ok"})
                continue
            results.append({"check": name, "status": "fail", "message": _describe(e, traceback.format_exc()),
                            "hint": triage(job, name)})
    return results


LLVM_DIAGNOSTIC = re.compile(r"^(remark|warning|error): <unknown>|^LLVM ERROR", re.M)


@contextmanager
def _quiet_llvm(check: str):
    """Run a check with file descriptor 2 captured (LLVM writes there itself, below Python):
    a diagnostic of LLVM's -- "remark: ... loop not vectorized" -- on a user's stderr is a
    failure of the build (a build prints nothing).  What was written is passed on."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode(errors="replace")
    if text:
        sys.stderr.write(text)
    found = LLVM_DIAGNOSTIC.search(text)
    if found:
        line = text[found.start():].splitlines()[0]
        raise Mismatch(f"{check}: LLVM wrote to stderr: {line}")


def _rejects_overflow(e: Exception) -> bool:
    """Index arithmetic past int64/int32 may be rejected with a clear error, and
    so may a drawn register tile the target's vectors cannot hold (``NR`` not a multiple of
    the lanes: 8 is one AVX2 vector of float32, half an AVX-512 one)."""
    return isinstance(e, (ValueError, OverflowError, Invalid)) and (
        "overflow" in str(e).lower() or str(e).startswith("tile (MR, NR, KC, MC)"))


VARIANTS = (("num_threads", 1), ("fastmath", False), ("fuse", False), ("opt_level", 0),
            ("microkernel", False), ("parallel", False))


def triage(job: dict, name: str) -> str:
    """Which single option change makes a failing check pass (a hint at the culprit), and
    whether the program has a parallel loop with a step."""
    if job.get("triage") is False:
        return ""
    passing = []
    for key, value in VARIANTS:
        if job["options"].get(key, None) == value:
            continue
        variant = {**job, "options": {**job["options"], key: value}, "checks": [name], "triage": False}
        try:
            if run_checks(variant)[0]["status"] == "ok":
                passing.append(f"{key}={value}")
        except Exception:
            pass
    hint = "passes with " + ", ".join(passing) if passing else "fails with every single option change"
    try:
        import re

        import tensorad as ta
        case = Case({**job, "triage": False})
        text = str(ta.lower(case.outputs, case.inputs, **{k: v for k, v in case.options.items()
                                                          if k != "target"}))
        if re.search(r"parallel for \w+ in range\([^,]+, [^,]+, \d+\)", text):
            hint += "; has a parallel loop with a step"
        if re.search(r"for \w+o in range", text) and "%" in text:
            hint += "; merges output axes into one loop, with %"
    except Exception:
        pass
    return hint


def _describe(e: Exception, tb: str) -> str:
    frames = [ln for ln in tb.splitlines() if ln.startswith('  File "')]
    where = frames[-1].strip() if frames else ""
    return f"{type(e).__name__}: {str(e)[:400]} [{where}]"
