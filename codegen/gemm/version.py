"""The version of the matrix-product library: a hash of the source its object code depends on.

A library piece's object code (:mod:`.gemm.library`) depends on the target, LLVM and ``gemmlib`` with the
modules it imports, transitively (relative and ``tensorad.*`` imports, under ``TYPE_CHECKING`` and inside
functions too), not the rest of the compiler: keyed by that closure, read once per process, the pieces'
disk entries stay valid across edits of lowering or the optimizer."""

from __future__ import annotations

import hashlib
import os
import re
import sys
from collections.abc import Callable

from tensorad.ir.locks import process_lock


class _Process:
    """The versions computed in this process (root module -> its version), one per root asked for."""

    def __init__(self) -> None:
        self.lock = process_lock()
        self.versions: dict[str, str] = {}


_PROCESS = _Process()

# (a literal first word lets the search skip ahead: ``^`` with re.M tries every position)
_FROM = re.compile(r"from[ \t]+(\.+|(?=tensorad\b))([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#]*)")
_IMPORT = re.compile(r"import[ \t]+(tensorad[\w.]*)")


def _statements(pattern: re.Pattern, text: str) -> list[tuple]:
    """The matches of ``pattern`` that begin a line (after indentation): import statements."""
    return [m.groups() for m in pattern.finditer(text)
            if not text[text.rfind("\n", 0, m.start()) + 1:m.start()].strip(" \t")]


def _path(module: str, memo: dict[str, str | None]) -> str | None:
    if module not in memo:
        memo[module] = _find(module)
    return memo[module]


def _find(module: str) -> str | None:
    """The source file of a ``tensorad`` module (a package's ``__init__.py``) where the import system put
    it, or ``None``."""
    parts = module.split(".")
    if parts[0] != "tensorad":
        return None
    for i in range(len(parts), 0, -1):  # the innermost package this process has imported
        paths = getattr(sys.modules.get(".".join(parts[:i])), "__path__", None)
        if paths:
            base = os.path.join(list(paths)[0], *parts[i:])
            break
    else:
        return None
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None


def _imports(module: str, text: str, is_package: bool, memo: dict[str, str | None]) -> set[str]:
    """The ``tensorad`` modules the source ``text`` of ``module`` uses: for ``from P import a, b`` the
    submodules ``P.a``, ``P.b`` where they are modules, else ``P`` (whose initializer is then followed)."""
    package = module if is_package else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for dots, name, names in _statements(_FROM, text):
        if dots:
            base = package.rsplit(".", len(dots) - 1)[0] if len(dots) > 1 else package
            target = f"{base}.{name}" if name else base
        else:
            target = name
        if not target.startswith("tensorad"):
            continue
        path = _path(target, memo)
        if path is None or not path.endswith("__init__.py"):  # a module: the names are its own
            found.add(target)
            continue
        words = [w for w in (item.split(" as ")[0].strip() for item in names.strip("()").split(","))
                 if w.isidentifier()]
        subs = {f"{target}.{w}" for w in words if _path(f"{target}.{w}", memo)}
        found.update(subs if len(subs) == len(words) else subs | {target})
    found.update(name for (name,) in _statements(_IMPORT, text))
    return {m for m in found if _path(m, memo) is not None}


def closure(root: str, read: Callable[[str], bytes | None] | None = None) -> dict[str, bytes]:
    """The source of ``root`` and of every ``tensorad`` module it imports, transitively (name -> bytes);
    ``read(path)`` gives a file's bytes the caller read already, else ``None``."""
    sources: dict[str, bytes] = {}
    memo: dict[str, str | None] = {}  # module -> its file (or None)
    todo = [root]
    while todo:
        module = todo.pop()
        path = _path(module, memo)
        if module in sources or path is None:
            continue
        text = read(path) if read is not None else None
        if text is None:
            with open(path, "rb") as f:
                text = f.read()
        sources[module] = text
        todo.extend(_imports(module, sources[module].decode(), path.endswith("__init__.py"), memo))
    return sources


def version(root: str = "tensorad.codegen.gemm.library", read: Callable[[str], bytes | None] | None = None
            ) -> str:
    """A hash of the source of ``root``'s import closure (:func:`closure`), computed once per process."""
    v = _PROCESS.versions.get(root)
    if v is None:
        with _PROCESS.lock:
            v = _PROCESS.versions.get(root)
            if v is None:
                h = hashlib.sha256()
                for module, source in sorted(closure(root, read).items()):
                    h.update(module.encode() + b"\0" + source + b"\0")
                v = _PROCESS.versions[root] = h.hexdigest()
    return v


def remember(v: str, root: str = "tensorad.codegen.gemm.library") -> None:
    """Take ``v`` as ``root``'s version in this process (read back with :func:`.jit.engine.source_hash`)."""
    with _PROCESS.lock:
        _PROCESS.versions.setdefault(root, v)
