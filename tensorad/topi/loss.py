"""Losses over integer class labels: ``cross_entropy`` and ``nll_loss``.

The labelled logit is a gather, ``if_then_else(L[r] != ignore_index, X[r, L[r]], 0)``: one read per row,
and its gradient one store per row.  Labels equal to ``ignore_index`` contribute nothing and are left out
of the mean; any other label outside ``[0, C)`` raises ``IndexError`` when computed, as in PyTorch."""

from __future__ import annotations

from tensorad.ir import Expr, Tensor, const
from tensorad.ir import dtype as dt
from tensorad.ir import reducer as _reducer
from tensorad.lang import tensor_lang as lang

from ._util import check_tensor, is_int, new_compute, reduce_compute

Index = tuple[Expr, ...]
REDUCTIONS = ("mean", "sum", "none")


def _check(x: Tensor, labels: Tensor, reduction: str, ignore_index: int, op: str) -> None:
    check_tensor(x, op, "input")
    check_tensor(labels, op, "labels")
    if not dt.is_float(x.dtype):
        raise TypeError(f"{op}: input must be a float tensor, {x.name} is {x.dtype}")
    if not dt.is_int(labels.dtype):
        raise TypeError(f"{op}: labels must be an integer tensor (class indices), {labels.name} is "
                        f"{labels.dtype}")
    if x.ndim < 1 or labels.shape != x.shape[:-1]:
        raise ValueError(f"{op}: labels {labels.shape} must have the shape of input {x.shape} "
                         f"without its last (class) axis, {x.shape[:-1]}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"{op}: reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if not is_int(ignore_index):
        raise TypeError(f"{op}: ignore_index must be an int, got {ignore_index!r}")


def _picked(x: Tensor, labels: Tensor, ignore_index: int, name: str) -> Tensor:
    """``P[r] = X[r, L[r]]`` (a gather checked at run time), 0 where ``L[r]`` is ``ignore_index`` (lazily)."""

    def body(r: Index) -> Expr:
        zero = const(0.0, dt.compute_dtype(x.dtype))
        return lang.if_then_else(labels[r] != ignore_index, x[r + (labels[r],)], zero)

    return new_compute(labels.shape, body, f"{name}.picked", "loss_pick")


def _reduce(per: Tensor, labels: Tensor, reduction: str, ignore_index: int, name: str) -> Tensor:
    """``none``: the per-row losses; ``sum``: their sum; ``mean``: the sum over the count of
    rows whose label is not ``ignore_index`` (NaN when every row is ignored, as in PyTorch)."""
    if reduction == "none":
        return per
    rows = labels.shape

    def total(_: Index) -> Expr:
        rs = tuple(lang.reduce_axis((0, n), f"r{d}") for d, n in enumerate(rows))
        return _reducer.sum(per[rs], list(rs)) if rs else per[()]

    if reduction == "sum":
        return new_compute((), total, name, "loss_sum")
    s = new_compute((), total, f"{name}.sum", "loss_sum")

    def count(_: Index) -> Expr:
        rs = tuple(lang.reduce_axis((0, n), f"r{d}") for d, n in enumerate(rows))
        valid = lang.cast(dt.compute_dtype(per.dtype), labels[rs] != ignore_index)
        return _reducer.sum(valid, list(rs)) if rs else valid

    n = new_compute((), count, f"{name}.count", "loss_count")
    return new_compute((), lambda _: s[()] / n[()], name, "loss_mean")


def nll_loss(logp: Tensor, labels: Tensor, reduction: str = "mean", ignore_index: int = -100,
             name: str = "nll_loss") -> Tensor:
    """``-logp[r, L[r]]`` per row ``r`` (class axis last), reduced by ``reduction``."""
    _check(logp, labels, reduction, ignore_index, name)
    picked = _picked(logp, labels, ignore_index, name)
    zero = const(0.0, dt.compute_dtype(logp.dtype))
    per = new_compute(labels.shape, lambda r: lang.select(labels[r] != ignore_index, -picked[r], zero),
                      f"{name}.rows" if reduction != "none" else name, "loss_rows")
    return _reduce(per, labels, reduction, ignore_index, name)


def cross_entropy(logits: Tensor, labels: Tensor, reduction: str = "mean", ignore_index: int = -100,
                  name: str = "cross_entropy", label_smoothing: float = 0.0) -> Tensor:
    """``logsumexp(X[r, :]) - X[r, L[r]]`` per row ``r`` (class axis last: ``X [..., C]``,
    ``L [...]``), reduced by ``reduction`` (``"mean"`` over the rows not ignored, ``"sum"``,
    ``"none"``); ``torch.nn.functional.cross_entropy`` for 2-d logits.

    ``label_smoothing`` ``e`` in ``[0, 1]`` mixes the one-hot target with the uniform one, as
    PyTorch does: ``(1 - e) (lse - X[r, L]) + e/C sum_c (lse - X[r, c])``
    ``= lse - (1 - e) X[r, L] - (e/C) sum_c X[r, c]`` (one more row sum of the logits)."""
    _check(logits, labels, reduction, ignore_index, name)
    classes = logits.shape[-1]
    if classes == 0:
        raise ValueError(f"{name}: logits {logits.shape} have no classes")
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float)) \
            or not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"{name}: label_smoothing must be a number in [0, 1], got {label_smoothing!r}")
    eps = float(label_smoothing)

    def over_classes(reducer, term, suffix: str, tag: str) -> Tensor:
        return reduce_compute(labels.shape, classes, "c", reducer, term, f"{name}.{suffix}", tag)

    m = over_classes(_reducer.max, lambda r, c: logits[r + (c,)], "max", "softmax_max")
    s = over_classes(_reducer.sum, lambda r, c: lang.exp(logits[r + (c,)] - m[r]), "sumexp", "softmax_sum")
    picked = _picked(logits, labels, ignore_index, name)
    wide = dt.compute_dtype(logits.dtype)
    zero = const(0.0, wide)
    total = over_classes(_reducer.sum, lambda r, c: logits[r + (c,)], "rowsum", "loss_smooth") \
        if eps > 0.0 else None

    def row_loss(r: Index) -> Expr:
        loss = m[r] + lang.log(s[r])
        if total is None:
            loss = loss - picked[r]
        else:
            loss = loss - picked[r] * const(1.0 - eps, wide) - total[r] * const(eps / classes, wide)
        return lang.select(labels[r] != ignore_index, loss, zero)

    per = new_compute(labels.shape, row_loss, f"{name}.rows" if reduction != "none" else name,
                      "loss_rows")
    return _reduce(per, labels, reduction, ignore_index, name)
