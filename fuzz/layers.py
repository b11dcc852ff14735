"""Random ordinary layers at moderate shapes, checked against PyTorch (``python -m fuzz --layers``).

The program generator (:mod:`.program`) draws index expressions over a few elements; the code
generator's strategies -- the packed matrix-product micro-kernel, a strided convolution's
parity classes, padded and range-checked packing, scatters of pooling and embedding gradients,
collapsed reductions -- engage only past a size threshold, on the shapes layers have.  This
generator draws those: a ``ta.topi`` layer (convolution with random stride, padding, dilation
and groups, optionally with bias and ReLU; transposed convolution; max and average pooling;
dense; batched matrix product; batch, layer and group normalization; softmax and log-softmax;
attention, causal or not; upsampling; GELU; an embedding lookup; RMS and instance
normalization; a SwiGLU gate; a residual add before layer normalization) with shapes drawn around the
micro-kernel's threshold, and the same layer written with ``torch.nn.functional``.

Each layer program is an ordinary fuzz :class:`~.program.Program` (so the ``forward``,
``checked``, ``jvp`` and ``split`` checks run on it as on any other) carrying its PyTorch
reference, which the ``torch`` check compares the forward and the reverse gradient with, in
float64 (:meth:`.checks.Case.torch`).  The finite-difference checks and the optimizer check
are skipped: one pair of forward runs per input element, or ``evaluate`` of an unoptimized
gradient summing over every input element, is too slow at these sizes; PyTorch's autograd is
the oracle here.  Every draw comes from ``seed`` alone.
"""

from __future__ import annotations

import random
from dataclasses import replace

from .options import draw_options
from .program import Def, Program, leaf

KINDS = ("conv2d", "conv2d", "conv2d", "conv2d_transpose", "pool", "pool", "dense", "matmul",
         "batch_norm", "layer_norm", "group_norm", "softmax", "attention", "upsampling", "gelu",
         "embedding", "rms_norm", "instance_norm", "silu", "residual_norm")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


class _Layer:
    """What one draw builds: placeholders, the tensorad body and the torch body."""

    def __init__(self) -> None:
        self.inputs: list[tuple[str, tuple[int, ...], str]] = []  # (name, shape, dtype)
        self.body = ""  # a ta.topi expression over the inputs
        self.shape: tuple[int, ...] = ()
        self.ref = ""  # a torch expression over the inputs (F = torch.nn.functional)

    def input(self, name: str, shape: tuple[int, ...], dtype: str = "DT") -> str:
        self.inputs.append((name, tuple(shape), dtype))
        return name


