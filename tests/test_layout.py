"""The package's layout rules, read from its sources.

* No import cycle inside ``sagacity_agents/``. Every import statement counts: at module level,
  under ``if TYPE_CHECKING:`` (a cycle there is a cycle of the design, and the day it is needed at
  run time it breaks) and inside a function. ``from pkg import name`` is an edge to the submodule
  ``pkg.name`` when there is one, else to ``pkg``; an edge to a package is an edge to its
  ``__init__``; the import of a module's parent packages that Python does on the way is not
  counted (every module would otherwise depend on ``sagacity_agents/__init__.py``).
* ``core/`` is the saga core: it imports only itself and ``sagacity_agents.errors``: not the
  Agents SDK (``agents``), a backend, the SDK adapter (``sdk``), the CLI (``cli``), ``stores``,
  ``settings``, nor the package's ``__init__``; and a fresh interpreter that imports every module
  of ``core/`` has not imported ``agents``.
* ``backends/`` implement the core's protocols: they import neither ``sdk`` nor ``agents``.
* No function is over 80 lines but at most three named in ``LONG_FUNCTIONS`` with the reason,
  and none is over 120. A function's lines run from its ``def`` to its last line (decorators
  aside); a nested function counts on its own and inside the one holding it.
* No chain of the package's own classes is deeper than 3: a class, its bases of the package,
  their bases... (bases from elsewhere, ``Protocol`` or ``Generic`` say, end a chain; exception
  classes, whose hierarchies name kinds of failure, are not counted).
* Modules over 800 lines are listed for review (printed, not a failure).

Each failure names every offender: the cycles with the import lines that make them, the
forbidden imports with their file and line, the long functions with their line counts, the deep
chains class by class.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import json
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sagacity_agents"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
"""Every module of the package, by dotted name (a package by its own name: its ``__init__``)."""


@dataclasses.dataclass(frozen=True)
class Import:
    """One module imported by one statement."""

    module: str
    """The importing module."""
    target: str
    """The imported module, absolute: the submodule ``from pkg import name`` names when there
    is one, else ``pkg``."""
    path: Path
    line: int
    where: str
    """Empty at module level, else ``under TYPE_CHECKING`` and/or ``inside a function``."""
    text: str
    """The statement's first source line."""

    def __str__(self) -> str:
        where = f" ({self.where})" if self.where else ""
        return f"{self.path.relative_to(ROOT)}:{self.line}{where}: {self.text}"


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class ImportWalk(ast.NodeVisitor):
    """Every import statement of one module, wherever it stands."""

    def __init__(self, module: str, path: Path, source: str, modules: Iterable[str]) -> None:
        self.module, self.path, self.modules = module, path, set(modules)
        self.lines = source.splitlines()
        self.package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        self.context: list[str] = []
        self.found: list[Import] = []
        self.visit(ast.parse(source, str(path)))

    def within(self, label: str, nodes: Iterable[ast.AST]) -> None:
        self.context.append(label)
        for node in nodes:
            self.visit(node)
        self.context.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        self.within("inside a function", ast.iter_child_nodes(node))

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        if not is_type_checking(node.test):
            self.generic_visit(node)
            return
        self.within("under TYPE_CHECKING", node.body)
        for child in node.orelse:
            self.visit(child)

    def add(self, node: ast.stmt, target: str) -> None:
        where = ", ".join(dict.fromkeys(self.context))
        self.found.append(Import(self.module, target, self.path, node.lineno, where,
                                 self.lines[node.lineno - 1].strip()))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.add(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            parts = self.package.split(".")
            assert node.level <= len(parts), f"{self.path}:{node.lineno} goes above the package"
            base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        targets = (f"{base}.{alias.name}" for alias in node.names)
        for target in dict.fromkeys(t if t in self.modules else base for t in targets):
            self.add(node, target)


def imports_of(module: str) -> list[Import]:
    path = MODULES[module]
    return ImportWalk(module, path, path.read_text(encoding="utf-8"), MODULES).found


IMPORTS: list[Import] = [imp for module in MODULES for imp in imports_of(module)]


def import_graph(imports: Iterable[Import], modules: Iterable[str]) -> dict[str, dict[str, list[Import]]]:
    """module -> imported module of the package -> the statements importing it."""
    graph: dict[str, dict[str, list[Import]]] = {m: {} for m in modules}
    for imp in imports:
        if imp.target in graph and imp.target != imp.module:
            graph[imp.module].setdefault(imp.target, []).append(imp)
    return graph


def strongly_connected(graph: dict[str, dict[str, list[Import]]]) -> list[list[str]]:
    """Tarjan: the strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(components)


def cycles_in(graph: dict[str, dict[str, list[Import]]], component: list[str],
              limit: int = 50) -> list[list[str]]:
    """The elementary cycles through ``component`` (each once, from its smallest module), at
    most ``limit`` of them."""
    found: list[list[str]] = []

    def extend(start: str, path: list[str]) -> None:
        for nxt in sorted(graph[path[-1]]):
            if len(found) >= limit:
                return
            if nxt == start:
                found.append([*path, start])
            elif nxt > start and nxt in component and nxt not in path:
                extend(start, [*path, nxt])

    for start in component:
        extend(start, [start])
    return found


def describe_cycles(graph: dict[str, dict[str, list[Import]]]) -> str:
    """Every cycle, each with the import statements that make it; empty when there is none."""
    out = []
    for component in strongly_connected(graph):
        for cycle in cycles_in(graph, component):
            out.append("  " + " -> ".join(cycle))
            for a, b in zip(cycle, cycle[1:]):
                out.extend(f"      {imp}" for imp in graph[a][b])
    return "\n".join(out)


# --- no cycle ---------------------------------------------------------------------------------


def test_the_import_walk_sees_every_kind_of_import():
    """The walk itself: relative and absolute, ``from pkg import module``, under TYPE_CHECKING,
    inside functions and methods, and a two-module cycle made of such imports is reported with
    its lines."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import chain, entries as e\n"
        "from .journal import Journal\n"
        "import sagacity_agents.errors\n"
        "if TYPE_CHECKING:\n"
        "    from ..sdk import facade\n"
        "else:\n"
        "    from .. import stores\n"
        "class C:\n"
        "    def m(self):\n"
        "        from ..backends.sqlite.journal import SqliteJournal\n"
        "        import agents.testing\n"
    )
    modules = set(MODULES) | {"sagacity_agents.core.example"}
    walk = ImportWalk("sagacity_agents.core.example", PACKAGE / "core" / "example.py", source, modules)
    assert [(i.target, i.line, i.where) for i in walk.found] == [
        ("typing", 1, ""),
        ("sagacity_agents.core.chain", 2, ""),
        ("sagacity_agents.core.entries", 2, ""),
        ("sagacity_agents.core.journal", 3, ""),
        ("sagacity_agents.errors", 4, ""),
        ("sagacity_agents.sdk.facade", 6, "under TYPE_CHECKING"),
        ("sagacity_agents.stores", 8, ""),
        ("sagacity_agents.backends.sqlite.journal", 11, "inside a function"),
        ("agents.testing", 12, "inside a function"),
    ]
    back = ImportWalk("sagacity_agents.core.chain", PACKAGE / "core" / "chain.py",
                      "def f():\n    from .example import X\n", modules)
    graph = import_graph([*walk.found, *back.found], modules)
    assert strongly_connected(graph) == [["sagacity_agents.core.chain", "sagacity_agents.core.example"]]
    assert describe_cycles(graph) == (
        "  sagacity_agents.core.chain -> sagacity_agents.core.example -> sagacity_agents.core.chain\n"
        "      sagacity_agents/core/chain.py:2 (inside a function): from .example import X\n"
        "      sagacity_agents/core/example.py:2: from . import chain, entries as e"
    )


