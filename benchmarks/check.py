"""Checking a system's results against the float64 NumPy reference, once, before timing."""

from __future__ import annotations

import numpy as np

RTOL = 1e-3   # of the largest reference magnitude: float32 sums of 10^4 terms are far better


def compare(outs: list[np.ndarray], refs: list[np.ndarray], rtol: float = RTOL) -> dict:
    """{"ok": bool, "max_rel_err": float, "detail": str}; shapes must match exactly.

    Each output's error is relative to its largest reference magnitude, or, where that is below ``rtol``
    of the largest magnitude among all the references compared together (one program's outputs, the
    gradients of one loss), to that ``rtol`` share: a float32 result carries the rounding of the terms it
    sums, not of its own value, so an output whose exact value cancels to zero (attention over a single
    key passes no gradient to its query and key) holds float32 noise of those terms' magnitude, which a
    bound relative to float64's own noise (about 1e-17) would call wrong."""
    if len(outs) != len(refs):
        return {"ok": False, "max_rel_err": None, "detail": f"{len(outs)} outputs, expected {len(refs)}"}
    worst, floor = 0.0, rtol * max((float(np.max(np.abs(r))) for r in refs if r.size), default=0.0)
    for i, (o, r) in enumerate(zip(outs, refs)):
        o = np.asarray(o)
        if o.shape != r.shape:
            return {"ok": False, "max_rel_err": None,
                    "detail": f"output {i}: shape {o.shape}, expected {r.shape}"}
        if not np.all(np.isfinite(o)):
            return {"ok": False, "max_rel_err": None, "detail": f"output {i}: non-finite values"}
        scale = max(float(np.max(np.abs(r))) if r.size else 0.0, floor)
        err = float(np.max(np.abs(o.astype(np.float64) - r))) if r.size else 0.0
        worst = max(worst, err / scale if scale > 0 else err)
    ok = worst <= rtol
    return {"ok": ok, "max_rel_err": worst, "detail": "" if ok else f"max rel err {worst:.2e} > {rtol:.0e}"}
