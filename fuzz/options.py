"""Build options drawn at random for a fuzzed program (``ta.build``'s options, API.md 4 and 6).

Targets: the host, and named CPUs/feature strings (``-mattr=-avx512f`` style).  A ``build``
that refuses such strings is detected once per worker (:func:`target_supported`) and the
programs are then built for the host only.
"""

from __future__ import annotations

import random

TARGETS = ("llvm", "llvm -mcpu=haswell", "llvm -mattr=-avx512f", "llvm -mcpu=x86-64")


def draw_options(r: random.Random, extra: random.Random | None = None) -> dict:
    """A random subset of build options; absent keys take ``build``'s defaults.  ``extra``
    draws the options added later (:func:`.program.generate` keeps old seeds' programs)."""
    opts: dict = {}
    if r.random() < 0.5:
        opts["num_threads"] = r.choice((1, 2, 3))
    if r.random() < 0.5:
        opts["parallel_min_work"] = 0  # parallel loops even for tiny nests
    if r.random() < 0.3:
        opts["fastmath"] = False
    if r.random() < 0.3:
        opts["vector_width"] = r.choice((1, 2, 4, 8, 16))
    if r.random() < 0.2:
        opts["fuse"] = False
    if r.random() < 0.4:
        opts["opt_level"] = r.choice((0, 1, 2))
    if r.random() < 0.15:
        opts["microkernel"] = True
        if r.random() < 0.5:
            opts["tile"] = (r.choice((1, 2, 4)), r.choice((8, 16)), r.choice((1, 3, 8)), r.choice((1, 4, 16)))
    if r.random() < 0.3:
        opts["target"] = r.choice(TARGETS[1:])
    if extra is not None:
        if "opt_level" in opts and extra.random() < 0.25:
            opts["opt_level"] = 3
        if extra.random() < 0.1:
            opts["parallel"] = False
    return opts


_PROBED: dict[str, bool] = {}


def target_supported(ta) -> bool:
    """Does ``ta.build`` take a named target?  (Today's ``build`` accepts ``"llvm ..."`` and
    compiles for the host; a ``ValueError`` means a build that refuses such strings.)"""
    if "target" not in _PROBED:
        A = ta.placeholder((2,), name="A")
        try:
            ta.build([ta.compute((2,), lambda i: A[i] + 1.0, name="Y")], [A], target="llvm -mattr=-avx512f")
            _PROBED["target"] = True
        except ValueError:
            _PROBED["target"] = False
    return _PROBED["target"]


def usable(ta, opts: dict) -> dict:
    """``opts`` without what this tensorad cannot take yet (a named target)."""
    if "target" in opts and not target_supported(ta):
        opts = {k: v for k, v in opts.items() if k != "target"}
    return opts
