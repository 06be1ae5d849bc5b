"""What the inbox tests share: a payments agent that pauses on an irreversible wire (after a
compensatable hold, so the timeline has something to undo), a bank that counts wires, and a real
uvicorn server running an app on a free port in a thread of its own."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
import uvicorn
from agents import Agent, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity_agents import Sagacity, compensable, irreversible
from sagacity_agents.core.saga import SagaStatus

set_tracing_disabled(True)

TOKENS = {"alice": "alice-secret-token-1", "bob": "bob-secret-token-22"}
"""The identities the tests log in as, and their secrets."""

HOSTILE_MEMO = '<script>window.__pwned = 1; alert(1)</script>"><img src=x onerror="window.__pwned=2">'
"""A memo a hostile model writes: must be shown as text, and run nothing."""


class Bank:
    """The far side: wires and holds, counted (shared by the agent's tools and the tests)."""

    def __init__(self) -> None:
        self.wires: list[tuple[int, str, str]] = []
        self.holds: list[str] = []
        self.lock = threading.Lock()


def make_agent(bank: Bank, memo: str = "invoice 42", iban: str = "DE89370400440532013000",
               call_id: str = "call_wire") -> Agent[Any]:
    """A fresh payments agent: holds funds (compensatable), then asks for a wire (irreversible);
    its rule-based model answers once the wire's output is in its input (so a resume in any
    process finishes it)."""

    def release(ctx: Any) -> None:
        with bank.lock:
            bank.holds.remove(ctx.undo_data["hold"])

    @function_tool
    @compensable(undo=release, scope="payments")  # built again around each test's bank
    def hold_funds(amount_eur: int) -> str:
        """Reserve funds."""
        from sagacity_agents import record_undo_data

        with bank.lock:
            bank.holds.append(f"hold-{amount_eur}")
        record_undo_data({"hold": f"hold-{amount_eur}"})
        return "held"

    @function_tool(needs_approval=True)
    @irreversible
    def send_wire(amount_eur: int, iban: str, memo: str = "") -> str:
        """Send a wire transfer."""
        with bank.lock:
            bank.wires.append((amount_eur, iban, memo))
        return f"wire {len(bank.wires)} sent"

    class Model(ScriptedModel):
        async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
            items = input if isinstance(input, list) else []
            outputs = [i.get("output") for i in items
                       if isinstance(i, dict) and i.get("type") == "function_call_output"]
            if len(outputs) >= 2:
                self.enqueue([assistant_message(f"Done: {outputs[-1]}")])
            elif outputs:
                self.enqueue([function_call("send_wire", {"amount_eur": "2500", "iban": iban,
                                                          "memo": memo}, call_id=call_id)])
            else:
                self.enqueue([function_call("hold_funds", {"amount_eur": 2500}, call_id="call_hold")])
            return await super().get_response(system_instructions, input, *args, **kwargs)

    return Agent(name="payments", model=Model(), tools=[hold_funds, send_wire])


async def paused_saga(location: str, bank: Bank, memo: str = "invoice 42", *,
                      agent: dict[str, str] | None = None, saga_id: str | None = None,
                      **options: Any) -> tuple[str, Any]:
    """Run the agent until it pauses on the wire; return the saga id and the request
    (``agent``: more arguments of :func:`make_agent`)."""
    sagacity = Sagacity(location, **options)
    try:
        result = await sagacity.run(make_agent(bank, memo, **(agent or {})), "Pay invoice 42", saga_id=saga_id)
        assert result.status is SagaStatus.AWAITING_APPROVAL, result.status
        (request,) = result.approvals
        return result.saga_id, request
    finally:
        await sagacity.aclose()


class Server:
    """``app`` served by uvicorn on 127.0.0.1 (a free port) in a thread, until :meth:`stop`."""

    def __init__(self, app: Any, **config: Any) -> None:
        self.app = app
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                                    lifespan="on", **config))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        """Stop serving (the app's lifespan closes it)."""
        self.server.should_exit = True
        self.thread.join(15)


def client(server: Server, who: str | None = "alice") -> httpx.AsyncClient:
    """An HTTP client of ``server``, with ``who``'s bearer token (``None``: anonymous)."""
    headers = {"Authorization": f"Bearer {TOKENS[who]}"} if who else {}
    return httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30, follow_redirects=False)


async def eventually(check: Any, timeout: float = 60.0, interval: float = 0.05) -> Any:
    """Await until ``check()`` (sync or async) is truthy; return its value.

    Raises:
        AssertionError: not within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s")
        await asyncio.sleep(interval)
