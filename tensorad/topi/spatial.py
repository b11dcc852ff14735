"""Layers that move data across spatial positions: ``conv2d_transpose`` and ``upsampling``.

Both are gathers with quasi-affine indices, which the optimizer inverts exactly with isl: the transposed
convolution reads ``X[(y + p - ry*d) / s]`` only where that division is exact (a ``where`` condition), so
its work is the true number of products; bilinear upsampling's source coordinate is a ratio of integer
expressions: its floor and fraction are integer arithmetic, the clamped edges ``if_then_else`` cases."""

from __future__ import annotations

from typing import Any

from tensorad.ir import Expr, Tensor, const
from tensorad.ir import dtype as dt
from tensorad.ir import reducer as _reducer
from tensorad.lang import tensor_lang as lang

from ._util import as_tuple, check_ndim, check_tensor, new_compute, scale


def conv2d_transpose(x: Tensor, w: Tensor, strides: Any = 1, padding: Any = 0,
                     output_padding: Any = 0, dilation: Any = 1,
                     name: str = "conv2d_transpose") -> Tensor:
    """The transposed 2-d convolution of ``X [N, C, H, W]`` with ``W [C, F, KH, KW]``, as
    ``torch.nn.functional.conv_transpose2d`` (the gradient of ``conv2d`` by its input).

    ``Y[n, f, y, x] = sum_{c, ry, rx} X[n, c, iy, ix] * W[c, f, ry, rx]`` over the points where
    ``iy = (y + ph - ry*dh) / sh`` (and ``ix`` likewise) is an exact division inside ``X``;
    ``Ho = (H - 1)*sh - 2*ph + dh*(KH - 1) + oph + 1``.  ``padding`` and ``output_padding``
    are an int or a pair; ``output_padding`` must be smaller than the stride or the dilation."""
    check_tensor(x, name, "X")
    check_tensor(w, name, "W")
    check_ndim(x, name, 4, "NCHW")
    check_ndim(w, name, 4, "[in, out, kh, kw]")
    if x.shape[1] != w.shape[0]:
        raise ValueError(f"{name}: X {x.shape} has {x.shape[1]} channels but W {w.shape} "
                         f"expects {w.shape[0]} (W is [in, out, kh, kw])")
    sh, sw = as_tuple(strides, 2, name, "strides", minimum=1)
    dh, dw = as_tuple(dilation, 2, name, "dilation", minimum=1)
    ph, pw = as_tuple(padding, 2, name, "padding")
    oph, opw = as_tuple(output_padding, 2, name, "output_padding")
    if oph >= max(sh, dh) or opw >= max(sw, dw):
        raise ValueError(f"{name}: output_padding {(oph, opw)} must be smaller than the stride "
                         f"{(sh, sw)} or the dilation {(dh, dw)}")
    n, c, h, wd = x.shape
    _, f, kh, kw = w.shape
    ho = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    wo = (wd - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    if ho < 1 or wo < 1:
        raise ValueError(f"{name}: padding {(ph, pw)} leaves an empty output ({ho}, {wo})")
    rc = lang.reduce_axis((0, c), "rc")
    ry = lang.reduce_axis((0, kh), "ry")
    rx = lang.reduce_axis((0, kw), "rx")

    def source(o: Expr, p: int, r: Expr, d: int, s: int, size: int) -> tuple[Expr, Expr]:
        t = o + p - scale(r, d) if p else o - scale(r, d)
        cond = (t >= 0) & (t <= (size - 1) * s)
        if s > 1:
            cond = cond & (t % s == 0)
            return t // s, cond
        return t, cond

    def body(nn: Expr, ff: Expr, yy: Expr, xx: Expr) -> Expr:
        iy, cy = source(yy, ph, ry, dh, sh, h)
        ix, cx = source(xx, pw, rx, dw, sw, wd)
        return _reducer.sum(x[nn, rc, iy, ix] * w[rc, ff, ry, rx], [rc, ry, rx], where=cy & cx)

    return lang.compute((n, f, ho, wo), body, name=name, tag="conv2d_transpose_nchw")


def _interp_axis(x: Tensor, axis: int, s: int, align_corners: bool, name: str) -> Tensor:
    """Linear interpolation of ``X`` along ``axis`` to ``s`` times its size (torch's rules).

    With ``num / den`` the source coordinate of output ``o`` (``num`` an integer expression):
    ``i0 = num // den``, ``lam = (num % den) / den``; the result is ``X[0]`` where ``num < 0``,
    ``X[n-1]`` where ``i0 >= n - 1``, else ``(1 - lam) X[i0] + lam X[i0 + 1]``."""
    n = x.shape[axis]
    out = n * s
    shape = x.shape[:axis] + (out,) + x.shape[axis + 1:]

    def at(ax: tuple[Expr, ...], i: Expr | int) -> Expr:
        return x[ax[:axis] + (i,) + ax[axis + 1:]]

    def body(ax: tuple[Expr, ...]) -> Expr:
        o = ax[axis]
        if align_corners:
            num, den = o * (n - 1), max(out - 1, 1)
        else:
            num, den = o * 2 + (1 - s), 2 * s
        i0 = num // den
        lam = lang.cast(dt.compute_dtype(x.dtype), num % den) * const(1.0 / den, dt.compute_dtype(x.dtype))
        inner = at(ax, i0) + (at(ax, i0 + 1) - at(ax, i0)) * lam
        y = lang.if_then_else(i0 >= n - 1, at(ax, n - 1), inner)
        return y if align_corners else lang.if_then_else(num < 0, at(ax, 0), y)

    return new_compute(shape, body, name, "upsampling_bilinear")


def upsampling(x: Tensor, scale_factor: Any, method: str = "nearest", align_corners: bool = False,
               name: str = "upsampling") -> Tensor:
    """Upsampling of the last two axes (H, W) of ``X`` by integer factors.

    ``method="nearest"``: ``Y[..., y, x] = X[..., y // sh, x // sw]``; ``method="bilinear"``: as
    ``torch.nn.functional.interpolate(mode="bilinear", align_corners=...)``, along H, then along W."""
    check_tensor(x, name, "X")
    if x.ndim < 2:
        raise ValueError(f"{name}: X must have at least 2 axes [..., H, W], got shape {x.shape}")
    sh, sw = as_tuple(scale_factor, 2, name, "scale_factor (integer factors)", minimum=1)
    if method == "nearest":
        lead = x.ndim - 2
        shape = x.shape[:-2] + (x.shape[-2] * sh, x.shape[-1] * sw)
        return new_compute(shape, lambda ax: x[ax[:lead] + (ax[lead] // sh if sh > 1 else ax[lead],
                                                            ax[lead + 1] // sw if sw > 1 else ax[lead + 1])],
                           name, "upsampling_nearest")
    if method != "bilinear":
        raise ValueError(f"{name}: method must be 'nearest' or 'bilinear', got {method!r}")
    if not dt.is_float(x.dtype):
        raise TypeError(f"{name}: bilinear upsampling needs a float tensor, {x.name} is {x.dtype}")
    axes = [a for a, f in ((x.ndim - 2, sh), (x.ndim - 1, sw)) if f > 1]
    if not axes:
        return new_compute(x.shape, lambda ax: x[ax], name, "upsampling_bilinear")
    out = x
    for i, a in enumerate(axes):
        out = _interp_axis(out, a, sh if a == x.ndim - 2 else sw, align_corners,
                           name if i == len(axes) - 1 else f"{name}.h")
    return out
