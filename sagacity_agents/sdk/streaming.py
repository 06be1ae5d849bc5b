"""``SagaStream``: a streamed saga run, as ``Sagacity.run_streamed`` returns it (an async
context manager over the SDK's ``RunResultStreaming``; the saga is finalized when the block ends)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, Runner

from ..errors import LeaseLostError

from .hooks import SagaRunHooks
from .results import SagaResult, StreamAbandoned, saga_result
from .trace_warning import warn_if_sdk_traces_sensitive
from .tracing import saga_trace

__all__ = ["SagaStream"]


class SagaStream:
    """A streamed saga run; created by :meth:`Sagacity.run_streamed`. Use as an async context
    manager; ``result`` is set when the block ends."""

    def __init__(
        self,
        hooks: SagaRunHooks,
        agent: Agent[Any],
        input: Any,
        runner_kwargs: dict[str, Any],
        abandon: str = "finish",
    ) -> None:
        if abandon not in ("finish", "cancel"):
            raise ValueError("abandon must be 'finish' or 'cancel'")
        self._abandon = abandon
        self._run_error: BaseException | None = None
        self._hooks = hooks
        self._agent = agent
        self._input = input
        self._kwargs = runner_kwargs
        self.run: Any = None
        """The SDK's ``RunResultStreaming``."""
        self.result: SagaResult | None = None
        """The :class:`SagaResult`, once the ``async with`` block has ended."""
        self._trace: Any = None

    @property
    def saga_id(self) -> str:
        """The saga's id."""
        return self._hooks.saga_id

    async def __aenter__(self) -> SagaStream:
        # The SDK trace around the run and its compensation, as Sagacity.run (sdk/tracing.py).
        warn_if_sdk_traces_sensitive(self._agent, self._kwargs.get("run_config"))
        self._trace = saga_trace(self._kwargs.get("run_config"), saga_id=self.saga_id)
        self._trace.__enter__()
        try:
            await self._hooks.__aenter__()
        except BaseException:
            self._trace.__exit__(None, None, None)
            raise
        # The scope must be set before run_streamed() is called: its task copies the context.
        self.run = Runner.run_streamed(self._agent, self._input, hooks=self._hooks, **self._kwargs)
        return self

    async def stream_events(self) -> AsyncIterator[Any]:
        """The SDK's stream events (``RunResultStreaming.stream_events()``). The run's own
        exception is raised out of the iteration, as the SDK does, and kept for the result."""
        try:
            async for event in self.run.stream_events():
                yield event
        except Exception as exc:
            self._run_error = exc
            raise

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        run = self.run
        error = exc
        abandoned = False
        if run is not None and not run.is_complete and (exc is not None or self._abandon == "cancel"):
            abandoned = True
            run.cancel()
        if run is not None:
            try:
                async for _ in run.stream_events():
                    pass
            except Exception as late:  # noqa: BLE001 - the run's own failure
                error = error or late
            task = getattr(run, "run_loop_task", None)
            if task is not None and not task.done():
                await asyncio.wait([task])
            error = error or run.run_loop_exception
        if error is None and abandoned:
            error = StreamAbandoned("the stream consumer left before the run completed; run cancelled")
        requests: tuple[Any, ...] = ()
        if error is None and run is not None and getattr(run, "interruptions", None):
            if self._hooks.desk is not None:
                # Same pause as Sagacity.run: requests, journaled hashes, the stored snapshot;
                # resume with Sagacity.resume (not streamed).
                requests = (await self._hooks.request_approvals(run)).requests
            self._hooks.pending_approvals = bool(requests) or self._hooks.desk is None
        elif error is None:
            self._hooks.pending_approvals = False
        try:
            await self._hooks.__aexit__(type(error) if error else None, error, None)
        except LeaseLostError as lost:  # the run ended well but another run held the saga
            error = lost
        finally:
            self._trace.__exit__(None, None, None)
        self.result = saga_result(self._hooks, run, error, requests)
        # The run's own exception is in the result; anything else (the consumer's own error, a
        # cancellation) propagates after the saga was finalized.
        return exc is not None and exc is self._run_error
