"""A kernel's module cut into parts that LLVM optimizes side by side, and their object code kept together.

Each loop nest of a module is an external ``noinline`` function and its helpers are internal functions it
alone calls, so the module can be cut between nests, as LLVM's parallel code generation cuts one for LTO:
each part keeps some external functions, a copy of every internal function and private constant they
reach (a math function's vector form, :mod:`.llvm.math_functions`, with the scalar one that names it, in
the part's own ``llvm.compiler.used``), and declarations of the other parts' functions they call, whose
calls pass ``poison`` for the parameters the callee never reads (as LLVM's dead-argument elimination does
within a module: the caller loads nothing for them).  :func:`split` cuts the module text (one entity a
line), balanced by instructions; a module too small to repay a second compile child, or with another
global not private to it, stays whole.  A nest marked to be optimized at a lower level
(:func:`.llvm.ir_loops.at_most_level`) goes into a part of that level, with the others so marked, where
they weigh enough to repay a part of their own.  :func:`bundle` keeps the parts' object code as one
``bytes``.

:func:`merge_duplicates` first keeps one of each set of internal functions whose text is the same but for
their names and their loops' own metadata nodes, and points every use at it; :func:`shared_units` then
names each nest by its content and moves the heavy ones out into modules compiled once per process."""

from __future__ import annotations

import hashlib
import re
import struct
from collections import Counter

from tensorad.ir.rewrite import walk_along

from ..llvm.ir_loops import OPT_LEVEL_ATTRIBUTE

_NAME = re.compile(r'@"([^"]+)"|@([-\w.$]+)')
_LOOP_NODE = re.compile(r'!llvm\.loop (![0-9]+)')
_DISTINCT_NODE = re.compile(r'^(![0-9]+) = distinct !\{\s*\1\s*,?(.*)\}\s*$')
_DEFINE = re.compile(r'^define\s+(?:(internal|private)\s+)?.*?@("[^"]+"|[-\w.$]+)\(')
_GLOBAL = re.compile(r'^@("[^"]+"|[-\w.$]+)\s*=\s*(\w+)')
_LEVEL = re.compile(f'"{OPT_LEVEL_ATTRIBUTE}"="([0-3])"')
_LOCAL = re.compile(r'%("[^"]+"|[-\w.$]+)')
_PAREN = re.compile(r"[()]")
_DELIMITER = re.compile(r"[()\[\]{}<>,]")
_DEPTH = {"(": 1, "[": 1, "{": 1, "<": 1, ")": -1, "]": -1, "}": -1, ">": -1}
_CALL = re.compile(r'\bcall [^@]*@("[^"]+"|[-\w.$]+)\(')
_VARIANT = re.compile(r'"vector-function-abi-variant"="[^"(]*\(([^")]+)\)"')
USED = "llvm.compiler.used"

# the instruction lines a part must hold to be worth a compile child of its own
MIN_PART_LINES = 120

BUNDLE_MAGIC = b"TADOBJS1"


class _Entity:
    """One top-level entity of the module text: its lines, name, kind and what it names."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        head = lines[0]
        self.name = None
        self.kind = "other"  # declarations, metadata, attribute groups: copied into every part
        self.local = True
        self.cost = 0
        self.level: int | None = None  # (a function's: the optimization level it asks for at most)
        if (m := _DEFINE.match(head)) is not None:
            self.kind, self.name, self.local = "function", m.group(2).strip('"'), m.group(1) is not None
            if (asked := _LEVEL.search(head)) is not None:
                self.level = int(asked.group(1))
            self.cost = max(0, len(lines) - 3)
            if " optnone" in head.split(")")[-1]:  # (code generation alone: a tenth, measured)
                self.cost //= 10
        elif (m := _GLOBAL.match(head)) is not None:
            self.kind, self.name = "global", m.group(1).strip('"')
            self.local = m.group(2) in ("private", "internal") or self.name == USED
        if self.kind == "function":  # (its body, and the vector variant its header names)
            body = "\n".join(lines[1:] + [f'@"{v}"' for v in _VARIANT.findall(head)])
        elif self.kind == "global":
            body = head.split("=", 1)[1]
        else:  # (a declaration names only itself; metadata naming a function keeps the module whole)
            body = "" if head.startswith("declare") else "\n".join(lines)
        self.uses = {a or b for a, b in _NAME.findall(body)} - {self.name}

    def unread(self) -> set[int]:
        """The positions of this function's parameters its body never names (and that may be
        ``poison``: not ``noundef``)."""
        head = self.lines[0]
        start = head.index("(", head.index("@"))
        params = _arguments(head[start + 1:_closing_paren(head, start)])
        named = set(_LOCAL.findall("\n".join(self.lines[1:])))
        return {k for k, p in enumerate(params) if " noundef" not in f" {p}"
                and ((m := _LOCAL.search(p)) is None or m.group(1) not in named)}

    def declaration(self) -> str:
        """``declare`` for this external function, taken from its definition's header."""
        head = self.lines[0]
        close = _closing_paren(head, head.index("(", head.index("@")))
        return "declare " + head[len("define "):close + 1]


