"""The public surface: the front door's twenty names and the second doors (sorted ``__all__``,
every name importable and documented in docs/api.md), one exception root with every exception in
``sagacity_agents.errors``, the names that left the top level still importable with a
DeprecationWarning, examples and the README importing only through the doors, and the core and the
doors importable without the Agents SDK."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import sagacity_agents
from sagacity_agents import errors

ROOT = Path(__file__).resolve().parents[1]

FRONT_DOOR = sorted("""
    Sagacity SagaRunHooks SagaResult SagaStatus FailurePolicy Verdict compensable irreversible
    read_only no_undo protect_tool protect_mcp_server CompensationContext record_undo_data
    current_idempotency_key idempotency_key nested_agent_tool wait_for_decision Decision
    SagacityError
""".split())
"""The front door, as the issue lists it."""

SECOND_DOORS = {
    "sagacity_agents.approvals": ["ApprovalRequest", "Decision", "args_hash", "wait_for_decision"],
    "sagacity_agents.backends": [
        "ApprovalStore", "CheckpointStore", "DirectoryCheckpointStore", "InMemoryApprovalStore",
        "InMemoryJournal", "Journal", "JournalEntry", "Phase", "PostgresApprovalStore",
        "PostgresCheckpointStore", "PostgresDatabase", "PostgresJournal", "SqliteApprovalStore",
        "SqliteJournal",
    ],
    "sagacity_agents.errors": [
        "ApprovalError", "CallContextLostError", "ClaimTakenError", "ConfigurationError", "DataErasedError",
        "DataKeyError", "DeclarationError",
        "EncodingError", "EvidenceError", "HooksNotEnteredError", "JournalClosedError",
        "JournalConflictError", "JournalError", "JournalWriteError", "LeaseLostError",
        "McpServerMissingError", "RunLeaseLostError", "RunStalledError", "SagaFailedError", "SagaRecovered",
        "SagaStateError", "SagaStopped", "SagacityError", "SensitiveTraceWarning", "SignatureError", "StreamAbandoned",
        "describe_error",
    ],
    "sagacity_agents.evidence": [
        "ChainFault", "ChainHead", "Checkpoint", "Evidence", "KeyRoles", "Keyring", "Role",
        "VerifyResult", "grant_roles", "heads_from_json", "heads_of", "heads_to_json",
        "journal_key_roles", "revoke_key", "verify_entries", "verify_journal",
    ],
    "sagacity_agents.guardrails": ["SagaVerdict", "saga_output_guardrail", "saga_tool_guardrail"],
    "sagacity_agents.sensitive": [
        "DEFAULT_NAMES", "DataKeys", "MasterKey", "Sensitivity", "masked", "reveal_saga",
    ],
    "sagacity_agents.saga": [
        "CheckContext", "CheckResult", "CompensationItem", "CompensationReport", "FailureRecord", "McpPolicy", "Recovered",
        "Recovery", "Reversibility", "Saga", "SagaRecovered", "SagaStream", "ToolDeclaration", "call_idempotency_key",
        "carry_context", "compensate", "saga_trace",
    ],
}
"""The doors this change made, name by name (``testing``, ``web`` and ``otel`` are as before)."""

DOORS = ["sagacity_agents", *SECOND_DOORS, "sagacity_agents.testing", "sagacity_agents.web",
         "sagacity_agents.otel"]
"""Every documented door (docs/api.md): where examples and the README may import from."""

DEMO = ["sagacity_agents.demo", "sagacity_agents.demo.trip", "sagacity_agents.demo.booking"]
"""The demo's source, shipped for ``sagacity demo``; documented (docs/api.md) as what
``examples/trip_booking`` shows, not as an API."""

TOP_LEVEL_BEFORE = sorted({*FRONT_DOOR, *(n for names in SECOND_DOORS.values() for n in names)}
                          - {"McpServerMissingError", "describe_error", "Recovered", "Recovery",
                             "KeyRoles", "Role", "grant_roles", "journal_key_roles", "revoke_key",
                             "CallContextLostError", "carry_context", "CheckContext", "CheckResult",
                             "RunStalledError", "DEFAULT_NAMES", "DataErasedError", "DataKeyError",
                             "DataKeys", "MasterKey", "Sensitivity", "masked", "SensitiveTraceWarning",
                             "reveal_saga"})
"""The 80 names ``sagacity_agents.__all__`` had before the front door: each still imports."""


def test_all_is_sorted_and_importable():
    assert sagacity_agents.__all__ == sorted(sagacity_agents.__all__)
    for name in sagacity_agents.__all__:
        assert getattr(sagacity_agents, name) is not None


def test_the_front_door_is_twenty_names():
    assert sagacity_agents.__all__ == FRONT_DOOR
    assert len(FRONT_DOOR) == 20


@pytest.mark.parametrize("door", sorted(SECOND_DOORS))
def test_each_second_door_exports_its_names(door):
    module = importlib.import_module(door)
    assert module.__all__ == sorted(module.__all__)
    assert module.__all__ == sorted(SECOND_DOORS[door])
    for name in module.__all__:
        assert getattr(module, name) is not None, name


def test_a_name_in_two_doors_is_the_same_object():
    homes: dict[str, object] = {}
    for door in DOORS:
        module = importlib.import_module(door)
        for name in module.__all__:
            value = getattr(module, name)
            assert homes.setdefault(name, value) is value, (door, name)


def test_every_exception_derives_from_the_root_and_is_exported():
    from sagacity_agents.sdk import facade, guardrails, hooks, results
    from sagacity_agents.sdk.mcp import registry

    found = {
        obj
        for module in (errors, facade, guardrails, hooks, registry, results)
        for _, obj in inspect.getmembers(module, inspect.isclass)
        if issubclass(obj, Exception) and obj.__module__.startswith("sagacity_agents")
    }
    assert found
    for exc in found:
        assert issubclass(exc, sagacity_agents.SagacityError), exc
        assert exc.__name__ in errors.__all__, exc
        assert getattr(errors, exc.__name__) is exc, exc
    assert "SagacityError" in sagacity_agents.__all__
    assert sagacity_agents.SagacityError is errors.SagacityError


def test_public_callables_have_docstrings():
    for door in ["sagacity_agents", *SECOND_DOORS]:
        module = importlib.import_module(door)
        for name in module.__all__:
            obj = getattr(module, name)
            if callable(obj) and not isinstance(obj, type(sagacity_agents)):
                assert (obj.__doc__ or "").strip(), f"{door}.{name}"


def test_every_door_and_name_is_in_the_api_page():
    page = (ROOT / "docs" / "api.md").read_text("utf-8")
    for door in DOORS:
        assert re.search(rf"^## .*`{re.escape(door)}`", page, re.MULTILINE), door
        for name in importlib.import_module(door).__all__:
            assert re.search(rf"^\| `{re.escape(name)}` \|", page, re.MULTILINE), f"{door}.{name}"


# --- names that left the top level ----------------------------------------------------------------


def test_every_name_of_before_still_imports_from_the_top_level():
    assert len(TOP_LEVEL_BEFORE) == 80
    moved = sorted(set(TOP_LEVEL_BEFORE) - set(FRONT_DOOR))
    assert sorted(sagacity_agents._MOVED) == moved
    for name in moved:
        assert name in SECOND_DOORS[sagacity_agents._MOVED[name]], name


@pytest.mark.parametrize("name", sorted(set(TOP_LEVEL_BEFORE) - set(FRONT_DOOR)))
def test_a_name_that_left_the_top_level_warns_and_names_its_door(name):
    door = sagacity_agents._MOVED[name]
    with pytest.warns(DeprecationWarning, match=rf"sagacity_agents\.{name} .* {re.escape(door)}\b"):
        value = getattr(sagacity_agents, name)
    assert value is getattr(importlib.import_module(door), name)


def test_importing_a_moved_name_warns_at_the_import_line_every_time():
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            from sagacity_agents import SqliteJournal  # noqa: F401
        assert caught, "no DeprecationWarning"
        assert {w.category for w in caught} == {DeprecationWarning}
        assert {Path(w.filename).name for w in caught} == {Path(__file__).name}
        assert "sagacity_agents.backends" in str(caught[0].message)


def test_the_front_door_and_the_doors_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for door in DOORS:
            module = importlib.import_module(door)
            for name in module.__all__:
                getattr(module, name)


def test_an_unknown_name_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Nonesuch'"):
        sagacity_agents.Nonesuch  # noqa: B018
    for door in (*SECOND_DOORS, "sagacity_agents.errors"):
        assert not hasattr(importlib.import_module(door), "Nonesuch")


# --- examples and the README import through the doors ---------------------------------------------


def _imports(tree: ast.AST) -> list[tuple[int, str, list[str]]]:
    """``(line, module, names)`` of each import of the package (``names`` empty for ``import x``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "sagacity_agents":
                found.append((node.lineno, node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names
                      if a.name.split(".")[0] == "sagacity_agents"]
    return found


def _parse_block(code: str, first_line: int) -> tuple[ast.AST, int]:
    """A code block's tree and what to add to its line numbers to get the file's."""
    try:
        return ast.parse(code), first_line - 1
    except SyntaxError:  # a snippet with a top-level await, as the README shows them
        return ast.parse("async def snippet():\n" + textwrap.indent(code, "    ")), first_line - 2


def _sources() -> list[tuple[str, int, ast.AST]]:
    """``(file, line offset, tree)`` of every example module and every python block of the
    README and of the examples' READMEs."""
    sources = [(str(p.relative_to(ROOT)), 0, ast.parse(p.read_text("utf-8")))
               for p in sorted((ROOT / "examples").rglob("*.py"))]
    for path in [ROOT / "README.md", *sorted((ROOT / "examples").rglob("*.md"))]:
        text = path.read_text("utf-8")
        for match in re.finditer(r"^```python\n(.*?)^```", text, re.DOTALL | re.MULTILINE):
            tree, offset = _parse_block(textwrap.dedent(match.group(1)),
                                        text.count("\n", 0, match.start(1)) + 1)
            sources.append((str(path.relative_to(ROOT)), offset, tree))
    return sources


def door_violations(sources: list[tuple[str, int, ast.AST]]) -> list[str]:
    """Every import of the package that is not through a documented door, or names what the
    door does not export (a name that left the top level included)."""
    bad = []
    for path, offset, tree in sources:
        for line, module, names in _imports(tree):
            where, line = path, line + offset
            if module in DEMO:
                continue
            if module not in DOORS:
                bad.append(f"{where}:{line}: {module} is not a door")
                continue
            exported = importlib.import_module(module).__all__
            bad += [f"{where}:{line}: {module} does not export {name}"
                    for name in names if name not in exported]
    return bad


def test_the_door_check_catches_internal_and_moved_imports():
    tree = ast.parse("from sagacity_agents.core.approval import ApprovalRequest\n"
                     "from sagacity_agents import SqliteJournal, Sagacity\n"
                     "import sagacity_agents.stores\n"
                     "from sagacity_agents.backends import SqliteJournal\n"
                     "from sagacity_agents.demo.trip import build_agent\n")
    assert door_violations([("x.py", 0, tree)]) == [
        "x.py:1: sagacity_agents.core.approval is not a door",
        "x.py:2: sagacity_agents does not export SqliteJournal",
        "x.py:3: sagacity_agents.stores is not a door",
    ]


def test_examples_and_the_readme_import_only_through_the_doors():
    sources = _sources()
    assert sum(1 for path, _, _ in sources if path.startswith("examples")) > 20
    assert any(path == "README.md" for path, _, _ in sources)
    bad = door_violations(sources)
    if bad:
        pytest.fail("imports that are not through a documented door (docs/api.md):\n  "
                    + "\n  ".join(bad), pytrace=False)


# --- the core and the doors without the SDK ------------------------------------------------------


def test_core_does_not_import_the_agents_sdk():
    code = (
        "import sys, sagacity_agents, sagacity_agents.core.saga, sagacity_agents.core.approval, "
        "sagacity_agents.backends.memory.approvals, sagacity_agents.backends.sqlite.approvals, "
        "sagacity_agents.core.compensation, sagacity_agents.core.chain\n"
        "assert 'agents' not in sys.modules, 'core imported the SDK'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_doors_load_the_sdk_only_for_a_name_that_needs_it():
    code = (
        "import sys, sagacity_agents, sagacity_agents.backends as b, sagacity_agents.evidence as e, "
        "sagacity_agents.errors as x, sagacity_agents.saga as s, sagacity_agents.approvals as a, "
        "sagacity_agents.guardrails as g\n"
        "b.SqliteJournal, b.PostgresJournal, e.verify_journal, x.JournalError, s.Saga, "
        "a.ApprovalRequest, g.SagaVerdict, sagacity_agents.SagaStatus\n"
        "assert 'agents' not in sys.modules, 'a door imported the SDK'\n"
        "x.SagaStopped\n"
        "assert 'agents' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-W", "error", "-c", code], check=True)
