"""Statistics and normalization layers: ``mean``, ``var``, ``layer_norm``, ``batch_norm``,
``group_norm``, ``instance_norm``, ``rms_norm``.

Every normalization is :func:`_normalize`: per statistics group ``s`` of ``M`` elements,
``mean[s]``, ``var[s]`` (two passes: no cancellation), ``rstd[s] = 1 / sqrt(var[s] + eps)`` and
``Y[i] = (X[i] - mean[s(i)]) * rstd[s(i)] * gamma[c(i)] + beta[c(i)]``.  The groups: the trailing
``gamma.ndim`` axes (layer norm), every axis but the channel (batch norm), ``C/G`` channels and the spatial
axes (group norm; instance norm: one channel a group).  RMS norm has no mean.  Every piece is an ordinary
compute, differentiated like a user's program."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import Any

from tensorad.ir import Expr, Tensor, cast, const
from tensorad.ir import dtype as dt
from tensorad.ir import reducer as _reducer
from tensorad.lang import tensor_lang as lang

from ._util import check_float, check_tensor, input_index, is_int, new_compute, normalize_axes, normalize_axis
from .reduction import sum as _sum

Index = tuple[Expr, ...]


def _scaled_by(count: Expr, dtype: str) -> Expr:
    """``1 / count`` for a count in sizes, computed in float64 as a static factor is (``inf`` over no
    element)."""
    return cast(dtype, const(1.0, "float64") / cast("float64", count))


def _scaled(t: Tensor, factor: float | Expr, name: str) -> Tensor:
    """``t * factor``; a factor in sizes is ``1 / count`` (:func:`_scaled_by`: the mean over no element is
    NaN as ``0 / 0``)."""
    cd = dt.compute_dtype(t.dtype)
    k = _scaled_by(factor, cd) if isinstance(factor, Expr) else const(factor, cd)
    return new_compute(t.shape, lambda ax: t[ax] * k, name, "elemwise")


def mean(x: Tensor, axis: Any = None, keepdims: bool = False, name: str = "mean") -> Tensor:
    """The mean of ``X`` over ``axis`` (an int, a sequence of ints, or ``None`` for all).  Over no element
    it is NaN, as NumPy's and PyTorch's (``0 / 0``; ``X`` is empty then, and so is its gradient)."""
    check_float(x, name)
    axes = normalize_axes(axis, x.ndim, name)
    count = prod(x.shape[d] for d in axes)
    factor = count if isinstance(count, Expr) else 1.0 / count if count else float("nan")
    return _scaled(_sum(x, axes, keepdims, f"{name}.sum"), factor, name)


def var(x: Tensor, axis: Any = None, keepdims: bool = False, ddof: int = 0,
        name: str = "var") -> Tensor:
    """The variance of ``X`` over ``axis``: ``sum((X - mean)^2) / (M - ddof)`` (NumPy's ``ddof``;
    ``ddof=1`` is PyTorch's default).  With ``M <= ddof`` the sum is divided by zero, as in NumPy, PyTorch."""
    check_float(x, name)
    if not is_int(ddof) or ddof < 0:
        raise ValueError(f"{name}: ddof must be a non-negative int, got {ddof!r}")
    axes = normalize_axes(axis, x.ndim, name)
    count = prod(x.shape[d] for d in axes)
    m = mean(x, axes, True, f"{name}.mean")
    out_shape = tuple(1 if d in axes else n for d, n in enumerate(x.shape) if keepdims or d not in axes)
    inv = _scaled_by(lang.maximum(count - ddof, 0), dt.compute_dtype(x.dtype)) if isinstance(count, Expr) \
        else const(1.0 / (count - ddof) if count > ddof else float("inf"), dt.compute_dtype(x.dtype))

    def body(out: Index) -> Expr:
        ks = [lang.reduce_axis((0, x.shape[d]), f"k{d}") for d in axes]
        idx = input_index(out, ks, axes, x.ndim, keepdims)
        centered = x[tuple(idx)] - m[tuple(0 if d in axes else i for d, i in enumerate(idx))]
        red = [i for d, i in enumerate(idx) if d in axes]
        return _reducer.sum(centered * centered, red) * inv

    return new_compute(out_shape, body, name, "var")


def _moments(x: Tensor, stat_shape: Sequence[int], extents: Sequence[int],
             read: Callable[[Index, Index], Index], eps: float, name: str) -> tuple[Tensor, Tensor]:
    """``mean`` and ``rstd = 1/sqrt(var + eps)`` over the groups ``read(s, k)`` for ``k`` in
    ``extents`` (population variance, computed around the mean)."""
    m, v = _mean_and_var(x, stat_shape, extents, read, name)
    return m, _rstd(v, stat_shape, eps, dt.compute_dtype(x.dtype), name)


def _rstd(v: Tensor, shape: Sequence[int], eps: float, wide: str, name: str) -> Tensor:
    """``1 / sqrt(v + eps)`` in ``wide``, named ``<name>.rstd``."""
    return new_compute(shape, lambda s: const(1.0, wide) / lang.sqrt(v[s] + const(eps, wide)),
                       f"{name}.rstd", "norm_rstd")


def _mean_and_var(x: Tensor, stat_shape: Sequence[int], extents: Sequence[int],
                  read: Callable[[Index, Index], Index], name: str) -> tuple[Tensor, Tensor]:
    """``mean`` and the population variance over the groups ``read(s, k)`` (see :func:`_moments`)."""
    count = prod(extents)
    # no element in a group: then no output element either, so any scale serves
    inv = _scaled_by(count, dt.compute_dtype(x.dtype)) if isinstance(count, Expr) else \
        const(1.0 / max(count, 1), dt.compute_dtype(x.dtype))

    def axes_k() -> Index:
        return tuple(lang.reduce_axis((0, e), f"k{d}") for d, e in enumerate(extents))

    def mean_body(s: Index) -> Expr:
        ks = axes_k()
        return _reducer.sum(x[read(s, ks)], list(ks)) * inv

    m = new_compute(stat_shape, mean_body, f"{name}.mean", "norm_mean")

    def var_body(s: Index) -> Expr:
        ks = axes_k()
        centered = x[read(s, ks)] - m[s]
        return _reducer.sum(centered * centered, list(ks)) * inv

    return m, new_compute(stat_shape, var_body, f"{name}.var", "norm_var")


def _affine_param(p: Tensor | None, shape: tuple[int, ...], op: str, what: str) -> Tensor | None:
    if p is None:
        return None
    check_tensor(p, op, what)
    if p.shape != shape:
        raise ValueError(f"{op}: {what} must have shape {shape}, got {p.shape}")
    return p


def _normalize(x: Tensor, m: Tensor, rstd: Tensor, stat: Callable[[Index], Index],
               param: Callable[[Index], Index], gamma: Tensor | None, beta: Tensor | None,
               name: str, tag: str) -> Tensor:
    def body(ax: Index) -> Expr:
        s = stat(ax)
        y = (x[ax] - m[s]) * rstd[s]
        if gamma is not None:
            y = y * gamma[param(ax)]
        if beta is not None:
            y = y + beta[param(ax)]
        return y

    return new_compute(x.shape, body, name, tag)


def _check_eps(eps: Any, op: str) -> float:
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps >= 0:
        raise ValueError(f"{op}: eps must be a non-negative number, got {eps!r}")
    return float(eps)


def _split_trailing(x: Tensor, gamma: Any, ndim: int | None, name: str) -> tuple[tuple, tuple]:
    """X's leading axes and the trailing ``ndim`` it normalizes (default: ``gamma.ndim``, or 1)."""
    nd = ndim if ndim is not None else gamma.ndim if isinstance(gamma, Tensor) else 1
    if not is_int(nd) or not 1 <= nd <= x.ndim:
        raise ValueError(f"{name}: cannot normalize the last {nd!r} axes of X {x.shape}")
    return x.shape[:-nd], x.shape[-nd:]


def layer_norm(x: Tensor, gamma: Tensor | None = None, beta: Tensor | None = None,
               eps: float = 1e-5, ndim: int | None = None, name: str = "layer_norm") -> Tensor:
    """Layer normalization over the trailing ``ndim`` axes (default: ``gamma.ndim``, or the
    last axis without gamma).

    ``Y = (X - mean) / sqrt(var + eps) * gamma + beta`` with mean and (biased) variance over
    the normalized axes, as ``torch.nn.functional.layer_norm(X, gamma.shape, gamma, beta, eps)``."""
    check_float(x, name)
    eps = _check_eps(eps, name)
    lead, norm = _split_trailing(x, gamma, ndim, name)
    gamma = _affine_param(gamma, norm, name, "gamma")
    beta = _affine_param(beta, norm, name, "beta")
    k = len(lead)
    m, rstd = _moments(x, lead, norm, lambda s, ks: s + ks, eps, name)
    return _normalize(x, m, rstd, lambda ax: ax[:k], lambda ax: ax[k:], gamma, beta, name,
                      "layer_norm")


def batch_norm(x: Tensor, gamma: Tensor | None = None, beta: Tensor | None = None,
               running_mean: Tensor | None = None, running_var: Tensor | None = None,
               training: bool | None = None, axis: int = 1, eps: float = 1e-5,
               name: str = "batch_norm") -> Tensor:
    """Batch normalization of the channel ``axis`` (1: NCHW, NCL, NC).

    Training (the default when no running statistics are given): mean and biased variance over
    every axis but ``axis``.  Inference (``training=False``): the given ``running_mean`` and
    ``running_var`` (tensors of shape ``[C]``).  ``gamma``/``beta`` have shape ``[C]``."""
    check_float(x, name)
    eps = _check_eps(eps, name)
    axis = normalize_axis(axis, x.ndim, name)
    c = x.shape[axis]
    gamma = _affine_param(gamma, (c,), name, "gamma")
    beta = _affine_param(beta, (c,), name, "beta")
    if training is None:
        training = running_mean is None and running_var is None
    if training:
        if x.ndim < 2:
            raise ValueError(f"{name}: training statistics need at least 2 axes, X is {x.shape}")
        extents = x.shape[:axis] + x.shape[axis + 1:]
        m, rstd = _moments(x, (c,), extents, lambda s, ks: ks[:axis] + s + ks[axis:], eps, name)
    else:
        if running_mean is None or running_var is None:
            raise ValueError(f"{name}: inference (training=False) needs running_mean and "
                             f"running_var")
        m = _affine_param(running_mean, (c,), name, "running_mean")
        rv = _affine_param(running_var, (c,), name, "running_var")
        rstd = _rstd(rv, (c,), eps, dt.compute_dtype(x.dtype), name)
    chan = (lambda ax: (ax[axis],))
    return _normalize(x, m, rstd, chan, chan, gamma, beta, name, "batch_norm")


def batch_norm_stats(x: Tensor, running_mean: Tensor, running_var: Tensor, momentum: float = 0.1,
                     axis: int = 1, name: str = "batch_norm") -> tuple[Tensor, Tensor]:
    """The running statistics a training step of :func:`batch_norm` leaves, as PyTorch updates them:
    ``(1 - momentum) * running + momentum * batch`` (unbiased batch variance): ``(new_mean, new_var)``."""
    check_float(x, name)
    axis = normalize_axis(axis, x.ndim, name)
    c = x.shape[axis]
    rm = _affine_param(running_mean, (c,), name, "running_mean")
    rv = _affine_param(running_var, (c,), name, "running_var")
    if isinstance(momentum, bool) or not isinstance(momentum, (int, float)) or not 0 <= momentum <= 1:
        raise ValueError(f"{name}: momentum must be a number in [0, 1], got {momentum!r}")
    extents = x.shape[:axis] + x.shape[axis + 1:]
    count = prod(extents)
    if count < 2:
        raise ValueError(f"{name}: an unbiased variance needs at least 2 values a channel, X is {x.shape}")
    m, v = _mean_and_var(x, (c,), extents, lambda s, ks: ks[:axis] + s + ks[axis:], name)
    wide = dt.compute_dtype(x.dtype)
    keep, take = const(1.0 - momentum, wide), const(float(momentum), wide)
    unbiased = const(count / (count - 1), wide)
    new_mean = new_compute((c,), lambda s: keep * rm[s] + take * m[s], f"{name}.running_mean", "norm_stats")
    new_var = new_compute((c,), lambda s: keep * rv[s] + take * (v[s] * unbiased), f"{name}.running_var",
                          "norm_stats")
    return new_mean, new_var


def group_norm(x: Tensor, num_groups: int, gamma: Tensor | None = None, beta: Tensor | None = None,
               eps: float = 1e-5, name: str = "group_norm") -> Tensor:
    """Group normalization of ``X [N, C, *spatial]``: channels split into ``num_groups`` groups
    of ``C / num_groups``; statistics per ``(n, group)`` over the group's channels and every
    spatial position; ``gamma``/``beta`` per channel ``[C]`` (``torch``'s ``group_norm``)."""
    check_float(x, name)
    eps = _check_eps(eps, name)
    if x.ndim < 2:
        raise ValueError(f"{name}: X must be [N, C, ...], got shape {x.shape}")
    n, c = x.shape[:2]
    if not is_int(num_groups) or num_groups < 1 or c % num_groups:
        raise ValueError(f"{name}: num_groups must be a positive divisor of the {c} channels, "
                         f"got {num_groups!r}")
    cg = c // num_groups
    gamma = _affine_param(gamma, (c,), name, "gamma")
    beta = _affine_param(beta, (c,), name, "beta")
    extents = (cg,) + x.shape[2:]

    def read(s: Index, ks: Index) -> Index:
        return (s[0], s[1] * cg + ks[0]) + ks[1:]

    m, rstd = _moments(x, (n, num_groups), extents, read, eps, name)
    return _normalize(x, m, rstd, lambda ax: (ax[0], ax[1] // cg),
                      lambda ax: (ax[1],), gamma, beta, name, "group_norm")


def instance_norm(x: Tensor, gamma: Tensor | None = None, beta: Tensor | None = None,
                  eps: float = 1e-5, name: str = "instance_norm") -> Tensor:
    """Instance normalization of ``X [N, C, *spatial]``: statistics per ``(n, c)`` over the
    spatial axes, ``gamma``/``beta`` per channel ``[C]`` (``torch.nn.functional.instance_norm``
    with ``use_input_stats=True``): group norm with one channel per group."""
    check_float(x, name)
    if x.ndim < 3:
        raise ValueError(f"{name}: X must be [N, C, spatial...], got shape {x.shape}")
    return group_norm(x, x.shape[1], gamma, beta, eps, name)


def rms_norm(x: Tensor, gamma: Tensor | None = None, eps: float | None = None,
             ndim: int | None = None, name: str = "rms_norm") -> Tensor:
    """RMS normalization over the trailing ``ndim`` axes (default: ``gamma.ndim``, or the last axis):
    ``Y = X * rsqrt(mean(X^2) + eps) * gamma``, as ``torch.nn.functional.rms_norm``; ``eps=None`` is the
    machine epsilon of X's compute dtype."""
    check_float(x, name)
    wide = dt.compute_dtype(x.dtype)
    if eps is None:
        eps = 2.0 ** -23 if wide == "float32" else 2.0 ** -52
    eps = _check_eps(eps, name)
    lead, norm = _split_trailing(x, gamma, ndim, name)
    gamma = _affine_param(gamma, norm, name, "gamma")
    k = len(lead)
    count = prod(norm)  # (no element: no output either, as above)
    inv = _scaled_by(count, wide) if isinstance(count, Expr) else const(1.0 / max(count, 1), wide)

    def ms_body(s: Index) -> Expr:
        ks = tuple(lang.reduce_axis((0, e), f"k{d}") for d, e in enumerate(norm))
        v = x[s + ks]
        return _reducer.sum(v * v, list(ks)) * inv

    rstd = _rstd(new_compute(lead, ms_body, f"{name}.ms", "norm_var"), lead, eps, wide, name)

    def body(ax: Index) -> Expr:
        y = x[ax] * rstd[ax[:k]]
        return y * gamma[ax[k:]] if gamma is not None else y

    return new_compute(x.shape, body, name, "rms_norm")