def test_the_walk_covers_the_whole_package():
    assert {"sagacity_agents", "sagacity_agents.core", "sagacity_agents.core.saga",
            "sagacity_agents.backends.sqlite.journal", "sagacity_agents.stores"} <= MODULES.keys()
    graph = import_graph(IMPORTS, MODULES)
    assert "sagacity_agents.backends.sqlite.journal" in graph["sagacity_agents.stores"]
    assert "sagacity_agents.core.journal" in graph["sagacity_agents.stores"]


def test_no_import_cycle_inside_the_package():
    cycles = describe_cycles(import_graph(IMPORTS, MODULES))
    if cycles:
        pytest.fail("import cycles inside sagacity_agents/ (every import counts, also under "
                    f"TYPE_CHECKING and inside functions):\n{cycles}", pytrace=False)


# --- what the core and the backends may import ---------------------------------------------------

CORE_MAY_NOT_IMPORT = {
    "agents": r"agents(\..+)?",
    "sagacity_agents.backends": r"sagacity_agents\.backends(\..+)?",
    "sagacity_agents.sdk": r"sagacity_agents\.sdk(\..+)?",
    "sagacity_agents.cli": r"sagacity_agents\.cli(\..+)?",
    "sagacity_agents.stores": r"sagacity_agents\.stores(\..+)?",
    "sagacity_agents.settings": r"sagacity_agents\.settings(\..+)?",
    "web frameworks": r"(fastapi|starlette|uvicorn|jinja2|itsdangerous)(\..+)?",
    "sagacity_agents.web": r"sagacity_agents\.web(\..+)?",
    # Anything else of the package but the core and the errors: its __init__ (which loads the
    # backends, and the SDK on first use), the demo, the rendering, the test helpers.
    "sagacity_agents outside core/ and errors": r"sagacity_agents(?!\.core(\.|$)|\.errors$)(\..+)?",
}
BACKENDS_MAY_NOT_IMPORT = {
    "agents": CORE_MAY_NOT_IMPORT["agents"],
    "sagacity_agents.sdk": CORE_MAY_NOT_IMPORT["sagacity_agents.sdk"],
    "web frameworks": CORE_MAY_NOT_IMPORT["web frameworks"],
    "sagacity_agents.web": CORE_MAY_NOT_IMPORT["sagacity_agents.web"],
}


