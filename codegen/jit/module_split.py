"""A kernel's module cut into modules that LLVM compiles side by side, their object code kept together.

Each loop nest of a module is an external ``noinline`` function, its helpers internal functions, so the
module can be cut between nests, as LLVM's parallel code generation cuts one for LTO.  :func:`split` moves
each nest worth a compile child (:data:`MIN_PART_LINES`) or marked for a lower level
(:func:`.llvm.ir_loops.at_most_level`) into a unit named by its content (nests alike but for their names
are one unit, compiled once): the nest and a copy of every internal function and private constant it
reaches (a math function's vector form in the unit's own ``llvm.compiler.used``); the rest declares the
units it calls.  A module with a global not private to it stays whole.  :func:`bundle` keeps the
object code as one ``bytes``; :func:`merge_duplicates` first keeps one of each set of internal functions
alike but for their names and their loops' own metadata nodes."""

from __future__ import annotations

import hashlib
import re
import struct
from collections import Counter

from ..llvm.ir_loops import OPT_LEVEL_ATTRIBUTE

_NAME = re.compile(r'@"([^"]+)"|@([-\w.$]+)')
_LOOP_NODE = re.compile(r'!llvm\.loop (![0-9]+)')
_DISTINCT_NODE = re.compile(r'^(![0-9]+) = distinct !\{\s*\1\s*,?(.*)\}\s*$')
_DEFINE = re.compile(r'^define\s+(?:(internal|private)\s+)?.*?@("[^"]+"|[-\w.$]+)\(')
_GLOBAL = re.compile(r'^@("[^"]+"|[-\w.$]+)\s*=\s*(\w+)')
_LEVEL = re.compile(f'"{OPT_LEVEL_ATTRIBUTE}"="([0-3])"')
_PAREN = re.compile(r"[()]")
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


def split(text: str, opt_level: int = 3) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """Module ``text`` cut (see the module docstring): ``([the rest], the units)``, each module with the
    level it is optimized at; the module whole, ``([(text, opt_level)], [])``, where it has no unit, is not
    one this reads or has a global its parts would share, attribute groups or named metadata."""
    whole: tuple[list[tuple[str, int]], list[tuple[str, int]]] = ([(text, opt_level)], [])
    try:
        header, entities = _entities(text)
    except ValueError:
        return whole
    if any(e.kind == "global" and not e.local or e.kind == "other" and (e.uses or e.lines[0][0] in "!a"
           and not e.lines[0][1:2].isdigit()) for e in entities):
        return whole  # (a global parts would share, metadata naming a function, attribute groups: kept whole)
    named = {e.name: e for e in entities if e.name is not None}
    reach = {e.name: [named[n] for n in _reached(e.name, named)] for e in entities
             if e.kind == "function" and not e.local}  # (each external function and what it reaches)
    calls, units = _units(header, entities, named, reach)
    if not calls:
        return whole
    keep = {d.name for n in reach if calls.get(n, n) == n for d in reach[n]}
    origin = {calls.get(n, n): n for n in reach}  # (a name calls take -> a function of that text)
    called = sorted({calls.get(u, u) for n in keep for u in named[n].uses} & origin.keys() - keep)
    lines = [_renamed("\n".join(ln for e in entities if e.name in keep for ln in e.lines), calls)]
    decls = [named[origin[n]].declaration().replace(f'@"{origin[n]}"', f'@"{n}"') for n in called]
    used = _used([n for n in named[USED].uses if n in keep] if USED in named else [])
    shared = [ln for e in entities if e.kind == "other" for ln in e.lines]
    return ([("\n".join(header + decls + lines + shared + used) + "\n", opt_level)],
            [(t, min(opt_level, 3 if v is None else v)) for t, v in units.values()])


def modules(text: str, opt_level: int = 3) -> list[tuple[str, int]]:
    """Every module :func:`split` cuts ``text`` into, the rest first, each with its level."""
    return [m for part in split(text, opt_level) for m in part]


def _used(names: list[str]) -> list[str]:
    """A part's ``llvm.compiler.used``: the vector variants of the math library it keeps."""
    if not names:
        return []
    items = ", ".join(f'ptr @"{n}"' for n in sorted(names))
    return [f'@"{USED}" = appending global [{len(names)} x ptr] [{items}], section "llvm.metadata"']


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


def _units(header: list[str], entities: list[_Entity], named: dict[str, _Entity],
           reach: dict[str, list[_Entity]]) -> tuple[dict[str, str], dict[str, tuple[str, int | None]]]:
    """The nests (functions the module calls that call none of its functions) named by their content, those
    weighing :data:`MIN_PART_LINES` alone or asking for a level moved into units: ``({a nest: the name its
    calls take}, {a unit's name: (its text, the level it asks for)})``.  A unit is the nest, what it
    reaches, the declarations and metadata (renumbered) these name, its names and its module's prefix made
    ``tensorad_fn_<SHA-256 of the text>`` (twins are one unit)."""
    meta = {m.group(1): e.lines[0] for e in entities if (m := re.match(r"!([0-9]+) = ", e.lines[0]))}
    prefix = m.group(1) if header and (m := re.match(r'; ModuleID = "([^"]+)"', header[0])) else "\0"
    called = {n for e in entities if e.kind == "function" for n in e.uses}
    content: dict[str, tuple[str, str]] = {}  # a nest's name -> its content name and unit text
    for r in (named[n] for n in reach if n in called):
        own = reach[r.name]
        uses = {u for e in own for u in e.uses} - {e.name for e in own}
        ids, order = {}, [m.group(1) for e in own for ln in e.lines for m in _META.finditer(ln)]
        while order:
            if (n := order.pop(0)) not in ids:
                ids[n] = str(len(ids))
                order += _META.findall(meta.get(n, ""))
        if any(u in named for u in uses) or any(n not in meta for n in ids):
            continue  # (glue: it calls the module's functions)
        names = {e.name: _SELF + (e.name[len(r.name):] if e.name.startswith(r.name)
                                  else f".{k}{e.name[len(prefix):]}")  # (+ its name past the prefix)
                 for k, e in enumerate(own) if e.name.startswith((r.name, prefix))}
        body = _META.sub(lambda m, ids=ids: "!" + ids[m.group(1)], "\n".join(
            [ln for e in own for ln in e.lines] + [meta[n] for n in ids]))
        decls = sorted(e.lines[0] for e in entities if e.kind == "other" and e.lines[0].startswith("declare")
                       and _NAME.search(e.lines[0])[0].strip('@"') in uses)
        used = _used([e.name for e in own if USED in named and e.name in named[USED].uses])
        unit = "\n".join(header[1:] + decls + [_renamed("\n".join([body] + used), names)]) + "\n"
        content[r.name] = ("tensorad_fn_" + hashlib.sha256(unit.encode()).hexdigest()[:24], unit)
    owners = Counter(d for d, _ in {(d.name, content.get(n, (n,))[0]) for n in reach for d in reach[n][1:]})
    calls: dict[str, str] = {}
    units: dict[str, tuple[str, int | None]] = {}
    for n, (name, unit) in content.items():  # (weighed by what it alone reaches: shared helpers stay)
        if named[n].level is not None or sum(
                d.cost for d in reach[n] if owners[d.name] < 2) >= MIN_PART_LINES:
            units.setdefault(name, (f'; ModuleID = "{name}"\n' + unit.replace(_SELF, name), named[n].level))
            calls[n] = name
    return calls, units


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
    return "\n".join(header + [_renamed("\n".join(lines), merged)]) + "\n"
