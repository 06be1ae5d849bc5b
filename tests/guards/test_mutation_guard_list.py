"""T-01: the mutation run's guard list is real (bench/mutation_guards.py; the run itself is a
benchmark-style script, not part of this suite): every function it names exists, every test file
it runs exists, docs/architecture.md lists them, and a mutant swapped in reaches every caller."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

from sagacity_agents.core import grants

pytestmark = pytest.mark.case("T-01")

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("bench_mutation_guards", ROOT / "bench" / "mutation_guards.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_every_guard_function_and_test_file_exists_and_is_documented():
    script = _script()
    docs = (ROOT / "docs" / "architecture.md").read_text()
    for guard in script.GUARDS:
        module = importlib.import_module(guard.module)
        for name in guard.functions:
            assert callable(script._function_object(module, name)), name
            assert f"`{name}`" in docs, name
        for test in guard.tests:
            assert (ROOT / test).exists(), test
    for ident, why in script.EQUIVALENT.items():
        assert ident.split(":")[0] in {g.module for g in script.GUARDS} and why


def test_a_swapped_in_mutant_reaches_the_callers_that_imported_the_guard():
    """What the run relies on: the mutated code replaces the live function's, so
    ``core.saga.refusals`` (which imported ``grant_for_call`` by name) runs the mutant."""
    script = _script()
    source = Path(grants.__file__).read_text()
    mutated = source.replace("if d.args_hash != expected:", "if False:")
    assert mutated != source
    mutant = script.Mutant(script.GUARDS[0], "grant_for_call", "by hand", 0, 0, 0, mutated)
    original = grants.grant_for_call.__code__
    try:
        script._swap_in(mutant)
        from sagacity_agents.core.saga import refusals

        assert refusals.grant_for_call is grants.grant_for_call
        assert grants.grant_for_call.__code__ is not original
    finally:
        grants.grant_for_call.__code__ = original
