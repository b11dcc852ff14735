"""``gradcheck``: reverse and forward mode against central finite differences, in float64.

The program is promoted to float64 (:mod:`retype`).  Every placeholder gets random data (``feed`` may fix
some), and so do a head ``H`` and tangents ``V``.  With ``J_m`` the output's Jacobian by input ``m`` from
central differences (element by element for small inputs, else along ``n_directions`` random directions
``U``): reverse mode must give ``H . J_m`` (along a direction, ``sum_m <grad_m, U_m> == <H, J U>``) and
forward mode ``sum_m J_m V_m``, each within ``atol + rtol * |numeric|``; entries whose finite difference
is not finite are skipped.  A failure raises :class:`GradcheckError` naming the worst mismatch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..ir import dtype as dt
from ..ir.rewrite import placeholders
from ..ir.tensor import Tensor
from ..lang import placeholder
from ..reference import evaluate
from .build import Optimizer
from .forward import jvp
from .retype import WIDE, promote_to_float64
from .reverse import jacobian_recursive


class GradcheckError(AssertionError):
    """An analytic derivative disagrees with finite differences."""


class _Worst:
    """The largest tolerance violation seen so far."""

    def __init__(self, atol: float, rtol: float) -> None:
        self.atol, self.rtol = atol, rtol
        self.excess, self.message, self.count = 0.0, "", 0

    def compare(self, what: str, analytic: np.ndarray, numeric: np.ndarray) -> None:
        analytic = np.broadcast_to(np.asarray(analytic, np.float64), np.shape(numeric))
        ok = np.isfinite(numeric)
        err = np.where(ok, np.abs(analytic - numeric) - (self.atol + self.rtol * np.abs(numeric)), -1)
        err = np.where(ok & ~np.isfinite(analytic), np.inf, err)
        bad = err > 0
        if not bad.any():
            return
        self.count += int(bad.sum())
        at = np.unravel_index(int(np.argmax(err)), err.shape) if err.ndim else ()
        if err[at] > self.excess:
            self.excess = float(err[at])
            self.message = (f"{what} at index {tuple(int(i) for i in at)}: analytic "
                            f"{float(analytic[at])!r}, numeric {float(numeric[at])!r}")


def gradcheck(output: Tensor, inputs: Sequence[Tensor] | Tensor, *, feed: Mapping | None = None,
              eps: float = 1e-6, atol: float = 1e-6, rtol: float = 1e-5, seed: int = 0,
              low: float = -1.0, high: float = 1.0, max_elements: int = 64, n_directions: int = 3,
              reverse: bool = True, forward: bool = True, optimizer: Optimizer | None = None,
              override: Mapping | None = None) -> bool:
    """Check ``output``'s derivatives by ``inputs``; ``True`` or raise.  ``feed`` fixes some placeholders
    (others: uniform in ``[low, high)``, integers in ``[-3, 3]``); ``optimizer`` is applied to the
    derivatives; ``override`` goes to reverse mode (on float64 copies)."""
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    for x in inputs:
        if not isinstance(x, Tensor) or not x.is_placeholder:
            raise ValueError(f"gradcheck: inputs must be placeholders, got {getattr(x, 'name', x)!r}")
        if not dt.is_float(x.dtype):
            raise TypeError(f"gradcheck: input {x.name!r} has dtype {x.dtype}; only "
                            "floating-point tensors are differentiable")
    if not dt.is_float(output.dtype):
        raise TypeError(f"gradcheck: output {output.name!r} has dtype {output.dtype}; only "
                        "floating-point tensors are differentiable")
    wide = promote_to_float64([output] + inputs)
    y = wide[output]
    xs = [wide[x] for x in inputs]
    rng = np.random.default_rng(seed)
    data: dict[Tensor, np.ndarray] = {}
    given = dict(feed or {})
    for orig in dict.fromkeys(placeholders([output]) + inputs):
        w = wide[orig]
        if orig in given:
            data[w] = np.asarray(given[orig], dtype=w.dtype)
        elif dt.is_float(w.dtype):
            data[w] = rng.uniform(low, high, size=w.shape)
        else:
            data[w] = rng.integers(-3, 4, size=w.shape).astype(w.dtype)

    def f(values: Sequence[np.ndarray]) -> np.ndarray:
        return np.asarray(evaluate(y, {**data, **dict(zip(xs, values))}), np.float64)

    base = [data[x] for x in xs]
    head = placeholder(y.shape, WIDE, "gradcheck.head")
    vecs = [placeholder(x.shape, WIDE, f"gradcheck.v{m}") for m, x in enumerate(xs)]
    h_val = rng.uniform(-1.0, 1.0, size=y.shape)
    v_val = [rng.uniform(-1.0, 1.0, size=x.shape) for x in xs]
    env = {**data, head: h_val, **dict(zip(vecs, v_val))}
    worst = _Worst(atol, rtol)
    grads = jvp_val = None
    if reverse:
        over = {wide[t]: fn for t, fn in (override or {}).items() if t in wide}
        g = jacobian_recursive(y, xs, head=head, override=over, optimizer=optimizer)
        grads = [np.asarray(a, np.float64) for a in evaluate(g, env)]
    if forward:
        jvp_val = np.asarray(evaluate(jvp(y, xs, vecs, optimizer=optimizer), env), np.float64)

    @np.errstate(invalid="ignore", over="ignore")
    def directional(direction: Sequence[np.ndarray]) -> np.ndarray:
        plus = f([b + eps * u for b, u in zip(base, direction)])
        minus = f([b - eps * u for b, u in zip(base, direction)])
        return (plus - minus) / (2 * eps)

    if sum(int(np.prod(x.shape)) for x in xs) <= max_elements:
        jv = np.zeros(y.shape)
        for m, x in enumerate(xs):
            num = np.zeros(x.shape)
            for j in np.ndindex(*x.shape):
                unit = [np.zeros(z.shape) for z in xs]
                unit[m][j] = 1.0
                d = directional(unit)
                num[j] = np.sum(h_val * d)
                jv = jv + d * v_val[m][j]
            if grads is not None:
                worst.compare(f"reverse-mode gradient by {inputs[m].name!r}", grads[m], num)
        if jvp_val is not None:
            worst.compare("forward-mode jvp", jvp_val, jv)
    else:
        if jvp_val is not None:
            worst.compare("forward-mode jvp", jvp_val, directional(v_val))
        for r in range(n_directions if grads is not None else 0):
            u = [rng.uniform(-1.0, 1.0, size=x.shape) for x in xs]
            num = np.sum(h_val * directional(u))
            ana = sum(float(np.sum(g_m * u_m)) for g_m, u_m in zip(grads, u))
            worst.compare(f"reverse-mode gradient along random direction {r}", np.asarray(ana),
                          np.asarray(num))
    if worst.count:
        raise GradcheckError(f"gradcheck of {output.name!r}: {worst.count} mismatch(es); worst: "
                             f"{worst.message} (atol={atol}, rtol={rtol})")
    return True