def _closing_paren(text: str, start: int) -> int:
    """The position of the parenthesis closing the one at ``start``."""
    depth = 0
    for m in _PAREN.finditer(text, start):
        depth += 1 if m.group() == "(" else -1
        if depth == 0:
            return m.start()
    raise ValueError("unbalanced parameter list")


def _arguments(text: str) -> list[str]:
    """A parameter or argument list cut at its top-level commas."""
    out, depth, start = [], 0, 0
    for m in _DELIMITER.finditer(text):
        if m.group() == "," and depth == 0:
            out.append(text[start:m.start()].strip())
            start = m.end()
        else:
            depth += _DEPTH[m.group()]
    return out + [text[start:].strip()] if text.strip() else out


def _unread_passed_as_poison(lines: list[str], unread: dict[str, set[int]]) -> list[str]:
    """``lines`` with each argument of a call of a function of ``unread`` at a position that
    function never reads passed as ``poison`` (what LLVM's dead-argument elimination does for a
    callee in the same module): its caller loads nothing for it."""
    out = []
    for line in lines:
        m = _CALL.search(line) if "call " in line else None
        dead = unread.get(m.group(1).strip('"')) if m is not None else None
        if dead:
            close = _closing_paren(line, m.end() - 1)
            args = _arguments(line[m.end():close])
            args = [a.split(" ", 1)[0] + " poison" if k in dead and a.split(" ", 1)[0].isalnum() else a
                    for k, a in enumerate(args)]
            line = line[:m.end()] + ", ".join(args) + line[close:]
        out.append(line)
    return out


def _entities(text: str) -> tuple[list[str], list[_Entity]]:
    lines = text.splitlines()
    header, k = [], 0
    while k < len(lines) and not lines[k].startswith(("define", "declare", "@", "!", "attributes")):
        header.append(lines[k])
        k += 1
    out: list[_Entity] = []
    while k < len(lines):
        line = lines[k]
        if not line.strip():
            k += 1
            continue
        if line.startswith("define"):
            end = k
            while end < len(lines) and lines[end] != "}":
                end += 1
            out.append(_Entity(lines[k:end + 1]))
            k = end + 1
        else:
            out.append(_Entity([line]))
            k += 1
    return header, out


