"""Tests are named by the behaviour they check; the tracker's case ids stay in them as markers.

A case id (``T-02``, ``R-04h``) names a case in the issue tracker. A test carries its ids as
``@pytest.mark.case("T-02")`` (or ``pytestmark`` for a whole module) so that a reader can find
the tests of a case without the tracker naming the test.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CASE_ID = re.compile(r"[A-Z]-[0-9]{2}[a-z]?")
CODE_PREFIX = re.compile(r"test_[a-zA-Z][0-9]{2}[a-z]?_")

CASE_IDS = (
    "A-01", "A-02", "A-03", "A-04", "A-05", "A-06", "C-01", "C-02", "C-03", "C-04", "C-05", "C-06",
    "C-07", "C-08", "C-09", "C-10", "C-10a", "C-10b", "C-11", "C-12", "E-01", "E-02", "E-03",
    "E-04", "E-05", "E-06", "E-07", "E-08", "F-01", "F-02", "F-03", "F-04", "F-05", "F-06", "F-07",
    "F-08", "F-09", "F-10", "F-11", "F-12", "H-01", "H-02", "M-01", "M-02", "M-03", "N-01", "N-02",
    "N-03", "N-04", "N-05", "O-23", "R-01", "R-02", "R-03", "R-04", "R-04a", "R-04b", "R-04c",
    "R-04d", "R-04e", "R-04f", "R-04g", "R-04h", "R-04i", "T-01", "T-02", "T-03", "T-04", "X-01",
    "X-02", "X-03", "X-04",
)
"""Every case id found in tests/ when the tests were renamed by behaviour."""


def _sources() -> dict[Path, str]:
    return {path: path.read_text() for path in TESTS.rglob("*.py") if path != Path(__file__).resolve()}


def _markers(tree: ast.AST) -> list[ast.Call]:
    calls = (node for node in ast.walk(tree) if isinstance(node, ast.Call))
    return [call for call in calls if ast.unparse(call.func) == "pytest.mark.case"]


def test_every_case_id_is_still_found_in_the_tests():
    found = set()
    for text in _sources().values():
        found.update(re.findall(r"\b[A-Z]-[0-9]{2}[a-z]?\b", text))
    assert sorted(set(CASE_IDS) - found) == []


def test_every_case_marker_names_well_formed_ids():
    marked = 0
    for path, text in _sources().items():
        for call in _markers(ast.parse(text)):
            marked += 1
            assert call.args and not call.keywords, f"{path.name}:{call.lineno}"
            for arg in call.args:
                where = f"{path.name}:{call.lineno}"
                assert isinstance(arg, ast.Constant) and isinstance(arg.value, str), where
                assert CASE_ID.fullmatch(arg.value), f"{where}: {arg.value!r}"
    assert marked


def test_no_test_is_named_by_a_case_code():
    named = [
        f"{path.relative_to(TESTS)}::{node.name}"
        for path, text in _sources().items()
        for node in ast.walk(ast.parse(text))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and CODE_PREFIX.match(node.name)
    ]
    named += [str(path.relative_to(TESTS)) for path in _sources() if CODE_PREFIX.match(path.name)]
    assert named == []
