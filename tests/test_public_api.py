"""The public surface: sorted __all__, every name importable, one exception root, and the core
importable without the Agents SDK."""

from __future__ import annotations

import inspect
import subprocess
import sys

import sagacity_agents
from sagacity_agents import errors


def test_all_is_sorted_and_importable():
    assert sagacity_agents.__all__ == sorted(sagacity_agents.__all__)
    for name in sagacity_agents.__all__:
        assert getattr(sagacity_agents, name) is not None


def test_every_exception_derives_from_the_root_and_is_exported():
    from sagacity_agents.sdk import facade, guardrails, hooks

    found = {
        obj
        for module in (errors, facade, guardrails, hooks)
        for _, obj in inspect.getmembers(module, inspect.isclass)
        if issubclass(obj, Exception) and obj.__module__.startswith("sagacity_agents")
    }
    assert found
    for exc in found:
        assert issubclass(exc, sagacity_agents.SagacityError), exc
        assert exc.__name__ in sagacity_agents.__all__, exc


def test_public_callables_have_docstrings():
    for name in sagacity_agents.__all__:
        obj = getattr(sagacity_agents, name)
        if callable(obj) and not isinstance(obj, type(sagacity_agents)):
            assert (obj.__doc__ or "").strip(), name


def test_core_does_not_import_the_agents_sdk():
    code = (
        "import sys, sagacity_agents, sagacity_agents.core.saga, sagacity_agents.core.approval, "
        "sagacity_agents.backends.memory.approvals, sagacity_agents.backends.sqlite.approvals, "
        "sagacity_agents.core.compensation, sagacity_agents.core.chain\n"
        "assert 'agents' not in sys.modules, 'core imported the SDK'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