def split(text: str, parts: int, opt_level: int = 3) -> list[tuple[str, int]]:
    """Module ``text`` cut into modules, each with the level it is optimized at (see the module
    docstring): at most ``parts`` of each level; ``[(text, opt_level)]`` where cutting does not pay
    or the module is not one this reads."""
    whole = [(text, opt_level)]
    try:
        header, entities = _entities(text)
    except ValueError:
        return whole
    if any(e.kind == "global" and not e.local or e.kind == "other" and e.uses for e in entities):
        return whole  # (a global parts would share, metadata naming a function: kept whole)
    named = {e.name: e for e in entities if e.name is not None}
    roots = [e for e in entities if e.kind == "function" and not e.local]

    def local_uses(name: str) -> list[str]:
        return [n for n in named[name].uses if n in named and named[n].local]

    # the local entities each root reaches
    reach = {r.name: [named[n] for n in walk_along(r.name, local_uses)][1:] for r in roots}
    weight = {r.name: r.cost + sum(d.cost for d in reach[r.name]) for r in roots}
    bins = [(level, b) for level, group in _levels(roots, weight, opt_level).items()
            for b in _balanced(group, weight, parts, sum(weight.values()))]
    if len(bins) < 2:
        return [(text, bins[0][0])] if bins else whole
    shared = [e for e in entities if e.kind == "other"]
    unread: dict[str, set[int]] = {}  # (an external function's, where a part calls it from another)
    out = []
    for level, b in bins:
        own = {r.name for r in b}
        keep = {d.name for r in b for d in reach[r.name]} | own
        called = {n for r in b for e in [r, *reach[r.name]] for n in e.uses}
        body = [e for e in entities if e.name in keep]
        decls = [named[n].declaration() for n in sorted(called)
                 if n in named and named[n].kind == "function" and not named[n].local and n not in own]
        used = _used([n for n in named[USED].uses if n in keep] if USED in named else [])
        for n in called - own - unread.keys():
            if n in named and named[n].kind == "function" and not named[n].local:
                unread[n] = named[n].unread()
        lines = _unread_passed_as_poison([ln for e in body for ln in e.lines],
                                         {n: unread[n] for n in called - own if n in unread})
        out.append(("\n".join(header + decls + lines + [ln for e in shared for ln in e.lines] + used) + "\n",
                    level))
    return out


def _used(names: list[str]) -> list[str]:
    """A part's ``llvm.compiler.used``: the vector variants of the math library it keeps."""
    if not names:
        return []
    items = ", ".join(f'ptr @"{n}"' for n in sorted(names))
    return [f'@"{USED}" = appending global [{len(names)} x ptr] [{items}], section "llvm.metadata"']


def _levels(roots: list[_Entity], weight: dict[str, int], opt_level: int) -> dict[int, list[_Entity]]:
    """The roots by the level each is optimized at: ``opt_level``, or the lower one it asks for where
    the roots asking for it weigh :data:`MIN_PART_LINES` or more."""
    groups: dict[int, list[_Entity]] = {}
    for r in roots:
        groups.setdefault(opt_level if r.level is None else min(r.level, opt_level), []).append(r)
    for level in [v for v in groups if v != opt_level]:
        if sum(weight[r.name] for r in groups[level]) < MIN_PART_LINES:
            groups.setdefault(opt_level, []).extend(groups.pop(level))
    return groups


