"""The 14 airline tools as Agents SDK function tools, declared for the saga layer.

:func:`make_tools` turns the plain domain tools of :mod:`.tools` into ``@function_tool``
functions over one :class:`~.store.AirlineStore` (closures), each declared with a
``sagacity_agents`` decorator placed under ``@function_tool``:

* read-only tools (lookups, searches, ``calculate``, ``think``, ``transfer_to_human_agents``):
  ``@read_only``;
* ``book_reservation`` and the three ``update_reservation_*`` tools: ``@compensable``; the undo
  calls the domain undo of :mod:`.undo` with the journaled arguments, result and undo data
  (the body hands the before-state to :func:`sagacity_agents.record_undo_data` through the
  domain tool's ``record=`` callback, so the tool output stays exactly the domain output);
* ``cancel_reservation`` and ``send_certificate``: ``@function_tool(needs_approval=True)`` +
  ``@irreversible``; their bodies record what they touched too (journaled, no undo).

Every tool classifies a returned ``"Error: ..."`` as :attr:`~sagacity_agents.Verdict.REFUSED`:
the request was refused and changed nothing, the model gets the message and the saga goes on.

The bodies call :func:`.tools.call_tool`, the same dispatch the cross-check replays with, so
an output is byte for byte the one the cross-check compares with the recording. The schemas the
model sees are the recorded ones (``tools.json``, the definitions GPT-4o was given); the
arguments are validated from the Python signatures, with arrays taken as lists of plain dicts so
that a recorded argument reaches the domain tool unchanged (key order included).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents import FunctionTool, function_tool
from agents.tool_context import ToolContext

from sagacity_agents import (
    CompensationContext,
    Verdict,
    compensable,
    irreversible,
    read_only,
    record_undo_data,
)

from .store import AirlineStore
from .tools import COMPENSATIONS, TOOLS, call_tool, is_refusal

__all__ = [
    "InjectedFailure",
    "Injector",
    "UndoFailed",
    "make_tools",
    "plain_tools",
    "refused_classifier",
]

Records = list[dict[str, Any]]
"""A JSON array of objects (flights, passengers, payments), passed to the domain unchanged."""

Injector = Callable[[str, str], None]
"""``injector(tool_name, call_id)``, called at the start of every database-changing body, before
its effect; it raises :class:`InjectedFailure` for the call chosen to fail."""

TOOLS_FILE = "tools.json"


class InjectedFailure(RuntimeError):
    """A failure injected by the harness into a database-changing call, before its effect."""


class UndoFailed(RuntimeError):
    """A domain undo reported that it could not undo its call."""


def refused_classifier(result: Any) -> Verdict | None:
    """Classify a tool's return value: ``"Error: ..."`` is a refusal, anything else is OK.

    Args:
        result: What the tool body returned.

    Returns:
        :attr:`Verdict.REFUSED` for a refusal, else ``None`` (OK).
    """
    return Verdict.REFUSED if is_refusal(result) else None


def _undo_for(store: AirlineStore, name: str) -> Callable[[CompensationContext], Any]:
    """The saga undo of compensatable tool ``name``: the domain undo on the world as it is now.

    Raises (from the returned undo):
        UndoFailed: the domain undo returned no description or an ``"Error: ..."`` one.
    """
    domain_undo = COMPENSATIONS[name]

    async def undo(ctx: CompensationContext) -> None:
        description = domain_undo(store, ctx.args, ctx.result, ctx.undo_data)
        if not isinstance(description, str) or is_refusal(description):
            raise UndoFailed(f"{name} (call {ctx.call_id}): {description!r}")

    undo.__qualname__ = undo.__name__ = f"undo_{name}"
    return undo


def _recorded_definitions(data_dir: Path) -> dict[str, dict[str, Any]]:
    """The tool definitions GPT-4o was given, by name (``tools.json``)."""
    with open(data_dir / TOOLS_FILE, encoding="utf-8") as fh:
        return {item["function"]["name"]: item["function"] for item in json.load(fh)}


def _as_recorded(tool: FunctionTool, definitions: dict[str, dict[str, Any]]) -> FunctionTool:
    """Give ``tool`` the recorded description and parameter schema (not strict: they are not)."""
    definition = definitions[tool.name]
    tool.description = definition["description"]
    tool.params_json_schema = definition["parameters"]
    tool.strict_json_schema = False
    return tool


SCOPE = "airline"
"""The scope of the compensatable tools: :func:`make_tools` builds them again around each task's
own store, and undos closing over other objects under one declaration id need a scope (the same
for every rebuild, as for tools built per request; ``compensable(scope=...)``)."""


def make_tools(store: AirlineStore, injector: Injector | None = None) -> list[FunctionTool]:
    """Build the 14 airline tools over ``store``, declared for the saga layer.

    Args:
        store: The airline database the tools act on (and the undos act on later).
        injector: Optional failure injector, called as ``injector(tool, call_id)`` at the start
            of every database-changing body, before its effect (see :data:`Injector`).

    Returns:
        The tools, in :data:`.tools.TOOLS` order.
    """

    def run(name: str, arguments: dict[str, Any], ctx: ToolContext[Any] | None = None) -> str:
        if ctx is not None and injector is not None:
            injector(name, ctx.tool_call_id)
        return call_tool(store, name, arguments, record=record_undo_data)

    refused = refused_classifier

    @function_tool(strict_mode=False)
    @compensable(undo=_undo_for(store, "book_reservation"), classify=refused, scope=SCOPE)
    async def book_reservation(
        ctx: ToolContext[Any], user_id: str, origin: str, destination: str, flight_type: str,
        cabin: str, flights: Records, passengers: Records, payment_methods: Records,
        total_baggages: int, nonfree_baggages: int, insurance: str,
    ) -> str:
        """Book a reservation."""
        return run("book_reservation", {
            "user_id": user_id, "origin": origin, "destination": destination,
            "flight_type": flight_type, "cabin": cabin, "flights": flights,
            "passengers": passengers, "payment_methods": payment_methods,
            "total_baggages": total_baggages, "nonfree_baggages": nonfree_baggages,
            "insurance": insurance,
        }, ctx)

    @function_tool(strict_mode=False)
    @read_only(classify=refused)
    async def calculate(expression: str) -> str:
        """Calculate the result of a mathematical expression."""
        return run("calculate", {"expression": expression})

    @function_tool(needs_approval=True, strict_mode=False)
    @irreversible(classify=refused)
    async def cancel_reservation(ctx: ToolContext[Any], reservation_id: str) -> str:
        """Cancel the whole reservation."""
        return run("cancel_reservation", {"reservation_id": reservation_id}, ctx)

    @function_tool(strict_mode=False)
    @read_only(classify=refused)
    async def get_reservation_details(reservation_id: str) -> str:
        """Get the details of a reservation."""
        return run("get_reservation_details", {"reservation_id": reservation_id})

    @function_tool(strict_mode=False)
    @read_only(classify=refused)
    async def get_user_details(user_id: str) -> str:
        """Get the details of an user, including their reservations."""
        return run("get_user_details", {"user_id": user_id})

    @function_tool(strict_mode=False)
    @read_only(classify=refused)
    async def list_all_airports() -> str:
        """List all airports and their cities."""
        return run("list_all_airports", {})

    @function_tool(strict_mode=False)
    @read_only(classify=refused)
    async def search_direct_flight(origin: str, destination: str, date: str) -> str:
        """Search direct flights between two cities on a specific date."""
        return run("search_direct_flight", {"origin": origin, "destination": destination,
                                            "date": date})

    @function_tool(strict_mode=False)
    @read_only(classify=refused)
    async def search_onestop_flight(origin: str, destination: str, date: str) -> str:
        """Search one-stop flights between two cities on a specific date."""
        return run("search_onestop_flight", {"origin": origin, "destination": destination,
                                             "date": date})

    @function_tool(needs_approval=True, strict_mode=False)
    @irreversible(classify=refused)
    async def send_certificate(ctx: ToolContext[Any], user_id: str, amount: int | float) -> str:
        """Send a certificate to a user. Be careful!"""
        return run("send_certificate", {"user_id": user_id, "amount": amount}, ctx)

    @function_tool(strict_mode=False)
    @read_only(classify=refused)
    async def think(thought: str) -> str:
        """Use the tool to think about something."""
        return run("think", {"thought": thought})

    @function_tool(strict_mode=False)
    @read_only(classify=refused)
    async def transfer_to_human_agents(summary: str) -> str:
        """Transfer the user to a human agent, with a summary of the user's issue."""
        return run("transfer_to_human_agents", {"summary": summary})

    @function_tool(strict_mode=False)
    @compensable(undo=_undo_for(store, "update_reservation_baggages"), classify=refused, scope=SCOPE)
    async def update_reservation_baggages(
        ctx: ToolContext[Any], reservation_id: str, total_baggages: int, nonfree_baggages: int,
        payment_id: str,
    ) -> str:
        """Update the baggage information of a reservation."""
        return run("update_reservation_baggages", {
            "reservation_id": reservation_id, "total_baggages": total_baggages,
            "nonfree_baggages": nonfree_baggages, "payment_id": payment_id,
        }, ctx)

    @function_tool(strict_mode=False)
    @compensable(undo=_undo_for(store, "update_reservation_flights"), classify=refused, scope=SCOPE)
    async def update_reservation_flights(
        ctx: ToolContext[Any], reservation_id: str, cabin: str, flights: Records, payment_id: str,
    ) -> str:
        """Update the flight information of a reservation."""
        return run("update_reservation_flights", {
            "reservation_id": reservation_id, "cabin": cabin, "flights": flights,
            "payment_id": payment_id,
        }, ctx)

    @function_tool(strict_mode=False)
    @compensable(undo=_undo_for(store, "update_reservation_passengers"), classify=refused, scope=SCOPE)
    async def update_reservation_passengers(
        ctx: ToolContext[Any], reservation_id: str, passengers: Records,
    ) -> str:
        """Update the passenger information of a reservation."""
        return run("update_reservation_passengers", {
            "reservation_id": reservation_id, "passengers": passengers,
        }, ctx)

    built = [
        book_reservation, calculate, cancel_reservation, get_reservation_details,
        get_user_details, list_all_airports, search_direct_flight, search_onestop_flight,
        send_certificate, think, transfer_to_human_agents, update_reservation_baggages,
        update_reservation_flights, update_reservation_passengers,
    ]
    assert [t.name for t in built] == list(TOOLS), "one agent tool per domain tool"
    definitions = _recorded_definitions(store.data_dir)
    return [_as_recorded(tool, definitions) for tool in built]


def plain_tools(tools: list[FunctionTool]) -> list[FunctionTool]:
    """The same tools without the saga layer: plain ``@function_tool`` over the same bodies.

    No declaration, no journaling, no approval (``needs_approval`` is not set): what an
    application would run without ``sagacity_agents``. Used as the reference replay (the clean
    mode's database must end the same) and as the baseline of the overhead measurement.

    Args:
        tools: Tools from :func:`make_tools`.

    Returns:
        New ``FunctionTool`` objects with the same names, descriptions and schemas.
    """
    plain = []
    for tool in tools:
        body = tool.__wrapped__.__wrapped__  # FunctionTool -> saga wrapper -> our body
        bare = function_tool(body, name_override=tool.name, strict_mode=False)
        plain.append(dataclasses.replace(
            bare, description=tool.description, params_json_schema=tool.params_json_schema
        ))
    return plain
