"""Scaled dot-product attention as five computes (scores, row max, exponentials, row sum, weighted
values): an ordinary softmax of a matrix product to autodiff.  With ``causal=True`` the mask ``s <= l``
(PyTorch's ``is_causal``) is a ``where`` of every reduction over keys and an ``if_then_else`` on the
exponentials, which the optimizer turns into triangular loop bounds."""

from __future__ import annotations

import math

from tensorad.ir import Expr, Tensor, cast, const
from tensorad.ir import dtype as dt
from tensorad.ir import reducer as _reducer
from tensorad.lang import tensor_lang as lang

from ._util import check_tensor, new_compute, reduce_compute

Index = tuple[Expr, ...]


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = False,
                                 scale: float | None = None,
                                 name: str = "attention") -> Tensor:
    """``softmax(Q K^T * scale [+ causal mask]) V`` for ``Q [..., L, D]``, ``K [..., S, D]``,
    ``V [..., S, Dv]`` (the same leading axes); ``scale`` defaults to ``1 / sqrt(D)``."""
    for t, what in ((q, "Q"), (k, "K"), (v, "V")):
        check_tensor(t, name, what)
        if t.ndim < 2:
            raise ValueError(f"{name}: {what} must have at least 2 axes [..., seq, dim], got {t.shape}")
        if not dt.is_float(t.dtype):
            raise TypeError(f"{name}: {what} must be a float tensor, {t.name} is {t.dtype}")
    lead = q.shape[:-2]
    if k.shape[:-2] != lead or v.shape[:-2] != lead:
        raise ValueError(f"{name}: Q {q.shape}, K {k.shape} and V {v.shape} must share their "
                         f"leading axes")
    (length, d), (keys, dk), (kv, dv) = q.shape[-2:], k.shape[-2:], v.shape[-2:]
    if dk != d:
        raise ValueError(f"{name}: Q {q.shape} and K {k.shape} differ in their last axis")
    if kv != keys:
        raise ValueError(f"{name}: K {k.shape} and V {v.shape} differ in their sequence axis")
    dtype = dt.compute_dtype(q.dtype)
    if scale is None:  # (over a size: in float64, as the static factor is)
        scale = cast(dtype, const(1.0, "float64") / lang.sqrt(cast("float64", d))) if isinstance(d, Expr) \
            else 1.0 / math.sqrt(d)
    b = len(lead)

    def mask(l_: Expr, s: Expr) -> Expr | None:
        return (s <= l_) if causal else None

    def scores_body(ax: Index) -> Expr:
        r = lang.reduce_axis((0, d), "d")
        lead_ax, l_, s = ax[:b], ax[b], ax[b + 1]
        dot = _reducer.sum(q[lead_ax + (l_, r)] * k[lead_ax + (s, r)], r, where=mask(l_, s))
        return dot * (scale if isinstance(scale, Expr) else const(scale, dtype))

    scores = new_compute(lead + (length, keys), scores_body, f"{name}.scores", "attention_scores")

    def row_mask(ax: Index, s: Expr) -> Expr | None:
        return mask(ax[b], s)

    m = reduce_compute(lead + (length,), keys, "s", _reducer.max, lambda ax, s: scores[ax + (s,)],
                       f"{name}.max", "softmax_max", row_mask)

    def exps(ax: Index) -> Expr:
        e = lang.exp(scores[ax] - m[ax[:-1]])
        return lang.if_then_else(mask(ax[b], ax[b + 1]), e, const(0.0, dtype)) if causal else e

    e = new_compute(scores.shape, exps, f"{name}.exp", "softmax_exp")

    den = reduce_compute(m.shape, keys, "s", _reducer.sum, lambda ax, s: e[ax + (s,)], f"{name}.sum",
                         "softmax_sum", row_mask)
    p = new_compute(scores.shape, lambda ax: e[ax] / den[ax[:-1]], f"{name}.weights", "softmax_output")
    return reduce_compute(lead + (length, dv), keys, "s", _reducer.sum,
                          lambda ax, s: p[ax[:-1] + (s,)] * v[ax[:b] + (s, ax[-1])], name, "attention",
                          row_mask)
