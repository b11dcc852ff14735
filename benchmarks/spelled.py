"""The ``spelled`` suite's layers written as a user writes them: ``ta.compute``, ``ta.sum``,
``ta.max`` and ``if_then_else``, never ``ta.topi``.  Each is the same math as the peers' formula
of its ``kind`` (``sys_torch.py``, ``sys_jax.py``) and as the ``ta.topi`` layer of that kind, so
``python -m benchmarks.cpu_ratios spelled`` shows what the spelling costs beside the topi one.
"""

from __future__ import annotations


def forward(kind: str, p: dict, params: dict):
    """Y of ``kind`` from the placeholders ``p``, spelled by hand."""
    import tensorad as ta

    return {"causal_attention": _causal_attention, "layer_norm": _layer_norm,
            "group_norm": _group_norm, "ce_smooth": _ce_smooth, "lstm": _lstm_cell}[kind](ta, p, params)


def _softmax_rows(ta, s, name: str):
    """``exp(s - max) / sum exp(s - max)`` over the last axis of a 3-d ``s``."""
    b, n, m = s.shape
    j = ta.reduce_axis((0, m), "j")
    mx = ta.compute((b, n), lambda h, i: ta.max(s[h, i, j], axis=j), name=f"{name}_max")
    e = ta.compute(s.shape, lambda h, i, k: ta.exp(s[h, i, k] - mx[h, i]), name=f"{name}_exp")
    j2 = ta.reduce_axis((0, m), "j2")
    z = ta.compute((b, n), lambda h, i: ta.sum(e[h, i, j2], axis=j2), name=f"{name}_sum")
    return ta.compute(s.shape, lambda h, i, k: e[h, i, k] / z[h, i], name=name)


def _causal_attention(ta, p: dict, params: dict):
    """Scores masked with ``if_then_else(j <= i, sum_d(Q*K) * s, -inf)``, a softmax, then ``P V``."""
    Q, K, V = p["Q"], p["K"], p["V"]
    b, n, d = Q.shape
    scale = 1.0 / d ** 0.5
    r = ta.reduce_axis((0, d), "d")
    scores = ta.compute((b, n, n), lambda h, i, j: ta.if_then_else(
        j <= i, ta.sum(Q[h, i, r] * K[h, j, r], axis=r) * scale, ta.const(float("-inf"))), name="scores")
    P = _softmax_rows(ta, scores, "probs")
    t = ta.reduce_axis((0, n), "t")
    return ta.compute((b, n, V.shape[2]), lambda h, i, c: ta.sum(P[h, i, t] * V[h, t, c], axis=t),
                      name="context")


def _normalized(ta, X, rows: int, width: int, eps: float = 1e-5):
    """``(x - mean) / sqrt(var + eps)`` of the rows of a 2-d ``X``: mean, variance, normalize."""
    k = ta.reduce_axis((0, width), "k")
    mean = ta.compute((rows,), lambda i: ta.sum(X[i, k], axis=k) / width, name="mean")
    k2 = ta.reduce_axis((0, width), "k2")
    var = ta.compute((rows,), lambda i: ta.sum((X[i, k2] - mean[i]) * (X[i, k2] - mean[i]), axis=k2)
                     / width, name="var")
    return ta.compute((rows, width), lambda i, j: (X[i, j] - mean[i]) / ta.sqrt(var[i] + eps),
                      name="xhat")


def _layer_norm(ta, p: dict, params: dict):
    X, g, bt = p["X"], p["gamma"], p["beta"]
    rows, width = X.shape
    xhat = _normalized(ta, X, rows, width)
    return ta.compute(X.shape, lambda i, j: xhat[i, j] * g[j] + bt[j], name="layer_norm")


def _group_norm(ta, p: dict, params: dict):
    """The groups as rows of ``X`` viewed as ``[N * G, C / G * H * W]``, then the channel affine."""
    X, g, bt = p["X"], p["gamma"], p["beta"]
    n, c, hh, ww = X.shape
    groups = params["groups"]
    per = c // groups
    width = per * hh * ww
    flat = ta.compute((n * groups, width), lambda r, q: X[r // groups, (r % groups) * per + q // (hh * ww),
                                                           (q // ww) % hh, q % ww], name="grouped")
    xhat = _normalized(ta, flat, n * groups, width)
    return ta.compute(X.shape, lambda a, ch, y, x: xhat[a * groups + ch // per, (ch % per) * hh * ww
                                                        + y * ww + x] * g[ch] + bt[ch], name="group_norm")


def _ce_smooth(ta, p: dict, params: dict):
    """``-mean_r sum_c t[r, c] log_softmax(Z)[r, c]`` with the smoothed target
    ``t = if_then_else(c == L[r], 1 - e + e / C, e / C)``."""
    Z, L = p["Z"], p["labels"]
    rows, classes = Z.shape
    e = params["smoothing"]
    c = ta.reduce_axis((0, classes), "c")
    mx = ta.compute((rows,), lambda r: ta.max(Z[r, c], axis=c), name="zmax")
    c2 = ta.reduce_axis((0, classes), "c2")
    lse = ta.compute((rows,), lambda r: ta.log(ta.sum(ta.exp(Z[r, c2] - mx[r]), axis=c2)) + mx[r],
                     name="lse")
    lp = ta.compute(Z.shape, lambda r, k: Z[r, k] - lse[r], name="logp")
    on, off = 1.0 - e + e / classes, e / classes
    rr, cc = ta.reduce_axis((0, rows), "rr"), ta.reduce_axis((0, classes), "cc")
    return ta.compute((), lambda: ta.sum(ta.if_then_else(cc == L[rr], ta.const(on), ta.const(off))
                                         * lp[rr, cc], axis=[rr, cc]) * (-1.0 / rows), name="loss")


def lstm_hidden(ta, X, h0, c0, Wih, Whh, b):
    """The hidden state ``[B, H]`` of one LSTM step: the two products into one ``[B, 4H]`` tensor of
    gates i, f, g, o, read at ``gates[n, k * H + q]``, the cell, then the hidden state; ``X`` is
    ``[..., B, I]``, read at index 0 of its leading axes."""
    *lead, batch, inputs = X.shape
    lead = (0,) * len(lead)
    hidden = h0.shape[1]
    k, k2 = ta.reduce_axis((0, inputs), "k"), ta.reduce_axis((0, hidden), "k2")
    gates = ta.compute((batch, 4 * hidden), lambda n, u: ta.sum(X[(*lead, n, k)] * Wih[u, k], axis=k)
                       + ta.sum(h0[n, k2] * Whh[u, k2], axis=k2) + b[u], name="gates")

    def gate(n, q, which):
        return gates[n, which * hidden + q]
    c = ta.compute((batch, hidden), lambda n, q: ta.sigmoid(gate(n, q, 1)) * c0[n, q]
                   + ta.sigmoid(gate(n, q, 0)) * ta.tanh(gate(n, q, 2)), name="cell")
    return ta.compute((batch, hidden), lambda n, q: ta.sigmoid(gate(n, q, 3)) * ta.tanh(c[n, q]),
                      name="hidden")


def _lstm_cell(ta, p: dict, params: dict):
    """One step of the ``lstm`` kind (``X [1, B, I]``): :func:`lstm_hidden`, summed."""
    h = lstm_hidden(ta, *(p[name] for name in ("X", "h0", "c0", "Wih", "Whh", "b")))
    n_, q_ = ta.reduce_axis((0, h.shape[0]), "n"), ta.reduce_axis((0, h.shape[1]), "q")
    return ta.compute((), lambda: ta.sum(h[n_, q_], axis=[n_, q_]), name="loss")