def forbidden_imports(folder: str, rules: dict[str, str]) -> str:
    """The imports of the modules under ``sagacity_agents/<folder>/`` that a rule forbids, one a
    line with the rule it breaks; empty when there is none."""
    prefix = f"sagacity_agents.{folder}"
    return "\n".join(
        f"  {imp}   [{label}]"
        for imp in IMPORTS
        if imp.module == prefix or imp.module.startswith(prefix + ".")
        for label, pattern in rules.items()
        if re.fullmatch(pattern, imp.target)
    )


def test_the_rules_match_what_they_name():
    core, backends = CORE_MAY_NOT_IMPORT.values(), BACKENDS_MAY_NOT_IMPORT.values()
    for target in ("agents", "agents.testing", "sagacity_agents.backends", "sagacity_agents.sdk.facade",
                   "sagacity_agents.cli", "sagacity_agents.cli.saga", "sagacity_agents.stores",
                   "sagacity_agents.settings"):
        assert any(re.fullmatch(p, target) for p in core), target
    for target in ("sagacity_agents", "sagacity_agents.render", "sagacity_agents.demo.run",
                   "sagacity_agents.testing", "sagacity_agents.sdkx"):
        assert any(re.fullmatch(p, target) for p in core), target
    for target in ("sagacity_agents.core", "sagacity_agents.core.saga", "sagacity_agents.core.saga.calls",
                   "sagacity_agents.errors", "magents", "typing"):
        assert not any(re.fullmatch(p, target) for p in core), target
    assert [t for t in ("agents.run", "sagacity_agents.sdk", "sagacity_agents.core.journal",
                        "sagacity_agents.backends.sqlite.setup")
            if any(re.fullmatch(p, t) for p in backends)] == ["agents.run", "sagacity_agents.sdk"]


def test_the_core_imports_no_sdk_backend_cli_stores_or_settings():
    bad = forbidden_imports("core", CORE_MAY_NOT_IMPORT)
    if bad:
        pytest.fail(f"sagacity_agents/core/ imports what the core may not:\n{bad}", pytrace=False)


def test_the_backends_import_neither_the_sdk_adapter_nor_agents():
    bad = forbidden_imports("backends", BACKENDS_MAY_NOT_IMPORT)
    if bad:
        pytest.fail(f"sagacity_agents/backends/ imports what a backend may not:\n{bad}", pytrace=False)


def test_every_core_module_imports_without_the_agents_sdk():
    """A fresh interpreter imports every module of core/ (found by walking the folder), one by
    one: ``agents`` must not be in ``sys.modules`` after any of them."""
    core = sorted(m for m in MODULES if m == "sagacity_agents.core" or m.startswith("sagacity_agents.core."))
    assert len(core) > 10, core
    code = (
        "import importlib, json, sys\n"
        "for name in json.loads(sys.argv[1]):\n"
        "    importlib.import_module(name)\n"
        "    if 'agents' in sys.modules:\n"
        "        print(json.dumps({'after': name, 'agents': sorted(m for m in sys.modules\n"
        "                          if m == 'agents' or m.startswith('agents.'))[:10]}))\n"
        "        break\n"
        "else:\n"
        "    print(json.dumps({'imported': len(json.loads(sys.argv[1]))}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, json.dumps(core)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"imported": len(core)}, (
        f"importing the core loaded the Agents SDK: {done.stdout}"
    )


# --- size ---------------------------------------------------------------------------------------

