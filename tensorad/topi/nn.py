"""Neural-network operators: dense, conv2d, pooling, softmax, flatten, relu, pad.

Layouts are NCHW for activations and OIHW for convolution weights.  Padding is a tensor of its
own (``pad``: an ``if_then_else`` that reads the input only inside it), so a convolution or a
pool reads a padded tensor everywhere in bounds and their reductions stay condition-free --
except max pooling, which reads its ``-inf`` padding under the window's own ``if_then_else``: its
gradient then scatters straight into ``X`` at offsets its forward saved."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tensorad.ir import Expr, Tensor, const
from tensorad.ir import dtype as dt
from tensorad.ir import reducer as _reducer
from tensorad.lang import tensor_lang as lang

from ._util import (
    as_tuple,
    check_float,
    check_ndim,
    check_tensor,
    is_int,
    new_compute,
    normalize_axis,
    reduce_compute,
    scale,
)
from .attention import scaled_dot_product_attention
from .gather import embedding, embedding_bag
from .loss import cross_entropy, nll_loss
from .math import elemwise, erf
from .norm import batch_norm, batch_norm_stats, group_norm, instance_norm, layer_norm, rms_norm
from .spatial import conv2d_transpose, upsampling
from .transform import reshape

__all__ = ["dense", "conv2d", "conv2d_transpose", "pool", "upsampling", "pad", "softmax",
           "log_softmax", "flatten", "relu", "gelu", "silu", "erf", "layer_norm", "batch_norm",
           "batch_norm_stats", "group_norm", "instance_norm", "rms_norm", "scaled_dot_product_attention",
           "cross_entropy", "nll_loss", "embedding", "embedding_bag"]


def dense(x: Tensor, w: Tensor, b: Tensor | None = None, name: str = "dense") -> Tensor:
    """``Y[i, j] = sum_k X[i, k] * W[j, k] (+ B[j])`` for ``X [batch, in]``, ``W [out, in]``;
    ``X`` may have any leading axes, as PyTorch's ``linear``: ``Y[..., j] = sum_k X[..., k]
    W[j, k] (+ B[j])`` for ``X [..., in]``.

    With a bias the product is a tensor of its own (``dense.red``) and ``dense`` adds ``B``."""
    check_tensor(x, name, "X")
    check_tensor(w, name, "W")
    if len(x.shape) < 2:
        raise ValueError(f"{name}: X must have at least 2 dimensions [..., in], got shape {x.shape}")
    check_ndim(w, name, 2, "[out, in]")
    if x.shape[-1] != w.shape[1]:
        raise ValueError(f"{name}: X {x.shape} has {x.shape[-1]} input features but W {w.shape} "
                         f"expects {w.shape[1]} (W is [out, in])")
    if b is not None:
        check_tensor(b, name, "B")
        if b.shape != (w.shape[0],):
            raise ValueError(f"{name}: bias B must have shape ({w.shape[0]},), got {b.shape}")
    k = lang.reduce_axis((0, x.shape[-1]), "k")
    if len(x.shape) > 2:  # leading axes: one output row per point of them
        def rows(axes: tuple[Expr, ...]) -> Expr:
            y = _reducer.sum(x[(*axes[:-1], k)] * w[axes[-1], k], k)
            return y if b is None else y + b[axes[-1]]

        names = [f"i{d}" for d in range(len(x.shape) - 1)] + ["j"]
        return new_compute((*x.shape[:-1], w.shape[0]), rows, name, "dense", names)

    def body(i: Expr, j: Expr) -> Expr:
        y = _reducer.sum(x[i, k] * w[j, k], k)
        return y if b is None else y + b[j]  # the language lifts the sum into `dense.red`

    return lang.compute((x.shape[0], w.shape[0]), body, name=name, tag="dense")


def _padding4(padding: Any, op: str) -> tuple[int, int, int, int]:
    """An int, a pair ``(h, w)`` or ``[top, left, bottom, right]`` as a 4-tuple."""
    if is_int(padding):
        padding = (padding,) * 4
    elif isinstance(padding, (tuple, list)) and len(padding) == 2:
        padding = tuple(padding) * 2
    return as_tuple(padding, 4, op, "padding ([top, left, bottom, right])")


def pad(x: Tensor, pad_before: Sequence[int] | int, pad_after: Sequence[int] | int | None = None,
        pad_value: float = 0.0, name: str = "pad") -> Tensor:
    """``X`` with ``pad_before[d]`` elements of ``pad_value`` before axis ``d``, ``pad_after[d]`` after.

    ``Y[i] = if_then_else(pad_before <= i < pad_before + n, X[i - pad_before], pad_value)``,
    testing only the sides that have padding."""
    check_tensor(x, name)
    before = as_tuple(pad_before, x.ndim, name, "pad_before")
    after = before if pad_after is None else as_tuple(pad_after, x.ndim, name, "pad_after")
    value = const(pad_value, dt.compute_dtype(x.dtype))
    shape = tuple(s + p + q if p or q else s for s, p, q in zip(x.shape, before, after))

    def body(ax: tuple[Expr, ...]) -> Expr:
        cond = None
        for a, s, p, q in zip(ax, x.shape, before, after):
            for c in ([a >= p] if p else []) + ([a < p + s] if q else []):
                cond = c if cond is None else cond & c
        inner = x[tuple(a - p if p else a for a, p in zip(ax, before))]
        return inner if cond is None else lang.if_then_else(cond, inner, value)

    return new_compute(shape, body, name, "injective")


def _out_size(size: int, lo: int, hi: int, window: int, stride: int, op: str, what: str) -> int:
    if size + lo + hi < window:
        raise ValueError(f"{op}: the {what} window of extent {window} is larger than the padded "
                         f"input ({size} + {lo} + {hi})")
    return (size + lo + hi - window) // stride + 1


def conv2d(x: Tensor, w: Tensor, strides: Any = 1, padding: Any = 0, dilation: Any = 1,
           groups: int = 1, name: str = "conv2d") -> Tensor:
    """2-d convolution (cross-correlation), ``X [N, C, H, W]`` with ``W [F, C/groups, KH, KW]``.

    ``Y[n, f, y, x] = sum_{c, ry, rx} Xp[n, g(f) + c, y*sh + ry*dh, x*sw + rx*dw] * W[f, c, ry, rx]`` where
    ``Xp`` is ``X`` zero-padded and ``g(f) = (f // (F/groups)) * (C/groups)`` is the first input channel of
    ``f``'s group (0 without groups; ``groups=C`` is a depthwise convolution); strides and dilation are an int
    or a pair, padding an int, a pair ``(h, w)`` (both sides) or ``[top, left, bottom, right]``."""
    check_tensor(x, name, "X")
    check_tensor(w, name, "W")
    check_ndim(x, name, 4, "NCHW")
    check_ndim(w, name, 4, "OIHW")
    if not is_int(groups) or groups < 1:
        raise ValueError(f"{name}: groups must be a positive int, got {groups!r}")
    if x.shape[1] % groups or w.shape[0] % groups:
        raise ValueError(f"{name}: groups={groups} must divide the {x.shape[1]} input channels "
                         f"and the {w.shape[0]} output channels")
    if x.shape[1] != w.shape[1] * groups:
        raise ValueError(f"{name}: X {x.shape} has {x.shape[1]} channels but W {w.shape} "
                         f"expects {w.shape[1] * groups} (W is [out, in/groups, kh, kw], "
                         f"groups={groups})")
    sh, sw = as_tuple(strides, 2, name, "strides", minimum=1)
    dh, dw = as_tuple(dilation, 2, name, "dilation", minimum=1)
    top, left, bottom, right = _padding4(padding, name)
    n, c, h, wd = x.shape
    f, _, kh, kw = w.shape
    ho = _out_size(h, top, bottom, dh * (kh - 1) + 1, sh, name, "dilated kernel height")
    wo = _out_size(wd, left, right, dw * (kw - 1) + 1, sw, name, "dilated kernel width")
    if top or left or bottom or right:
        x = pad(x, (0, 0, top, left), (0, 0, bottom, right), 0.0, f"{name}.pad")
    cg, fg = c // groups, f // groups
    rc = lang.reduce_axis((0, cg), "rc")
    ry = lang.reduce_axis((0, kh), "ry")
    rx = lang.reduce_axis((0, kw), "rx")

    def channel(ff: Expr) -> Expr:
        return rc if groups == 1 else (ff // fg) * cg + rc if fg > 1 else scale(ff, cg) + rc

    return lang.compute(
        (n, f, ho, wo),
        lambda nn, ff, yy, xx: _reducer.sum(
            x[nn, channel(ff), scale(yy, sh) + scale(ry, dh), scale(xx, sw) + scale(rx, dw)]
            * w[ff, rc, ry, rx], [rc, ry, rx]),
        name=name, tag="conv2d_nchw" if groups == 1 else "group_conv2d_nchw")


def pool(x: Tensor, kernel: Any, stride: Any, padding: Any, pool_type: str,
         count_include_pad: bool = True, name: str | None = None) -> Tensor:
    """Max or average pooling over the last two axes (H, W) of ``X`` (NCHW, or any ``[..., H, W]``).

    ``kernel`` and ``stride`` are an int or a pair, ``padding`` ``[top, left, bottom, right]``
    (or an int, or a pair for both sides); every padding must be smaller than the kernel so
    that each window holds an input element.  Max pooling pads with ``-inf``.  Average
    pooling divides the window sum by the full window size, padding included, when
    ``count_include_pad`` is true, and by the number of input elements in the window otherwise."""
    if pool_type not in ("avg", "max"):
        raise ValueError(f"pool: pool_type must be 'avg' or 'max', got {pool_type!r}")
    name = name or f"{pool_type}_pool"
    check_tensor(x, name, "X")
    if x.ndim < 2:
        raise ValueError(f"{name}: X must have at least 2 axes [..., H, W], got shape {x.shape}")
    kh, kw = as_tuple(kernel, 2, name, "kernel", minimum=1)
    sh, sw = as_tuple(stride, 2, name, "stride", minimum=1)
    top, left, bottom, right = pads = _padding4(padding, name)
    if top >= kh or bottom >= kh or left >= kw or right >= kw:
        raise ValueError(f"{name}: padding {list(pads)} must be smaller than the kernel "
                         f"{[kh, kw]} (a window would hold only padding)")
    h, wd = x.shape[-2:]
    ho = _out_size(h, top, bottom, kh, sh, name, "kernel height")
    wo = _out_size(wd, left, right, kw, sw, name, "kernel width")
    lead = x.ndim - 2
    src = x
    if any(pads) and pool_type == "avg":
        src = pad(x, (0,) * lead + (top, left), (0,) * lead + (bottom, right), 0, f"{name}.pad")
    shape = x.shape[:-2] + (ho, wo)
    names = [f"ax{d}" for d in range(lead)] + ["y", "x"]

    def window(ax: tuple[Expr, ...], reducer) -> Expr:
        ry = lang.reduce_axis((0, kh), "ry")
        rx = lang.reduce_axis((0, kw), "rx")
        r, c = scale(ax[lead], sh) + ry, scale(ax[lead + 1], sw) + rx
        if src is not x or not any(pads):
            return reducer(src[ax[:lead] + (r, c)], [ry, rx])
        # max: the -inf padding read under the window's guard: the saved winner is an offset into X
        inside = _inside(r, top, h, bottom) & _inside(c, left, wd, right)
        read = x[ax[:lead] + (r - top if top else r, c - left if left else c)]
        return reducer(lang.if_then_else(inside, read, dt.min_value(x.dtype)), [ry, rx])

    if pool_type == "max":
        return new_compute(shape, lambda ax: window(ax, _reducer.max), name, "pool_max", names)
    total = new_compute(shape, lambda ax: window(ax, _reducer.sum), f"{name}.sum", "pool_sum", names)

    def average(ax: tuple[Expr, ...]) -> Expr:
        y, xx = ax[lead], ax[lead + 1]
        if count_include_pad or not any(pads):
            return total[ax] / float(kh * kw)
        count = (_valid(y, sh, top, kh, h, ho) * _valid(xx, sw, left, kw, wd, wo))
        return total[ax] / lang.cast(dt.compute_dtype(x.dtype), count)

    return new_compute(shape, average, name, "pool_avg", names)


def _inside(i: Expr, lo: int, size: int, hi: int) -> Expr:
    """``lo <= i < lo + size``, testing only the sides that have padding."""
    conds = ([i >= lo] if lo else []) + ([i < lo + size] if hi else [])
    out = conds[0] if conds else const(True, "bool")
    for c in conds[1:]:
        out = out & c
    return out


def _valid(o: Expr, stride: int, lo: int, window: int, size: int, out: int) -> Expr | int:
    """How many of the window ``[o*stride - lo, o*stride - lo + window)`` lie in ``[0, size)``."""
    start = scale(o, stride) - lo if lo else scale(o, stride)
    first: Expr | int = lang.maximum(start, 0) if lo else start
    last: Expr | int = start + window
    if (out - 1) * stride - lo + window > size:
        last = lang.minimum(last, size)
    return last - first


def _with_axis(ax: tuple[Expr, ...], axis: int, k: Expr) -> tuple[Expr, ...]:
    return ax[:axis] + (k,) + ax[axis:]


def _without_axis(ax: tuple[Expr, ...], axis: int) -> tuple[Expr, ...]:
    return ax[:axis] + ax[axis + 1:]


def _softmax_parts(x: Tensor, axis: int, name: str) -> tuple[Tensor, int]:
    """The max of ``X`` along ``axis`` (a tensor without that axis) and the normalized axis."""
    check_float(x, name)
    if x.ndim == 0:
        raise ValueError(f"{name}: cannot take a softmax of a 0-d tensor")
    axis = normalize_axis(axis, x.ndim, name)
    return reduce_compute(_without_axis(x.shape, axis), x.shape[axis], "k", _reducer.max,
                          lambda ax, k: x[_with_axis(ax, axis, k)], f"{name}.max", "softmax_max"), axis


def softmax(x: Tensor, axis: int = -1, name: str = "softmax") -> Tensor:
    """``exp(X - max) / sum(exp(X - max))`` along ``axis`` (the max keeps ``exp`` finite)."""
    m, axis = _softmax_parts(x, axis, name)
    e = new_compute(x.shape, lambda ax: lang.exp(x[ax] - m[_without_axis(ax, axis)]),
                    f"{name}.exp", "softmax_exp")
    s = reduce_compute(m.shape, x.shape[axis], "k", _reducer.sum, lambda ax, k: e[_with_axis(ax, axis, k)],
                       f"{name}.sum", "softmax_sum")
    return new_compute(x.shape, lambda ax: e[ax] / s[_without_axis(ax, axis)], name, "softmax_output")


def log_softmax(x: Tensor, axis: int = -1, name: str = "log_softmax") -> Tensor:
    """``X - max - log(sum(exp(X - max)))`` along ``axis``."""
    m, axis = _softmax_parts(x, axis, name)
    s = reduce_compute(m.shape, x.shape[axis], "k", _reducer.sum,
                       lambda ax, k: lang.exp(x[_with_axis(ax, axis, k)] - m[ax]), f"{name}.sum",
                       "softmax_sum")

    def body(ax):
        rest = _without_axis(ax, axis)
        return x[ax] - m[rest] - lang.log(s[rest])

    return new_compute(x.shape, body, name, "log_softmax_output")


def flatten(x: Tensor, name: str = "flatten") -> Tensor:
    """``X [n, d1, ..., dk]`` as ``[n, d1*...*dk]`` (row-major; a 1-d ``X`` becomes ``[n, 1]``).

    For 4-d ``X [n, c, h, w]``: ``Y[i, k] = X[i, k // (h*w), (k // w) % h, k % w]``."""
    check_tensor(x, name)
    if x.ndim == 0:
        raise ValueError(f"{name}: cannot flatten a 0-d tensor")
    return reshape(x, (x.shape[0], math.prod(x.shape[1:])), name)


def relu(x: Tensor, name: str = "relu") -> Tensor:
    """``max(X, 0)`` elementwise, written ``select(X <= 0, 0, X)``: its derivative at 0 is 0
    (PyTorch's and JAX's convention; ``maximum(X, 0)`` would split a tie evenly and give 1/2),
    and a NaN passes through as in ``torch.relu``."""
    check_tensor(x, name)
    zero = const(0, dt.compute_dtype(x.dtype))
    return elemwise(x, lambda v: lang.select(v <= zero, zero, v), name)


def silu(x: Tensor, name: str = "silu") -> Tensor:
    """SiLU (swish) elementwise, ``X * sigmoid(X)``, as ``torch.nn.functional.silu``."""
    check_float(x, name)
    return elemwise(x, lambda v: v * lang.sigmoid(v), name)


def gelu(x: Tensor, approximate: str = "none", name: str = "gelu") -> Tensor:
    """GELU elementwise, as ``torch.nn.functional.gelu``.

    ``approximate="none"``: ``x/2 (1 + erf(x / sqrt 2))``;
    ``approximate="tanh"``: ``x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
    check_float(x, name)
    c = lambda v: const(v, dt.compute_dtype(x.dtype))  # noqa: E731
    if approximate == "none":
        return elemwise(x, lambda v: v * c(0.5) * (c(1.0) + lang.erf(v * c(math.sqrt(0.5)))), name)
    if approximate == "tanh":
        return elemwise(x, lambda v: v * c(0.5) * (c(1.0) + lang.tanh(
            c(math.sqrt(2 / math.pi)) * (v + c(0.044715) * v * v * v))), name)
    raise ValueError(f"{name}: approximate must be 'none' or 'tanh', got {approximate!r}")
