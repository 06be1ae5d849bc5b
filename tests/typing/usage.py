"""Type-checked only (by tests/test_typing.py through mypy): the public API as users write it."""

from __future__ import annotations

from agents import Agent, OutputGuardrail, function_tool
from agents.tool_guardrails import ToolInputGuardrail

from sagacity_agents import (
    CompensationContext,
    Decision,
    FailurePolicy,
    SagacityError,
    SagaResult,
    Sagacity,
    SagaStatus,
    Verdict,
    compensable,
    irreversible,
    read_only,
    record_undo_data,
)
from sagacity_agents.backends import InMemoryJournal, JournalEntry
from sagacity_agents.errors import ClaimTakenError
from sagacity_agents.guardrails import SagaVerdict, saga_output_guardrail, saga_tool_guardrail
from sagacity_agents.saga import CompensationReport


def cancel(ctx: CompensationContext) -> None:
    key: str = ctx.idempotency_key
    seq: int = ctx.seq
    del key, seq


def classify(value: str) -> Verdict | None:
    return Verdict.REFUSED if value.startswith("Error:") else None


@function_tool
@compensable(undo=cancel, classify=classify)
async def book(city: str, nights: int) -> str:
    record_undo_data({"city": city})
    return "ok"


@function_tool
@read_only
def look(city: str) -> str:
    return city


@function_tool(needs_approval=True)
@irreversible
def wire(amount: int) -> str:
    return str(amount)


async def approve_all(request: object) -> Decision:
    return Decision(approved=True, approver="bot")


async def main() -> None:
    sagacity = Sagacity(InMemoryJournal())
    result: SagaResult = await sagacity.run(
        Agent(name="a", tools=[book, look, wire]), "go", approver=approve_all
    )
    status: SagaStatus = result.status
    report: CompensationReport | None = result.report
    del status, report
    # A human answers a call left in doubt; recovery then acts on it, one saga or all of them.
    answer: JournalEntry = await sagacity.resolve(
        result.saga_id, 7, ran=False, resolver="ops", reason="no booking at the hotel")
    recovered: SagaResult = await sagacity.recover(result.saga_id, Agent(name="a", tools=[book]))
    for saga_id, why, outcome in await sagacity.recover_all(Agent(name="a", tools=[book])):
        if isinstance(outcome, ClaimTakenError | SagacityError):
            print(saga_id, why, outcome)
    del answer, recovered


async def guarded() -> None:
    output_guard: OutputGuardrail[object] = saga_output_guardrail()
    tool_guard: ToolInputGuardrail[object] = saga_tool_guardrail(name="no_more_effects")
    book.tool_input_guardrails = [tool_guard]
    sagacity = Sagacity(InMemoryJournal(), policy=FailurePolicy.REFUSE_EFFECTS)
    result = await sagacity.run(Agent(name="g", tools=[book], output_guardrails=[output_guard]), "go")
    withheld: bool = result.output_withheld
    reason: str | None = result.withheld_reason
    verdict: SagaVerdict | None = None
    if verdict is not None:
        text: str = verdict.model_message()
        del text
    del withheld, reason
