"""Project-shape checks: packaging matches the folders, and imports only point one way."""

from __future__ import annotations

import ast
import fcntl
import hashlib
import importlib
import json
import os
import pathlib
import re
import tempfile
import tomllib
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Folder on disk -> installed package name.
FOLDERS = {"tensorad": "tensorad", "simplify": "tensorad.simplify", "codegen": "tensorad.codegen"}

# Layers from the bottom up; a module may import only from its own layer or below.
LAYERS = [
    {"tensorad.ir"},
    {"tensorad.poly", "tensorad.lang", "tensorad.reference", "tensorad.autodiff", "tensorad.topi"},
    {"tensorad.simplify"},
    {"tensorad.codegen"},
    {"tensorad", "tensorad.cli", "tensorad.training", "tensorad.bridges"},
]


def _core_paths() -> list[pathlib.Path]:
    return [path for folder in FOLDERS for path in sorted((ROOT / folder).rglob("*.py"))]


@pytest.fixture(scope="module")
def facts() -> dict:
    """What the checks of this file read from the parsed modules of the three folders (see
    :func:`_facts`), parsed once in a run of the suite: kept in the run's cache directory
    (tests/conftest.py) under the folders' text, where pytest-xdist's other worker and each new setup
    of this module's fixtures read them (parsing takes seconds, reading them milliseconds)."""
    paths = _core_paths()
    key = hashlib.sha256(pathlib.Path(__file__).read_bytes())
    for path in paths:
        key.update(f"{path.relative_to(ROOT)}\0".encode() + path.read_bytes() + b"\0")
    folder = pathlib.Path(os.environ.get("TENSORAD_TEST_RUN_CACHE") or tempfile.gettempdir())
    entry = folder / f"architecture-{key.hexdigest()}.json"
    with open(folder / "architecture.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other worker waits for this one's parse
        if not entry.exists():
            found = _facts({path: ast.parse(path.read_text()) for path in paths})
            tmp = entry.with_suffix(f".{os.getpid()}")
            tmp.write_text(json.dumps(found))
            os.replace(tmp, entry)
        return json.loads(entry.read_text())


def _facts(trees: dict[pathlib.Path, ast.Module]) -> dict:
    """``imports``: each module's imports of tensorad (:func:`_imports`) by its name; ``graph``
    and ``private``: :func:`_module_graph`'s; ``tables``: :func:`_tables_filled_at_run_time`'s."""
    graph, private = _module_graph(trees)
    return {"imports": {_module_name(path)[0]: _imports(tree, path, _module_name(path)[0])
                        for path, tree in trees.items()},
            "graph": {module: sorted(targets) for module, targets in graph.items()},
            "private": private, "tables": _tables_filled_at_run_time(trees)}


def _layer(package: str) -> int:
    for depth, names in enumerate(LAYERS):
        if package in names:
            return depth
    raise AssertionError(f"package {package} is not placed in a layer of test_architecture.py")


def _python_packages() -> dict[str, pathlib.Path]:
    found = {}
    for folder, pkg in FOLDERS.items():
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            rel = init.parent.relative_to(ROOT / folder).parts
            found[".".join((pkg,) + rel)] = init.parent
    return found


def test_pyproject_lists_every_package():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    assert listed == set(_python_packages()), "pyproject's packages list differs from the folders"


def _module_name(path: pathlib.Path) -> tuple[str, str]:
    for folder, pkg in FOLDERS.items():
        base = ROOT / folder
        if base in path.parents:
            parts = path.relative_to(base).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            return ".".join((pkg,) + parts), pkg
    raise AssertionError(path)


def _owner(module: str) -> str:
    """The layered package a module belongs to (tensorad.ir.expr -> tensorad.ir)."""
    best = ""
    for names in LAYERS:
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > len(best):
                best = name
    return best


def _imports(tree: ast.Module, path: pathlib.Path, module: str) -> list[str]:
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_pkg else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
                if node.module is None:
                    out += [f"{target}.{a.name}" for a in node.names]
                else:
                    out.append(target)
            else:
                out.append(node.module)
    return [m for m in out if m and m.split(".")[0] == "tensorad"]


def test_imports_point_one_way(facts):
    bad = []
    for module, targets in facts["imports"].items():
        here = _owner(module)
        for target in targets:
            there = _owner(target)
            if there and here and there != here and _layer(there) > _layer(here):
                bad.append(f"{module} imports {target}")
            if target == "tensorad" and _layer(here) != len(LAYERS) - 1:
                bad.append(f"{module} imports the package root")
    assert not bad, "backward imports:\n" + "\n".join(bad)


MAX_MODULES = 15  # modules (and subpackages) in one folder


def _package_members(folder: pathlib.Path) -> list[str]:
    modules = [p.stem for p in folder.glob("*.py") if p.name != "__init__.py"]
    subpackages = [p.parent.name for p in folder.glob("*/__init__.py")]
    return sorted(modules + subpackages)


def test_no_folder_holds_more_than_fifteen_modules():
    crowded = {pkg: len(_package_members(folder)) for pkg, folder in _python_packages().items()
               if len(_package_members(folder)) > MAX_MODULES}
    assert not crowded, f"folders over {MAX_MODULES} modules: {crowded}"


def test_no_facade_name_hides_a_module():
    """``import tensorad.X as m`` gives the module ``X``: the facade binds no other object to the name
    of one of its modules (a function ``ta.evaluate`` beside a package ``evaluate/`` hides the package)."""
    facade = vars(importlib.import_module("tensorad"))
    hidden = [name for name in _package_members(ROOT / "tensorad")
              if not isinstance(facade.get(name, types), types.ModuleType)]
    assert not hidden, f"facade names that hide a module of tensorad: {hidden}"


#: the core's line budget is about 33,700; until it is met the ceiling only falls, so a change that adds
#: a capability deletes what it makes redundant (lower this number when the core shrinks)
CORE_LINE_CEILING = 40_282


def test_the_core_does_not_grow_past_its_ceiling():
    lines = sum(len(path.read_text().splitlines()) for path in _core_paths())
    assert lines <= CORE_LINE_CEILING, (
        f"tensorad + simplify + codegen hold {lines} lines, over the ceiling of {CORE_LINE_CEILING}: "
        "delete what the change makes redundant")


def test_every_module_is_named_in_its_package_docstring():
    unnamed = []
    for pkg, folder in _python_packages().items():
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
        for name in _package_members(folder):
            if not re.search(rf"(``|:mod:`\.?){name}(/|``|`)", doc):
                unnamed.append(f"{pkg}.{name}")
    assert not unnamed, "modules the package docstring does not name:\n" + "\n".join(unnamed)


def _module_graph(trees: dict[pathlib.Path, ast.Module]) -> tuple[dict[str, set[str]], list[str]]:
    """Every module's imports of other tensorad modules, function-level and ``TYPE_CHECKING``
    ones included (``from P import m`` of a submodule ``m`` is an import of ``P.m``), and the
    private names imported across modules."""
    paths = {_module_name(path)[0]: path for path in trees}
    graph, private = {}, []
    for module, path in paths.items():
        is_pkg = path.name == "__init__.py"
        graph[module] = set()
        for node in ast.walk(trees[path]):
            if isinstance(node, ast.Import):
                graph[module] |= {a.name for a in node.names if a.name in paths}
            elif isinstance(node, ast.ImportFrom):
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                if node.level:
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for a in node.names:
                    if f"{target}.{a.name}" in paths:
                        graph[module].add(f"{target}.{a.name}")
                    elif target in paths:
                        graph[module].add(target)
                        if a.name.startswith("_") and not a.name.startswith("__"):
                            private.append(f"{module} imports {target}.{a.name}")
    return graph, private


def test_no_import_cycle_counting_function_level_imports(facts):
    graph = facts["graph"]
    cycles = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_private_name_is_imported_across_modules(facts):
    private = facts["private"]
    assert not private, "\n".join(private)


MUTATORS = {"clear", "update", "add", "setdefault", "append", "pop", "popitem", "extend", "discard",
            "remove", "move_to_end", "intern"}


def test_no_module_level_tables_in_the_compiler(facts):
    """No module of the optimizer, autodiff or the code generator fills a module-level container
    or rebinds a module-level name at run time (constant tables such as ``NZ_RULES`` are read
    only), and none uses ``functools`` caches: what is kept lives in an object with an owner --
    the call (``OptimizerContext``), a node or a combiner, a kernel, a bounded cache, or, for
    what a process makes once (the JIT's engine, its target machines), a documented per-process
    object."""
    found = facts["tables"]
    assert found == [], f"module-level tables filled at run time: {found}"


def _tables_filled_at_run_time(trees: dict[pathlib.Path, ast.Module]) -> list[str]:
    """Where a module of ``simplify``, ``codegen`` or ``tensorad/autodiff`` fills or rebinds a
    module-level name in a function, or caches a function (see the test above)."""
    found = []
    for path in sorted(p for folder in ("simplify", "codegen", "tensorad/autodiff")
                       for p in (ROOT / folder).rglob("*.py")):
        tree = trees[path]
        module_names = {t.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                        if isinstance(t, ast.Name)}
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.Lambda)):
                continue
            for dec in getattr(fn, "decorator_list", []):
                if "cache" in ast.unparse(dec) and ast.unparse(dec) != "cached_property":  # (per object)
                    found.append(f"{path.relative_to(ROOT)}:{fn.lineno} cached function")
            for n in ast.walk(fn):
                if isinstance(n, ast.Global):
                    found.append(f"{path.relative_to(ROOT)}:{n.lineno} global {n.names}")
                target = None
                if isinstance(n, (ast.Assign, ast.AugAssign)):
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                        if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                            target = t.value.id
                elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) \
                        and isinstance(n.func.value, ast.Name) and n.func.attr in MUTATORS:
                    target = n.func.value.id
                if target in module_names and not _local(fn, target):
                    found.append(f"{path.relative_to(ROOT)}:{n.lineno} mutates {target}")
    return found


def _local(fn, name: str) -> bool:
    """Whether ``name`` is a parameter or assigned inside ``fn`` (shadowing a module name)."""
    args = fn.args
    params = {a.arg for a in args.args + args.kwonlyargs + args.posonlyargs}
    if name in params:
        return True
    return any(isinstance(t, ast.Name) and t.id == name
               for n in ast.walk(fn) if isinstance(n, ast.Assign) for t in n.targets)
