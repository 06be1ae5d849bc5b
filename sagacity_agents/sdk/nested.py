"""Runs nested in a saga get hooks of ours: their undeclared calls are journaled too.

A saga's own run journals the calls of tools nobody declared from its hooks
(``SagaRunHooks.on_tool_start`` / ``on_tool_end``). A run nested in it does not get those hooks:
``Agent.as_tool`` starts its agent's run with the hooks given to ``as_tool`` (none by default), and
a ``Runner.run`` written in a tool body with whatever its author passed (sdk-notes.md, "Scope
propagation": the parent's RunHooks do not see a nested run's tools). Every such run, streamed
or not, goes through the SDK's default ``AgentRunner`` (``Runner.run``, ``run_streamed`` and
``run_sync`` delegate to it, and ``as_tool`` calls ``Runner.run`` / ``Runner.run_streamed``). So
that is the seam: :func:`install_nested_runner` puts a :class:`SagaAgentRunner` in front of the
default runner (delegating to it, whatever it is), and while a saga is current in the context
(``current_saga``) every run started without the saga's own hooks is given
:class:`NestedRunHooks` around its own. Outside a saga it changes nothing (one context-variable
read per run). It is installed when a saga scope is entered and checked again before every tool
call of the saga's own run, so an application that sets its own default runner meanwhile is
wrapped again before any nested run can start.

Why not the other seams: the user's tool objects are never changed (replacing a tool's invoker
is a trap, sdk-notes.md, "Failures"); the agent's tool list, bound at start-up, cannot show a run
started in a tool body nor tools added at run time; and hooks the user has to remember to pass
to every ``as_tool`` and nested ``Runner.run`` would be missed. A run started on an
``AgentRunner`` object of the application's own, not through ``Runner``, is not seen (a limit,
docs/architecture.md).

The nested hooks journal an undeclared call as the saga's hooks do (``sdk/undeclared.py``): its
INTENT (raw arguments, ``undeclared``, the agent that made the call, the parent call) before the
body, its outcome after; under ``strict=True`` an agent of the nested run whose graph shows an
undeclared tool is refused when it starts, before its model is called (the saga is failed and
the run raises ``ConfigurationError``), and a tool met only at the call is refused there.
The parent is the call the nested run was started from: the current call of a decorated body or
of a ``nested_agent_tool``, or, for a plain ``as_tool`` call (journaled undeclared by the outer
hooks), the call whose id the ``ToolContext`` that ``as_tool`` passes as the nested run's context
carries.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from agents import Agent, RunContextWrapper, RunHooks, Tool
from agents.tool_context import ToolContext

from ..core.saga import Saga, current_call, current_saga
from . import _sdk_internals as sdk
from .binding import undeclared_error
from .graph import agent_graph
from .undeclared import begin_undeclared, end_undeclared, is_undeclared

__all__ = ["NestedRunHooks", "SagaAgentRunner", "install_nested_runner", "strict_scope"]

T = TypeVar("T")

strict_scope: contextvars.ContextVar[bool] = contextvars.ContextVar("sagacity_strict", default=False)
"""Whether the saga scope in this context refuses undeclared tools (``strict=True``); set with
``current_saga`` by ``SagaRunHooks`` and read by the nested runs' hooks."""


async def _on_saga_loop(saga: Saga, work: Awaitable[T]) -> T:
    """Await ``work`` on the saga's event loop: a ``Runner.run_sync`` in a sync tool body runs
    its nested run on a loop of its own, in a worker thread, and the journal belongs to the
    saga's loop."""
    loop = saga.loop
    if loop is None or loop is asyncio.get_running_loop():
        return await work
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, loop))  # type: ignore[arg-type]