MAX_FUNCTION_LINES = 80
"""Longest function without a reason named in ``LONG_FUNCTIONS``."""
HARD_MAX_FUNCTION_LINES = 120
"""Longest function, whatever the reason."""
LONG_FUNCTIONS: dict[str, str] = {
    "sagacity_agents/backends/sqlite/journal.py::SqliteJournal._write_group_locked":
        "one SQLite group commit under its lock, read top to bottom: the lease check, each "
        "entry's insert or refusal, the commit and its fsync, and whom each failure fails; "
        "split, the order of those steps (the point of the function) is lost between parts",
}
"""``path::qualified name`` -> why it is longer than ``MAX_FUNCTION_LINES`` (at most three)."""
MAX_CLASS_CHAIN = 3
"""Deepest chain of the package's own non-exception classes."""
REVIEW_MODULE_LINES = 800
"""Modules longer than this are listed for review."""


@dataclasses.dataclass(frozen=True)
class Function:
    """One function or method, with its length in lines."""

    key: str
    """``path::qualified name`` (a method ``Class.method``, a nested function
    ``outer.<locals>.inner``), the path relative to the checkout."""
    lines: int


def functions_of(path: Path, source: str) -> list[Function]:
    """Every function defined in ``source`` (at any depth), with its length: from its ``def``
    line to its last line."""
    found: list[Function] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                found.append(Function(f"{path.relative_to(ROOT)}::{name}",
                                      (child.end_lineno or child.lineno) - child.lineno + 1))
                walk(child, name + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")
            else:
                walk(child, prefix)

    walk(ast.parse(source, str(path)), "")
    return found


def package_functions() -> list[Function]:
    return [f for path in MODULES.values() for f in functions_of(path, path.read_text(encoding="utf-8"))]


def long_functions(functions: Iterable[Function], over: int) -> list[Function]:
    return sorted((f for f in functions if f.lines > over), key=lambda f: (-f.lines, f.key))


@dataclasses.dataclass(frozen=True)
class ClassDef:
    """One class of the package and the names of its bases."""

    name: str
    module: str
    bases: tuple[str, ...]
    """Each base's last name (``Base`` for ``mod.Base`` and ``Base[T]``)."""


def classes_of(module: str, source: str) -> list[ClassDef]:
    def base_name(node: ast.expr) -> str:
        if isinstance(node, ast.Subscript):
            node = node.value
        if isinstance(node, ast.Attribute):
            return node.attr
        return node.id if isinstance(node, ast.Name) else ""

    return [ClassDef(n.name, module, tuple(base_name(b) for b in n.bases))
            for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)]


def _foreign_exception(name: str) -> bool:
    """A base from outside the package that is an exception class (by the builtins, or by
    the names libraries give them)."""
    found = getattr(builtins, name, None)
    if isinstance(found, type) and issubclass(found, BaseException):
        return True
    return name.endswith(("Error", "Exception", "Warning"))


class ClassChains:
    """The package's classes and their chains. A base is looked up in the class's own module
    first, else among every class of the package with that name (the deepest counts); a base
    not in the package ends the chain."""

    def __init__(self, classes: Iterable[ClassDef]) -> None:
        self.by_name: dict[str, list[ClassDef]] = {}
        for c in classes:
            self.by_name.setdefault(c.name, []).append(c)

    def bases_of(self, c: ClassDef) -> list[ClassDef]:
        out = []
        for base in c.bases:
            found = self.by_name.get(base, [])
            same = [b for b in found if b.module == c.module and b is not c]
            out.extend(same or [b for b in found if b is not c])
        return out

    def is_exception(self, c: ClassDef, seen: frozenset[int] = frozenset()) -> bool:
        if id(c) in seen:
            return False
        own = self.bases_of(c)
        own_names = {b.name for b in own}
        return any(_foreign_exception(b) for b in c.bases if b not in own_names) or any(
            self.is_exception(b, seen | {id(c)}) for b in own)

    def chain(self, c: ClassDef, seen: frozenset[int] = frozenset()) -> list[ClassDef]:
        """The longest chain from ``c`` down its bases of the package, ``c`` first."""
        if id(c) in seen:
            return []
        below = [self.chain(b, seen | {id(c)}) for b in self.bases_of(c)]
        return [c, *max(below, key=len, default=[])]

    def deep(self, limit: int) -> list[list[ClassDef]]:
        """The chains of non-exception classes longer than ``limit``, deepest first."""
        chains = [self.chain(c) for found in self.by_name.values() for c in found
                  if not self.is_exception(c)]
        return sorted((ch for ch in chains if len(ch) > limit),
                      key=lambda ch: (-len(ch), ch[0].module, ch[0].name))


def package_classes() -> ClassChains:
    return ClassChains(c for module, path in MODULES.items()
                       for c in classes_of(module, path.read_text(encoding="utf-8")))


