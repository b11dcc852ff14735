"""Matrix products with NumPy's ``matmul`` semantics: ``Y[i, j] = sum_r A[i, r] * B[r, j]``, leading axes
broadcast as in ``add``, a 1-d ``A`` a row and a 1-d ``B`` a column whose unit axis is dropped."""

from __future__ import annotations

from tensorad.ir import Expr, Tensor
from tensorad.ir import reducer as _reducer
from tensorad.lang import reduce_axis

from ._util import check_tensor, new_compute
from .broadcast import broadcast_shape


def _batch_index(x: Tensor, batch_axes: tuple[Expr, ...]) -> tuple:
    """The batch part of ``x``'s index under broadcasting (size-1 batch axes read at 0)."""
    nb = x.ndim - 2
    if nb <= 0:
        return ()
    mine = batch_axes[len(batch_axes) - nb:]
    return tuple(0 if s == 1 and ax.hi != 1 else ax for s, ax in zip(x.shape[:nb], mine))


def matmul(a: Tensor, b: Tensor, name: str = "matmul") -> Tensor:
    """The matrix product of ``A`` and ``B`` (batched and 1-d as in NumPy)."""
    check_tensor(a, name, "A")
    check_tensor(b, name, "B")
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"{name}: operands must be at least 1-d, got shapes {a.shape} and {b.shape}")
    ka = a.shape[-1]
    kb = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if ka != kb:
        raise ValueError(f"{name}: contracted sizes differ: {a.name} {a.shape} has {ka} columns "
                         f"but {b.name} {b.shape} has {kb} rows")
    batch = broadcast_shape(a.shape[:-2], b.shape[:-2], name)
    rows = (a.shape[-2],) if a.ndim >= 2 else ()
    cols = (b.shape[-1],) if b.ndim >= 2 else ()
    shape = batch + rows + cols
    names = [f"b{d}" for d in range(len(batch))] + ["i"] * len(rows) + ["j"] * len(cols)

    def body(ax: tuple[Expr, ...]) -> Expr:
        r = reduce_axis((0, ka), "k")
        bax = ax[:len(batch)]
        i = ax[len(batch):len(batch) + len(rows)]
        j = ax[len(batch) + len(rows):]
        lhs = a[_batch_index(a, bax) + i + (r,)]
        rhs = b[(r,) if b.ndim == 1 else _batch_index(b, bax) + (r,) + j]
        return _reducer.sum(lhs * rhs, r)

    return new_compute(shape, body, name, "matmul", names)
