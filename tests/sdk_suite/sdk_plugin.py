"""pytest plugin for running the openai-agents test suite with every ``function_tool`` wrapped.

Loaded by ``run_sdk_suite.py`` (``-p sdk_plugin``, this folder on ``PYTHONPATH``), never by the
project's own ``pytest``. ``SAGACITY_SDK_SUITE_MODE`` says what it does:

* ``plain``: nothing (the baseline);
* ``wrapped``: every function given to ``agents.function_tool`` (also reached as
  ``agents.tool.function_tool``) is first declared with ``@read_only``, so the SDK builds each
  tool of its own test suite from our wrapper;
* ``saga``: as ``wrapped``, and every run that is not already inside a saga
  (``AgentRunner.run``, which ``Runner.run`` and ``Runner.run_sync`` reach) runs inside one: a
  fresh in-memory journal, ``SagaRunHooks`` around the run with the test's own hooks forwarded
  and ``FailurePolicy.CONTINUE`` (``SAGACITY_SDK_SUITE_POLICY=stop`` for the default policy).
  Streamed runs are left outside a saga (their scope must be opened before ``run_streamed`` is
  called, synchronously).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import agents
import agents.tool

MODE = os.environ.get("SAGACITY_SDK_SUITE_MODE", "plain")

if MODE in ("wrapped", "saga"):
    from sagacity_agents import read_only

    _real_function_tool = agents.tool.function_tool

    def _declared(func: Any) -> Any:
        return read_only(func)

    @functools.wraps(_real_function_tool)
    def function_tool(func: Any = None, **kwargs: Any) -> Any:
        """``agents.function_tool`` with the function declared ``@read_only`` first."""
        if callable(func):
            return _real_function_tool(_declared(func), **kwargs)
        if func is not None:
            return _real_function_tool(func, **kwargs)  # let the SDK refuse it its own way
        make = _real_function_tool(**kwargs)
        return lambda real: make(_declared(real) if callable(real) else real)

    agents.function_tool = function_tool
    agents.tool.function_tool = function_tool

if MODE == "saga":
    from agents.run import AgentRunner

    from sagacity_agents import FailurePolicy, SagaRunHooks
    from sagacity_agents.backends import InMemoryJournal
    from sagacity_agents.core.saga import current_saga

    _POLICY = (FailurePolicy.STOP if os.environ.get("SAGACITY_SDK_SUITE_POLICY") == "stop"
               else FailurePolicy.CONTINUE)
    _real_run = AgentRunner.run

    async def run(self: Any, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        """``AgentRunner.run`` inside a saga of its own (a nested run joins the outer one)."""
        if current_saga.get() is not None:
            return await _real_run(self, starting_agent, input, **kwargs)
        hooks = kwargs.pop("hooks", None)
        async with SagaRunHooks(InMemoryJournal(), agent=starting_agent, hooks=hooks,
                                policy=_POLICY) as saga_hooks:
            return await _real_run(self, starting_agent, input, hooks=saga_hooks, **kwargs)

    AgentRunner.run = run  # type: ignore[method-assign]