class NestedRunHooks(RunHooks[Any]):
    """The hooks of a run nested in a saga: journal its undeclared calls, refuse them under
    ``strict``, then forward every callback to the run's own hooks.

    Args:
        saga: the saga the nested run belongs to.
        hooks: the hooks the run was started with (``None``: none); ``AgentHooks`` raise the
            SDK's own ``TypeError``.
        strict: refuse undeclared tools (``strict=True`` of the saga's scope).

    Raises:
        TypeError: ``hooks`` is not a ``RunHooks`` (the SDK's own check and message).
    """

    sagacity_scope_hooks = True
    """A run given these hooks needs no more (``SagaAgentRunner``)."""

    def __init__(self, saga: Saga, hooks: RunHooks[Any] | None, *, strict: bool) -> None:
        if hooks is not None:
            sdk.validate_run_hooks(hooks)
        self.saga = saga
        self.user_hooks = hooks
        self.strict = strict

    async def on_agent_start(self, context: Any, agent: Agent[Any]) -> None:
        """Under ``strict``: refuse an agent whose graph shows undeclared tools, before its
        model is called (the saga is failed, then ``ConfigurationError`` raised); then the
        run's own hook."""
        if self.strict:
            names = [f"{site.key} ({site.path}, in a nested run)" for site in agent_graph(agent).undeclared()]
            if names:
                error = undeclared_error(names)
                parent = current_call.get()
                self.saga.fail_now(parent.tool if parent else agent.name,
                                   parent.call_id if parent else None, str(error))
                raise error
        if self.user_hooks is not None:
            await self.user_hooks.on_agent_start(context, agent)

    async def on_agent_end(self, context: Any, agent: Agent[Any], output: Any) -> None:
        """The run's own hook."""
        if self.user_hooks is not None:
            await self.user_hooks.on_agent_end(context, agent, output)

    async def on_llm_start(self, context: Any, agent: Agent[Any], system_prompt: Any, input_items: Any) -> None:
        """The run's own hook."""
        if self.user_hooks is not None:
            await self.user_hooks.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(self, context: Any, agent: Agent[Any], response: Any) -> None:
        """The run's own hook."""
        if self.user_hooks is not None:
            await self.user_hooks.on_llm_end(context, agent, response)

    async def on_handoff(self, context: RunContextWrapper[Any], from_agent: Agent[Any], to_agent: Agent[Any]) -> None:
        """The run's own hook."""
        if self.user_hooks is not None:
            await self.user_hooks.on_handoff(context, from_agent, to_agent)

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool) -> None:
        """An undeclared call: journal its INTENT (or refuse it under ``strict``); then the
        run's own hook. If that raises, the body will not run: the INTENT gets its FAILED
        (``not_run``) outcome first."""
        undeclared = is_undeclared(tool) and not self.saga.closed
        if undeclared:
            await _on_saga_loop(self.saga, begin_undeclared(self.saga, context, agent, tool,  # type: ignore[arg-type]
                                                            strict=self.strict))
        if self.user_hooks is None:
            return
        try:
            await self.user_hooks.on_tool_start(context, agent, tool)
        except BaseException as exc:
            if undeclared:
                await _on_saga_loop(self.saga, self._not_run(context, exc))
            raise

    async def _not_run(self, context: Any, exc: BaseException) -> None:
        task = self.saga.end_external_call(getattr(context, "tool_call_id", None), exc=exc, not_run=True)
        if task is not None:
            await task

    async def on_tool_end(self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: Any) -> None:
        """Journal the outcome of an undeclared call (EXECUTED, or FAILED for the SDK's own
        failure or timeout message); then the run's own hook."""
        await _on_saga_loop(self.saga, end_undeclared(self.saga, context, tool, result))
        if self.user_hooks is not None:
            await self.user_hooks.on_tool_end(context, agent, tool, result)


class SagaAgentRunner(sdk.AgentRunner):
    """The SDK's default runner with nested runs of a saga given :class:`NestedRunHooks`.

    Args:
        inner: the runner that was the default (the SDK's own, or the application's); every
            run is delegated to it.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    @contextmanager
    def _nested(self, kwargs: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """The run options for a run started now: unchanged outside a saga, or when the run has
        the saga's own hooks; else with nested hooks, and the call it was started from as the
        current call while the run is started (a streamed run's task copies it)."""
        saga = current_saga.get()
        hooks = kwargs.get("hooks")
        if saga is None or saga.closed or getattr(hooks, "sagacity_scope_hooks", False):
            yield kwargs
            return
        nested = {**kwargs, "hooks": NestedRunHooks(saga, hooks, strict=strict_scope.get())}
        context = kwargs.get("context")
        parent = saga.external_frame(context.tool_call_id) if isinstance(context, ToolContext) else None
        token = current_call.set(parent) if parent is not None else None
        try:
            yield nested
        finally:
            if token is not None:
                current_call.reset(token)

    async def run(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        """``AgentRunner.run``, delegated (see the class)."""
        with self._nested(kwargs) as options:
            return await self.inner.run(starting_agent, input, **options)

    def run_sync(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        """``AgentRunner.run_sync``, delegated (see the class)."""
        with self._nested(kwargs) as options:
            return self.inner.run_sync(starting_agent, input, **options)

    def run_streamed(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        """``AgentRunner.run_streamed``, delegated (see the class)."""
        with self._nested(kwargs) as options:
            return self.inner.run_streamed(starting_agent, input, **options)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (a copy being built): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)


def install_nested_runner() -> None:
    """Make the SDK's default runner a :class:`SagaAgentRunner` around the current one, unless
    it is one already (idempotent; process-wide; changes nothing outside a saga)."""
    current = sdk.get_default_agent_runner()
    if not isinstance(current, SagaAgentRunner):
        sdk.set_default_agent_runner(SagaAgentRunner(current))
