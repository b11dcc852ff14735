"""After lowering, matrix products that read one side B alike share one packed copy of it.

Products (:class:`..gemm.contraction.Contraction`) whose side B is a plain read of the same buffer with the
same description (:func:`..gemm.descriptor.plan_side`) and ``N``, ``K``, ``NR``, ``KC`` and ``NC`` share a
kernel buffer holding B packed (:data:`..gemm.descriptor.H_BSHARED`): the group's first product packs the
column blocks it runs into it, the later ones only read it.  A group ends at a step that writes B's
buffer, and needs two products.  Shared: an unbatched B that the driver packs, in blocks of whole panels
over rows in one part, outside a generic kernel's block (:mod:`.row_bound`), of at most
:data:`..gemm.descriptor.APRE_LIMIT` bytes; a kernel's shared copies take at most :data:`SHARED_LIMIT`
bytes together (first groups first)."""

from __future__ import annotations

from dataclasses import replace

from tensorad.lang import placeholder

from ..gemm.contraction import Contraction, SharedPack
from ..gemm.descriptor import APRE_LIMIT, panel_lanes, plan_side
from ..gemm.microkernel import reads_b_in_place
from ..gemm.pack_routines import SLACK
from ..loops.shared_nests import RenamedNest
from ..program import Buffer, Fill, Nest, Program, stores

SHARED_LIMIT = 4 * APRE_LIMIT  # bytes of all the shared packed copies of one kernel


def share_packed_sides(program: Program) -> Program:
    """``program`` with each group of products that read side B alike sharing one packed copy of it."""
    open_groups: dict[tuple, list[int]] = {}  # a side's key -> the steps of the products reading it
    groups: list[tuple[tuple, list[int]]] = []
    for k, step in enumerate(program.steps):
        key = _side_key(step, program.buffers)
        if key is not None:
            open_groups.setdefault(key, []).append(k)
        for written in _written(step):
            for key in [key for key in open_groups if key[0] is written]:
                groups.append((key, open_groups.pop(key)))
    groups += open_groups.items()
    steps, temps, buffers = list(program.steps), [], dict(program.buffers)
    room = SHARED_LIMIT
    for key, members in sorted(groups, key=lambda g: g[1][0]):
        spec = program.steps[members[0]].attrs.gemm
        elements = -(-spec.N // spec.nr) * spec.nr * spec.K
        size = elements * (4 if spec.dtype == "float32" else 8)
        if len(members) < 2 or size > min(APRE_LIMIT, room):
            continue
        room -= size
        copies = sum(t.name.startswith(f"{key[0].name}.packed") for t in temps)
        tensor = placeholder((elements + SLACK,), spec.dtype,
                             name=f"{key[0].name}.packed{f'#{copies + 1}' if copies else ''}")
        buffers[tensor] = Buffer(tensor.name, tensor.shape, spec.dtype, "temp", tensor)
        temps.append(buffers[tensor])
        for j, k in enumerate(members):
            nest = steps[k]
            shared = SharedPack(tensor, j == 0, len(members))
            steps[k] = replace(nest, note=f"{nest.note}; {shared.describe()}",
                               attrs=replace(nest.attrs, gemm=replace(nest.attrs.gemm, packed_b=shared)))
    if not temps:
        return program
    # (before the others: a generic kernel's count of rows stays its last temporary, see .row_bound)
    return replace(program, temps=[*temps, *program.temps], steps=steps, buffers=buffers)


def _side_key(step, buffers: dict) -> tuple | None:
    """What sharing a product's packed side B takes: its buffer first, then its map and layout; ``None``
    for a step that is no product or whose B is not shared."""
    spec: Contraction | None = step.attrs.gemm if isinstance(step, Nest) else None
    if spec is None or spec.batches != 1 or spec.rows is not None or spec.nc % spec.nr:  # (blocks at jc KC)
        return None
    if spec.row_parts > 1:  # (the parts of a column block would fill it at once)
        return None
    plan = plan_side(spec.b, spec.batch, spec.n, spec.k, lambda t: buffers[t].strides, spec.nr,
                     panel_lanes(spec.target.lanes(spec.dtype), spec.nr))
    if plan is None or reads_b_in_place(spec, plan):
        return None
    return (buffers[plan.tensor], spec.dtype, spec.N, spec.K, spec.nr, spec.kc, spec.nc, plan.mode,
            tuple(sorted(plan.fields.items())))


def _written(step) -> set:
    """The buffers a step writes (compared by identity: tensors sharing a buffer share the object)."""
    if isinstance(step, Fill):
        return {step.buffer}
    if isinstance(step, RenamedNest):  # (its source's stores renamed: its own body is made to print)
        try:
            return {*step.outputs, *(step.buffer(s.buffer) for s in stores(step.source.body))}
        except KeyError:
            pass
    return {*step.outputs, *(s.buffer for s in stores(step.body))}
