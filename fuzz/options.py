"""Build options drawn at random for a fuzzed program (``ta.build``'s options, API.md 4 and 6).

Targets: the host, and named CPUs/feature strings (``-mattr=-avx512f`` style), which
``ta.build`` compiles for (codegen/target.py describes each).
"""

from __future__ import annotations

import random

TARGETS = ("llvm", "llvm -mcpu=haswell", "llvm -mattr=-avx512f", "llvm -mcpu=x86-64")


def draw_options(r: random.Random, extra: random.Random | None = None,
                 s22: random.Random | None = None) -> dict:
    """A random subset of build options; absent keys take ``build``'s defaults.  ``extra``
    and ``s22`` draw the options added later (:func:`.program.generate` keeps old seeds'
    programs): ``s22`` draws ``tune`` (measure the candidate strategies), ``variants``,
    ``microkernel=False`` and four threads."""
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
            mr, nr, kc, mc = r.choice((1, 2, 4)), r.choice((8, 16)), r.choice((1, 3, 8)), r.choice((1, 4, 16))
            opts["tile"] = (mr, nr, kc, max(mr, mc))  # MC a multiple of MR
    if r.random() < 0.3:
        opts["target"] = r.choice(TARGETS[1:])
    if extra is not None:
        if "opt_level" in opts and extra.random() < 0.25:
            opts["opt_level"] = 3
        if extra.random() < 0.1:
            opts["parallel"] = False
    if s22 is not None:
        if s22.random() < 0.03:
            opts["tune"] = True
        if s22.random() < 0.04:
            opts["variants"] = True
        if "microkernel" not in opts and s22.random() < 0.05:
            opts["microkernel"] = False
        if s22.random() < 0.05:
            opts["num_threads"] = 4
    return opts
