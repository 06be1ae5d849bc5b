"""F-10's agents, importable by a child process: outer -> middle -> inner, each level a
``nested_agent_tool``, the innermost with an irreversible ``needs_approval`` wire.

Run as ``python -m tests.sdk.nested_app DB pause|resume`` it plays one process of F-10 on the
SQLite journal ``DB`` and prints one JSON line (saga id, status, request ids, wires run).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from agents import Agent, function_tool, set_tracing_disabled

from sagacity_agents import Sagacity, irreversible, nested_agent_tool

from .helpers import scripted


def f10_agents(ran: list[int], *, first: bool) -> Agent[Any]:
    """Fresh agent objects; ``first`` scripts the calls, otherwise only the final answers."""

    @function_tool(needs_approval=True)
    @irreversible
    def wire(amount: int) -> str:
        ran.append(amount)
        return f"wired {amount}"

    def model(call: tuple[str, Any, str], final: str) -> Any:
        return scripted([call], final) if first else scripted(final)

    inner = Agent(name="inner", model=model(("wire", {"amount": 7}, "w1"), "inner done"), tools=[wire])
    middle = Agent(name="middle", model=model(("inner", {"input": "pay 7"}, "i1"), "middle done"),
                   tools=[nested_agent_tool(inner.as_tool(tool_name="inner", tool_description="i"))])
    return Agent(name="outer", model=model(("middle", {"input": "pay 7"}, "m1"), "outer done"),
                 tools=[nested_agent_tool(middle.as_tool(tool_name="middle", tool_description="m"))])


async def _main(db: str, stage: str, saga_id: str | None) -> dict[str, Any]:
    ran: list[int] = []
    s = Sagacity(db)
    try:
        if stage == "pause":
            result = await s.run(f10_agents(ran, first=True), "go")
        else:
            assert saga_id is not None
            (request,) = [r for r in await s.approvals.list(saga_id) if r.consumed_at is None]
            await s.approve(request.request_id, approver="ana")
            result = await s.resume(saga_id, f10_agents(ran, first=False))
        return {"saga_id": result.saga_id, "status": result.status.value, "ran": ran,
                "final_output": result.final_output}
    finally:
        await s.aclose()


if __name__ == "__main__":
    set_tracing_disabled(True)
    db_path, stage_name = sys.argv[1], sys.argv[2]
    print(json.dumps(asyncio.run(_main(db_path, stage_name, (sys.argv[3:] or [None])[0]))))
