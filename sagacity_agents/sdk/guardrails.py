"""Guardrails that speak the saga's verdict in the SDK's own guardrail language.

::

    agent = Agent(
        name="travel",
        tools=[book_flight, book_hotel, charge_card, get_booking],
        output_guardrails=[saga_output_guardrail()],        # no false "Your trip is booked!"
    )
    # and, per tool, or for every declared tool at once with FailurePolicy.REFUSE_EFFECTS:
    book_hotel.tool_input_guardrails = [saga_tool_guardrail()]

* :func:`saga_output_guardrail` trips its tripwire when the current saga has failed, has been
  compensated, or has a call in doubt. The SDK then raises its own
  ``OutputGuardrailTripwireTriggered`` (``Runner.run`` + ``SagaRunHooks``), and the saga is
  compensated once on the way out; the facade returns a :class:`SagaResult` whose
  ``output_withheld`` / ``withheld_reason`` say so. Its ``output_info`` is a
  :class:`~sagacity_agents.core.saga.verdict.SagaVerdict`: the failed call and what will be undone.
* :func:`saga_tool_guardrail` refuses a call to a tool that changes the world once the saga has
  failed (``reject_content``: the model gets a message, the run goes on), journaling it REFUSED.
  Read-only tools still run.

Both are no-ops outside a saga. Facts about the SDK they rely on are pinned by
``tests/sdk/test_guardrails_contract.py``: output guardrails of the agent and of the
``RunConfig`` start together, in that order, and the first to trip cancels the others; tool input
guardrails run one after the other in list order and the first that does not allow decides;
in a streamed run the model's text events reach the consumer *before* any output guardrail runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agents import (
    Agent,
    FunctionTool,
    GuardrailFunctionOutput,
    OutputGuardrail,
    OutputGuardrailTripwireTriggered,
    RunContextWrapper,
)
from agents.tool_guardrails import (
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
)

from ..core.compensation import CompensationReport
from ..core.declarations import ToolDeclaration
from ..core.saga import FailureRecord, Saga, current_saga
from ..core.saga.verdict import SagaVerdict, changes_world, read_verdict
from .tools import declaration_of

__all__ = [
    "OUTPUT_GUARDRAIL_NAME",
    "TOOL_GUARDRAIL_NAME",
    "saga_output_guardrail",
    "saga_tool_guardrail",
    "withheld_reason",
]

OUTPUT_GUARDRAIL_NAME = "sagacity_saga_output"
"""Default name of :func:`saga_output_guardrail` (tracing, ``OutputGuardrailResult``)."""

TOOL_GUARDRAIL_NAME = "sagacity_saga_effects"
"""Default name of :func:`saga_tool_guardrail` (journaled as ``refused_by``)."""




def saga_output_guardrail(*, name: str = OUTPUT_GUARDRAIL_NAME) -> OutputGuardrail[Any]:
    """An agent output guardrail that withholds a final output the saga contradicts.

    Attach it to any agent of the graph (``Agent(output_guardrails=[...])``) or to the run
    (``RunConfig(output_guardrails=[...])``). When the run's final output is produced, it reads
    the current saga (failures, then the journal) and trips the tripwire when the saga has
    failed, has been compensated, or has a call in doubt; the SDK then raises
    ``OutputGuardrailTripwireTriggered`` instead of returning the output. Leaving the saga scope
    (``SagaRunHooks`` / the facade) sees that exception and compensates, once. Outside a saga it
    never trips. A journal that cannot be read trips it (fail closed).

    Args:
        name: the guardrail's name (tracing, results).

    Returns:
        An ``OutputGuardrail`` whose ``output_info`` is a
        :class:`~sagacity_agents.core.saga.verdict.SagaVerdict` inside a saga (``None`` outside one).
        Compensation runs when the run ends, after the guardrail: ``verdict.to_undo`` lists what
        *will be* undone; the facade's ``SagaResult.withheld_reason`` says what *was*.
    """

    async def saga_output(
        context: RunContextWrapper[Any], agent: Agent[Any], agent_output: Any
    ) -> GuardrailFunctionOutput:
        saga = current_saga.get()
        if saga is None:
            return GuardrailFunctionOutput(output_info=None, tripwire_triggered=False)
        # A closed saga is judged too: one closed COMPENSATED still contradicts a success.
        verdict = await read_verdict(saga)
        return GuardrailFunctionOutput(output_info=verdict, tripwire_triggered=verdict.blocks_output)

    return OutputGuardrail(guardrail_function=saga_output, name=name)


def _tool_key(data: ToolInputGuardrailData) -> str:
    # Keyed as the wrapper and the graph key tools: ``namespace.name`` for a tool_namespace() tool.
    ctx = data.context
    return getattr(ctx, "qualified_tool_name", None) or ctx.tool_name


def _declaration(saga: Saga, data: ToolInputGuardrailData, key: str) -> ToolDeclaration | None:
    decl = saga.declaration_for(key, getattr(data.agent, "name", None))
    if decl is None:
        # A tool of an agent the saga has not bound yet (a nested as_tool agent): ask the tool.
        for tool in getattr(data.agent, "tools", ()) or ():
            if isinstance(tool, FunctionTool) and tool.qualified_name == key:
                return declaration_of(tool)
    return decl


def saga_tool_guardrail(*, name: str = TOOL_GUARDRAIL_NAME) -> ToolInputGuardrail[Any]:
    """A tool input guardrail that refuses further effects once the saga has failed.

    Attach it to a tool (``tool.tool_input_guardrails = [saga_tool_guardrail(), ...]`` or on a
    copy). After a call of the saga failed, a call to a tool that changes the world
    (compensatable, no-undo, irreversible, or undeclared: unknown counts as changing it) is
    rejected with ``reject_content``: its body does not run, the model gets a message saying
    that nothing more will be changed and what will be undone, the run goes on, and the call is
    journaled REFUSED with that message. Read-only tools run. Outside a saga, or before any
    failure, it allows every call. ``FailurePolicy.REFUSE_EFFECTS`` applies the same rule to
    every declared tool without attaching anything.

    Args:
        name: the guardrail's name (tracing; journaled as ``refused_by``).

    Returns:
        A ``ToolInputGuardrail``. When it refuses, its ``output_info`` is the
        :class:`~sagacity_agents.core.saga.verdict.SagaVerdict`.
    """

    async def saga_effects(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        saga = current_saga.get()
        # A closed saga takes no more entries; the tool wrappers treat it as no saga, and so do we.
        if saga is None or saga.closed or not saga.failed:
            return ToolGuardrailFunctionOutput.allow()
        key = _tool_key(data)
        decl = _declaration(saga, data, key)
        if not changes_world(decl):
            return ToolGuardrailFunctionOutput.allow()
        ctx = data.context
        message = await saga.refuse_call(
            decl, key, ctx.tool_call_id, None, raw_args=ctx.tool_arguments, refused_by=name,
        )
        return ToolGuardrailFunctionOutput.reject_content(message, output_info=await read_verdict(saga))

    return ToolInputGuardrail(guardrail_function=saga_effects, name=name)


def _text(value: Any) -> str:
    try:
        return str(value)
    except Exception:  # noqa: BLE001 - the application's output_info must not break the result
        return f"<{type(value).__name__} with no printable form>"


def _saga_story(failures: Sequence[FailureRecord], report: CompensationReport | None) -> list[str]:
    parts = [f"{f.tool} (call {f.call_id}) failed: {f.error}" for f in failures]
    if report is not None:
        for label, items in (("undone", report.undone), ("undo failed", report.failed),
                             ("kept (irreversible)", report.kept_irreversible),
                             ("not undone", report.no_undo), ("in doubt", report.in_doubt)):
            if items:
                parts.append(f"{label}: " + ", ".join(
                    f"{i.tool} (call {i.call_id})" + (f": {i.detail}" if label == "not undone" and i.detail else "")
                    for i in items))
    return parts


def withheld_reason(
    error: BaseException | None,
    failures: Sequence[FailureRecord] = (),
    report: CompensationReport | None = None,
) -> str | None:
    """Why a run's final output was withheld, or ``None`` when no output guardrail tripped.

    Written after the end-of-run compensation: the guardrail that tripped, then what the saga
    did (the failed calls and what was undone, kept or left in doubt). For another output
    guardrail than :func:`saga_output_guardrail`, its name and ``output_info`` come first.

    Args:
        error: the exception the run raised.
        failures: the saga's failed calls (``Saga.failures``).
        report: the saga's compensation report (``None``: nothing was compensated).
    """
    if not isinstance(error, OutputGuardrailTripwireTriggered):
        return None
    result = error.guardrail_result
    info = result.output.output_info
    guardrail = result.guardrail.get_name()
    story = _saga_story(failures, report)
    if not isinstance(info, SagaVerdict):
        head = f"output guardrail {guardrail!r} tripped" + (f": {_text(info)}" if info is not None else "")
        return "; ".join([head, *story])
    if not failures:
        story.insert(0, info.summary() or f"saga {info.saga_id} is {info.status}")
    return f"withheld by {guardrail!r}: " + "; ".join(story)