def _conv_out(size: int, k: int, s: int, p: int, d: int) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _conv2d(r: random.Random, L: _Layer) -> None:
    n, c = r.choice((1, 2, 3)), r.choice((1, 3, 4, 8, 16, 32))
    groups = r.choice([g for g in _divisors(c) if g in (1, 2, 4, c)])
    f = groups * r.choice((1, 2, 3, 4, 8)) if groups > 1 else r.choice((1, 4, 8, 16, 24, 32))
    k, s, d = r.choice((1, 2, 3, 3, 5)), r.choice((1, 1, 2, 3)), r.choice((1, 1, 2))
    p = r.randint(0, (d * (k - 1)) // 2 + (1 if r.random() < 0.2 else 0))
    h = r.randint(max(1, d * (k - 1) + 1 - 2 * p), 24)
    w = r.randint(max(1, d * (k - 1) + 1 - 2 * p), 24)
    L.input("X", (n, c, h, w))
    L.input("W", (f, c // groups, k, k))
    L.body = f"ta.topi.nn.conv2d(X, W, strides={s}, padding={p}, dilation={d}, groups={groups})"
    L.ref = f"F.conv2d(X, W, stride={s}, padding={p}, dilation={d}, groups={groups})"
    L.shape = (n, f, _conv_out(h, k, s, p, d), _conv_out(w, k, s, p, d))
    if r.random() < 0.4:
        L.input("B", (f,))
        L.body = f"ta.topi.nn.relu({L.body} + ta.topi.reshape(B, ({f}, 1, 1)))"
        L.ref = f"F.relu({L.ref} + B.reshape({f}, 1, 1))"


def _conv2d_transpose(r: random.Random, L: _Layer) -> None:
    n, c, f = r.choice((1, 2)), r.choice((1, 4, 8, 16)), r.choice((1, 4, 8, 16))
    k, s, d = r.choice((1, 2, 3, 4)), r.choice((1, 2, 3)), r.choice((1, 1, 2))
    h, w = r.randint(1, 14), r.randint(1, 14)
    full = (min(h, w) - 1) * s + d * (k - 1)
    p = r.randint(0, max(0, full // 2))
    op = r.randint(0, max(s, d) - 1)
    L.input("X", (n, c, h, w))
    L.input("W", (c, f, k, k))
    L.body = f"ta.topi.nn.conv2d_transpose(X, W, strides={s}, padding={p}, output_padding={op}, dilation={d})"
    L.ref = f"F.conv_transpose2d(X, W, stride={s}, padding={p}, output_padding={op}, dilation={d})"
    L.shape = (n, f, (h - 1) * s - 2 * p + d * (k - 1) + op + 1, (w - 1) * s - 2 * p + d * (k - 1) + op + 1)


def _pool(r: random.Random, L: _Layer) -> None:
    n, c = r.choice((1, 2, 4)), r.choice((1, 3, 8, 16, 32))
    k, s = r.choice((1, 2, 2, 3, 3)), r.choice((1, 2, 2, 3))
    p = r.randint(0, k // 2)
    h, w = r.randint(max(1, k - 2 * p), 30), r.randint(max(1, k - 2 * p), 30)
    L.input("X", (n, c, h, w))
    L.shape = (n, c, (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1)
    if r.random() < 0.5:
        L.body = f"ta.topi.nn.pool(ta.topi.nn.relu(X), {k}, {s}, {p}, 'max')"
        L.ref = f"F.max_pool2d(F.relu(X), {k}, {s}, {p})"
    else:
        cip = r.random() < 0.5
        L.body = f"ta.topi.nn.pool(X, {k}, {s}, {p}, 'avg', count_include_pad={cip})"
        L.ref = f"F.avg_pool2d(X, {k}, {s}, {p}, count_include_pad={cip})"


def _dense(r: random.Random, L: _Layer) -> None:
    b, i, o = r.choice((1, 3, 8, 33, 64)), r.choice((1, 7, 16, 64, 100)), r.choice((1, 5, 16, 64, 96))
    L.input("X", (b, i))
    L.input("W", (o, i))
    L.shape = (b, o)
    if r.random() < 0.5:
        L.input("B", (o,))
        L.body, L.ref = "ta.topi.nn.dense(X, W, B)", "F.linear(X, W, B)"
    else:
        L.body, L.ref = "ta.topi.nn.dense(X, W)", "F.linear(X, W)"


def _matmul(r: random.Random, L: _Layer) -> None:
    batch = r.choice(((), (2,), (3,), (2, 2)))
    m, k, n = r.choice((1, 8, 31, 64)), r.choice((1, 9, 32, 70)), r.choice((1, 8, 24, 65))
    L.input("A", (*batch, m, k))
    L.input("B", (*batch, k, n))
    L.shape = (*batch, m, n)
    L.body, L.ref = "ta.topi.matmul(A, B)", "torch.matmul(A, B)"


def _channel_norm(L: _Layer, shape: tuple[int, ...], body: str, ref: str) -> None:
    """A normalization of ``X [N, C, H, W]`` with a scale ``G`` and a shift ``B`` per channel."""
    L.input("X", shape)
    L.input("G", (shape[1],))
    L.input("B", (shape[1],))
    L.shape = shape
    L.body, L.ref = body, ref


def _batch_norm(r: random.Random, L: _Layer) -> None:
    n, c, h, w = r.choice((2, 4, 8)), r.choice((1, 3, 16)), r.randint(1, 12), r.randint(1, 12)
    _channel_norm(L, (n, c, h, w), "ta.topi.nn.batch_norm(X, G, B)",
                  "F.batch_norm(X, None, None, G, B, training=True, eps=1e-5)")


def _layer_norm(r: random.Random, L: _Layer) -> None:
    lead, d = r.choice(((4,), (2, 7), (33,))), r.choice((1, 8, 31, 64, 100))
    L.input("X", (*lead, d))
    L.input("G", (d,))
    L.input("B", (d,))
    L.shape = (*lead, d)
    L.body = "ta.topi.nn.layer_norm(X, G, B)"
    L.ref = f"F.layer_norm(X, ({d},), G, B, eps=1e-5)"


def _group_norm(r: random.Random, L: _Layer) -> None:
    n, c = r.choice((1, 2, 4)), r.choice((2, 4, 8, 16))
    g = r.choice(_divisors(c))
    h, w = r.randint(1, 10), r.randint(1, 10)
    _channel_norm(L, (n, c, h, w), f"ta.topi.nn.group_norm(X, {g}, G, B)",
                  f"F.group_norm(X, {g}, G, B, eps=1e-5)")


def _softmax(r: random.Random, L: _Layer) -> None:
    shape = r.choice(((8, 100), (3, 5, 17), (64, 10), (2, 1000)))
    axis = r.randrange(len(shape)) - len(shape)
    L.input("X", shape)
    L.shape = shape
    fn = r.choice(("softmax", "log_softmax"))
    L.body = f"ta.topi.nn.{fn}(X, axis={axis})"
    L.ref = f"torch.{fn}(X, dim={axis})"


def _attention(r: random.Random, L: _Layer) -> None:
    lead = r.choice(((1,), (2,), (2, 3)))
    t, s, d = r.choice((1, 7, 16, 33)), r.choice((1, 7, 16, 33)), r.choice((4, 8, 16))
    causal = r.random() < 0.5
    L.input("Q", (*lead, t, d))
    L.input("K", (*lead, s, d))
    L.input("V", (*lead, s, d))
    L.shape = (*lead, t, d)
    L.body = f"ta.topi.nn.scaled_dot_product_attention(Q, K, V, causal={causal})"
    L.ref = f"F.scaled_dot_product_attention(Q, K, V, is_causal={causal})"


def _upsampling(r: random.Random, L: _Layer) -> None:
    n, c, h, w = r.choice((1, 2)), r.choice((1, 4, 8)), r.randint(1, 12), r.randint(1, 12)
    sh, sw = r.choice((1, 2, 3)), r.choice((1, 2, 3))
    L.input("X", (n, c, h, w))
    L.shape = (n, c, h * sh, w * sw)
    if r.random() < 0.5:
        L.body = f"ta.topi.nn.upsampling(X, ({sh}, {sw}), 'nearest')"
        L.ref = f"F.interpolate(X, scale_factor=({sh}, {sw}), mode='nearest')"
    else:
        align = r.random() < 0.5
        L.body = f"ta.topi.nn.upsampling(X, ({sh}, {sw}), 'bilinear', align_corners={align})"
        L.ref = f"F.interpolate(X, scale_factor=({sh}, {sw}), mode='bilinear', align_corners={align})"


def _gelu(r: random.Random, L: _Layer) -> None:
    shape = r.choice(((64, 100), (3, 1000), (17,)))
    L.input("X", shape)
    L.shape = shape
    L.body, L.ref = "ta.topi.nn.gelu(X)", "F.gelu(X)"


def _embedding(r: random.Random, L: _Layer) -> None:
    """Indices are the fuzzer's small integers (in [-3, 3]), so the lookup wraps them."""
    v, d = r.choice((3, 7, 50)), r.choice((1, 8, 64))
    ids = r.choice(((5,), (4, 9), (64,)))
    L.input("E", (v, d))
    L.input("I", ids, "'int32'")
    L.shape = (*ids, d)
    L.body = "ta.topi.nn.embedding(E, I, mode='wrap')"
    L.ref = f"E[torch.remainder(I.long(), {v})]"


def _rms_norm(r: random.Random, L: _Layer) -> None:
    lead, d = r.choice(((4,), (2, 7), (33,))), r.choice((1, 8, 31, 64, 100))
    L.input("X", (*lead, d))
    L.input("G", (d,))
    L.shape = (*lead, d)
    L.body = "ta.topi.nn.rms_norm(X, G, eps=1e-6)"
    L.ref = f"F.rms_norm(X, ({d},), G, eps=1e-6)"


def _instance_norm(r: random.Random, L: _Layer) -> None:
    n, c, h, w = r.choice((1, 2, 4)), r.choice((1, 3, 16)), r.randint(1, 12), r.randint(2, 12)
    _channel_norm(L, (n, c, h, w), "ta.topi.nn.instance_norm(X, G, B)",
                  "F.instance_norm(X, weight=G, bias=B, eps=1e-5)")


def _silu(r: random.Random, L: _Layer) -> None:
    """A gated MLP's gate, ``silu(X W1^T) * (X W3^T)`` (SwiGLU)."""
    b, i, o = r.choice((1, 8, 33)), r.choice((4, 16, 64)), r.choice((8, 24, 96))
    L.input("X", (b, i))
    L.input("W1", (o, i))
    L.input("W3", (o, i))
    L.shape = (b, o)
    L.body = "ta.topi.nn.silu(ta.topi.nn.dense(X, W1)) * ta.topi.nn.dense(X, W3)"
    L.ref = "F.silu(F.linear(X, W1)) * F.linear(X, W3)"


def _residual_norm(r: random.Random, L: _Layer) -> None:
    t, d = r.choice((1, 16, 33)), r.choice((8, 64, 100))
    L.input("X", (t, d))
    L.input("R", (t, d))
    L.input("G", (d,))
    L.input("B", (d,))
    L.shape = (t, d)
    L.body = "ta.topi.nn.layer_norm(X + R, G, B)"
    L.ref = f"F.layer_norm(X + R, ({d},), G, B, eps=1e-5)"


BUILDERS = {"conv2d": _conv2d, "conv2d_transpose": _conv2d_transpose, "pool": _pool, "dense": _dense,
            "matmul": _matmul, "batch_norm": _batch_norm, "layer_norm": _layer_norm,
            "group_norm": _group_norm, "softmax": _softmax, "attention": _attention,
            "upsampling": _upsampling, "gelu": _gelu, "embedding": _embedding, "rms_norm": _rms_norm,
            "instance_norm": _instance_norm, "silu": _silu, "residual_norm": _residual_norm}


def generate_layer(seed: int) -> Program:
    """The layer program of ``seed``: one ``ta.topi`` layer on placeholders, float32 or float64,
    with drawn build options and its PyTorch reference (``Program.torch``)."""
    r = random.Random(seed * 2654435761 + 0x1A7E)
    kind = r.choice(KINDS)
    L = _Layer()
    BUILDERS[kind](r, L)
    defs = [Def((name,), shape, dtype) for name, shape, dtype in L.inputs]
    defs.append(Def(("Y",), L.shape, "DT", leaf(L.body, "t"), ("topi",)))
    names = ", ".join(name for name, _, _ in L.inputs)
    ref = f"def REF(torch, F, {names}):\n    return {L.ref}\n"
    prog = Program(r.choice(("float32", "float32", "float64")), tuple(defs), "Y", True, torch=ref)
    return replace(prog, data=r.choice(("unit", "smooth")), options=draw_options(r))