def test_the_size_measures_read_what_they_name():
    """The measures themselves: qualified names and lengths of functions, methods and nested
    functions; class chains through the package's own bases only, exception classes aside."""
    source = (
        "import typing\n"
        "class A(typing.Protocol):\n"
        "    def one(self):\n"
        "        pass\n"
        "class B(A):\n"
        "    async def two(self):\n"
        "        def inner():\n"
        "            return 1\n"
        "        return inner\n"
        "class C(B, typing.Generic[T]):\n"
        "    pass\n"
        "class D(C):\n"
        "    pass\n"
        "class Failed(ValueError):\n"
        "    pass\n"
        "class Worse(Failed):\n"
        "    pass\n"
        "class Worst(Worse):\n"
        "    pass\n"
        "def top():\n"
        "    return 2\n"
    )
    path = PACKAGE / "core" / "example.py"
    assert [(f.key.split("::")[1], f.lines) for f in functions_of(path, source)] == [
        ("A.one", 2), ("B.two", 4), ("B.two.<locals>.inner", 2), ("top", 2)]
    assert functions_of(path, source)[0].key == "sagacity_agents/core/example.py::A.one"
    assert [f.key.split("::")[1] for f in long_functions(functions_of(path, source), 2)] == ["B.two"]
    chains = ClassChains(classes_of("sagacity_agents.core.example", source))
    assert [[c.name for c in ch] for ch in chains.deep(3)] == [["D", "C", "B", "A"]]
    assert [[c.name for c in ch] for ch in chains.deep(2)] == [["D", "C", "B", "A"], ["C", "B", "A"]]
    assert {c.name for found in chains.by_name.values() for c in found
            if chains.is_exception(c)} == {"Failed", "Worse", "Worst"}


def test_no_function_is_over_120_lines():
    functions = package_functions()
    assert len(functions) > 500 and max(f.lines for f in functions) > 40  # the files were read
    over = long_functions(functions, HARD_MAX_FUNCTION_LINES)
    if over:
        pytest.fail(f"functions over {HARD_MAX_FUNCTION_LINES} lines (no reason allows it):\n"
                    + "\n".join(f"  {f.key}: {f.lines} lines" for f in over), pytrace=False)


def test_no_function_is_over_80_lines_but_the_named_ones():
    """At most three functions may be over ``MAX_FUNCTION_LINES``, each named in
    ``LONG_FUNCTIONS`` with the reason; a name there that is no longer over it is stale."""
    assert len(LONG_FUNCTIONS) <= 3, "at most three functions may be named as long"
    long = long_functions(package_functions(), MAX_FUNCTION_LINES)
    unnamed = [f for f in long if f.key not in LONG_FUNCTIONS]
    stale = sorted(set(LONG_FUNCTIONS) - {f.key for f in long})
    problems = [f"  {f.key}: {f.lines} lines" for f in unnamed]
    problems += [f"  {key}: named in LONG_FUNCTIONS but not over {MAX_FUNCTION_LINES} lines (or gone)"
                 for key in stale]
    if problems:
        pytest.fail(f"functions over {MAX_FUNCTION_LINES} lines not named in LONG_FUNCTIONS with "
                    "a reason (split them into parts that read as the design), and stale names:\n"
                    + "\n".join(problems), pytrace=False)


def test_no_class_chain_is_deeper_than_3():
    chains = package_classes()
    assert len(chains.by_name) > 50  # the files were read
    deep = chains.deep(MAX_CLASS_CHAIN)
    if deep:
        pytest.fail(f"chains of the package's own classes deeper than {MAX_CLASS_CHAIN} (compose "
                    "parts instead of stacking subclasses):\n" + "\n".join(
                        "  " + " -> ".join(f"{c.name} ({c.module})" for c in ch) for ch in deep),
                    pytrace=False)


def test_modules_over_800_lines_are_listed_for_review():
    """Not a rule: a module over ``REVIEW_MODULE_LINES`` lines is printed for a reviewer to
    decide whether it holds more than one concept (shown with ``pytest -rP`` or ``-s``)."""
    sizes = {path: len(path.read_text(encoding="utf-8").splitlines()) for path in MODULES.values()}
    assert len(sizes) > 40 and max(sizes.values()) > 100  # the files were read
    long = sorted(((n, p) for p, n in sizes.items() if n > REVIEW_MODULE_LINES),
                  key=lambda np: (-np[0], np[1]))
    print(f"modules over {REVIEW_MODULE_LINES} lines, for review: "
          + (", ".join(f"{p.relative_to(ROOT)} ({n})" for n, p in long) or "none"))