def _balanced(roots: list[_Entity], weight: dict[str, int], parts: int, total: int) -> list[list[_Entity]]:
    """``roots`` in bins of about equal weight: as many as their share of ``parts`` (by ``total``
    weight), none lighter than :data:`MIN_PART_LINES` on average; empty bins left out."""
    own = sum(weight[r.name] for r in roots)
    count = max(1, min(own // MIN_PART_LINES, -(-parts * own // max(total, 1))))
    bins: list[list[_Entity]] = [[] for _ in range(count)]
    loads = [0] * count
    for r in sorted(roots, key=lambda r: -weight[r.name]):  # (the longest first, to the lightest part)
        k = loads.index(min(loads))
        bins[k].append(r)
        loads[k] += weight[r.name]
    return [b for b in bins if b]


def bundle(objects: list[bytes]) -> bytes:
    """Several object files as one ``bytes`` (one is itself)."""
    if len(objects) == 1:
        return objects[0]
    return BUNDLE_MAGIC + struct.pack("<I", len(objects)) + b"".join(
        struct.pack("<Q", len(o)) + o for o in objects)


def unbundle(data: bytes) -> list[bytes]:
    """The object files of :func:`bundle`'s ``data``; ``ValueError`` for a malformed bundle."""
    if not data.startswith(BUNDLE_MAGIC):
        return [data]
    try:
        (n,) = struct.unpack_from("<I", data, len(BUNDLE_MAGIC))
        at, out = len(BUNDLE_MAGIC) + 4, []
        for _ in range(n):
            (size,) = struct.unpack_from("<Q", data, at)
            out.append(data[at + 8:at + 8 + size])
            at += 8 + size
    except struct.error as e:
        raise ValueError("truncated object bundle") from e
    if at != len(data) or any(len(o) == 0 or o.startswith(BUNDLE_MAGIC) for o in out):
        raise ValueError("malformed object bundle")
    return out


_META = re.compile(r"!([0-9]+)\b")
_SELF = "tensorad_fn_SELF"


def shared_units(text: str) -> tuple[str, dict[str, tuple[str, int | None]]]:
    """Module ``text`` with each function its own code calls that calls none of its functions (a nest,
    not glue) named by its content, and those weighing :data:`MIN_PART_LINES` moved out into units:
    ``(the rest, {name: (unit text, the level it asks for)})``.  A unit is the function, the internal
    functions and private constants it reaches, and the declarations and metadata they name (renumbered
    in order of use), its own names and those of its module's prefix made ``tensorad_fn_<SHA-256 of the
    text>``: nests alike but for their names (a forward's nest that its gradient's kernel runs again,
    twins of one module) are one unit, compiled once (:func:`.jit.engine.compile_kernel`), or one
    function of the rest; calls of a unit pass ``poison`` for what it never reads.  ``(text, {})``
    where the module is not one this reads."""
    try:
        header, entities = _entities(text)
    except ValueError:
        return text, {}
    if any(e.kind == "global" and not e.local or e.kind == "other" and (e.uses or e.lines[0][:1] == "!"
           and not e.lines[0][1:2].isdigit() or e.lines[0].startswith("attributes")) for e in entities):
        return text, {}
    named = {e.name: e for e in entities if e.name is not None}
    meta = {m.group(1): e.lines[0] for e in entities if (m := re.match(r"!([0-9]+) = ", e.lines[0]))}
    prefix = m.group(1) if header and (m := re.match(r'; ModuleID = "([^"]+)"', header[0])) else "\0"
    called = {n for e in entities if e.kind == "function" for n in e.uses}
    reach = {e.name: _reached(e.name, named) for e in entities if e.kind == "function" and not e.local}
    content: dict[str, tuple[str, str]] = {}  # a nest's name -> its content name and unit text
    for r in (named[n] for n in reach if n in called):
        own = [named[n] for n in reach[r.name]]
        uses = {u for e in own for u in e.uses} - {e.name for e in own}
        ids, order = {}, [m.group(1) for e in own for ln in e.lines for m in _META.finditer(ln)]
        while order:
            if (n := order.pop(0)) not in ids:
                ids[n] = str(len(ids))
                order += _META.findall(meta.get(n, ""))
        if any(u in named for u in uses) or any(n not in meta for n in ids):
            continue  # (glue: it calls the module's functions)
        names = {e.name: _SELF + e.name[len(r.name):] if e.name.startswith(r.name) else f"{_SELF}.{k}"
                 for k, e in enumerate(own) if e.name.startswith((r.name, prefix))}
        body = _META.sub(lambda m, ids=ids: "!" + ids[m.group(1)], "\n".join(
            [ln for e in own for ln in e.lines] + [meta[n] for n in ids]))
        decls = sorted(e.lines[0] for e in entities if e.kind == "other" and e.lines[0].startswith("declare")
                       and _NAME.search(e.lines[0])[0].strip('@"') in uses)
        used = _used([n for n in reach[r.name] if USED in named and n in named[USED].uses])
        unit = "\n".join(header[1:] + decls + [_renamed("\n".join([body] + used), names)]) + "\n"
        content[r.name] = ("tensorad_fn_" + hashlib.sha256(unit.encode()).hexdigest()[:24], unit)
    owners: dict[str, set[str]] = {}  # a local entity -> the contents of the functions reaching it
    for n, reached in reach.items():
        for d in reached[1:]:
            owners.setdefault(d, set()).add(content.get(n, (n,))[0])
    calls: dict[str, str] = {}  # a function's name -> the name its calls take
    units: dict[str, tuple[str, int | None]] = {}
    first: dict[str, str] = {}  # a light function's content name -> the first of its twins
    for n, (name, unit) in content.items():  # (weighed by what it alone reaches: shared helpers stay)
        if sum(named[d].cost for d in reach[n] if len(owners.get(d, ())) < 2) >= MIN_PART_LINES:
            units.setdefault(name, (f'; ModuleID = "{name}"\n' + unit.replace(_SELF, name), named[n].level))
            calls[n] = name
        else:  # (a light function: the first of its twins, in the rest)
            calls[n] = first.setdefault(name, n)
    if all(calls[n] == n for n in calls):
        return text, {}
    keep = {n for e in entities if e.kind == "function" and not e.local
            and calls.get(e.name, e.name) == e.name for n in reach[e.name]}
    unread = {calls[n]: named[n].unread() for n in calls if calls[n] in units}
    decls = [named[n].declaration().replace(f'@"{n}"', f'@"{calls[n]}"') for n in dict(
        (calls[n], n) for n in calls if calls[n] in units).values()]
    lines = [ln for e in entities if e.kind == "other" or e.name in keep for ln in e.lines]
    lines = _unread_passed_as_poison(_renamed("\n".join(lines), calls).split("\n"), unread)
    used = _used(sorted(named[USED].uses & keep) if USED in named else [])
    return "\n".join(header + decls + lines + used) + "\n", units


def _reached(root: str, named: dict[str, _Entity]) -> list[str]:
    """``root`` and the internal functions and private constants it reaches, in order of first mention."""
    seen = [root]
    for n in seen:  # (grows while walked)
        e = named[n]
        for u in [a or b for a, b in _NAME.findall("\n".join(e.lines))] + _VARIANT.findall(e.lines[0]):
            if u in named and named[u].local and u not in seen:
                seen.append(u)
    return seen


_MANGLED = re.compile(r'(_ZGV_LLVM_N[0-9]+v+_)([-\w.$]+)\(([-\w.$]+)\)')


def _renamed(text: str, names: dict[str, str]) -> str:
    """``text`` with each global name of ``names`` replaced by its value, where named in a math function's
    vector variant too."""
    text = _NAME.sub(lambda m: f'@"{names[m.group(1) or m.group(2)]}"' if (m.group(1) or m.group(2)) in names
                     else m.group(0), text)
    return _MANGLED.sub(lambda m: f"{m[1]}{names.get(m[2], m[2])}({names.get(m[3], m[3])})", text)


def merge_duplicates(text: str) -> str:
    """Module ``text`` with each set of identical internal functions (see the module
    docstring) defined once; ``text`` itself when it has none or is not one this reads."""
    try:
        header, entities = _entities(text)
    except ValueError:
        return text
    loops = {m.group(1): m.group(2).strip() for e in entities if e.kind == "other"
             if (m := _DISTINCT_NODE.match(e.lines[0])) is not None}
    internal = [e for e in entities if e.kind == "function" and e.local]
    sizes = Counter(len(e.lines) for e in internal)
    first: dict[str, str] = {}  # a function's text, its own name and loop nodes left out -> its name
    merged: dict[str, str] = {}  # a duplicate's name -> the name of the one kept
    for e in internal:
        if sizes[len(e.lines)] < 2:
            continue
        shape = _LOOP_NODE.sub(lambda m: "!llvm.loop !{" + loops.get(m.group(1), m.group(1)) + "}",
                               "\n".join(e.lines).replace(f'@"{e.name}"', "@SELF"))
        kept = first.setdefault(shape, e.name)
        if kept != e.name:
            merged[e.name] = kept
    if not merged:
        return text
    lines = [ln for e in entities if e.name not in merged for ln in e.lines]
    body = _NAME.sub(lambda m: f'@"{merged[m.group(1) or m.group(2)]}"'
                     if (m.group(1) or m.group(2)) in merged else m.group(0), "\n".join(lines))
    return "\n".join(header + [body]) + "\n"
