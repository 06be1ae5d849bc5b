"""The trip agent: three tools, each declared with its undo, and the agent that uses them.

``book_flight`` and ``book_hotel`` are compensatable: each hands its booking id to the undo with
``record_undo_data`` (the string it returns is for the model, the undo data is for the undo).
``charge_card`` is compensatable too (its undo is a refund), so a charge that went through would
be refunded if a later step failed. In the demo the card is declined: ``charge_card`` raises
:class:`~sagacity_agents.demo.booking.CardDeclined`, and the saga undoes the hotel, then the flight.
The agent's output guardrail withholds the model's "Your trip is booked!".
"""

from __future__ import annotations

import os
from typing import Any

from agents import Agent, FunctionTool, Tool, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from ..core.undo import CompensationContext
from ..core.saga import record_undo_data
from ..sdk.guardrails import saga_output_guardrail
from ..sdk.tools import compensable
from .booking import BookingSystem

__all__ = [
    "CARD",
    "FINAL_MESSAGE",
    "INSTRUCTIONS",
    "TRIP_REQUEST",
    "build_agent",
    "scripted_model",
    "trip_tools",
]

CARD = "4000 0000 0000 0002"
"""The traveller's card (the booking system declines it)."""

TRIP_REQUEST = (
    "Book me a flight to Lisbon on 2025-06-12 and a hotel there for 3 nights, "
    f"then charge the total of 740 EUR to my card {CARD}."
)
"""What the traveller asks for."""

INSTRUCTIONS = (
    "You are a travel agent. Book the flight first, then the hotel, then charge the card "
    "once for the total. Use the tools; do not ask questions."
)

FINAL_MESSAGE = "Your trip is booked! Flight and hotel in Lisbon are confirmed. Enjoy!"
"""What the scripted model says after the card charge, whatever the charge's output was."""


DEMO_SCOPE = "demo"
"""The scope of the demo's tools: every run builds them again around its own
:class:`BookingSystem`, and a declaration whose undo captures other objects than the first one
under its id needs a scope (the same one for every rebuild, as for tools built per request)."""


def trip_tools(booking: BookingSystem, *, scope: str = DEMO_SCOPE) -> list[FunctionTool]:
    """The agent's tools, bound to ``booking``. Saga decorators go *under* ``@function_tool``.

    Args:
        booking: the booking system the tools (and their undos) act on.
        scope: the declarations' scope, journaled with each call (default ``"demo"``); a
            recovery runs only undos of the same scope.
    """

    def cancel_flight(ctx: CompensationContext) -> None:
        booking.cancel_flight(ctx.undo_data["flight_id"], key=ctx.idempotency_key)

    def cancel_hotel(ctx: CompensationContext) -> None:
        booking.cancel_hotel(ctx.undo_data["hotel_id"], key=ctx.idempotency_key)

    def refund_charge(ctx: CompensationContext) -> None:
        booking.refund(ctx.undo_data["charge_id"], key=ctx.idempotency_key)

    @function_tool
    @compensable(undo=cancel_flight, scope=scope)
    def book_flight(destination: str, date: str) -> str:
        """Book a flight to a destination on a date (YYYY-MM-DD)."""
        flight_id = booking.book_flight(destination, date)
        record_undo_data({"flight_id": flight_id})
        return f"Flight {flight_id} to {destination} on {date} is booked."

    @function_tool
    @compensable(undo=cancel_hotel, scope=scope)
    def book_hotel(city: str, nights: int) -> str:
        """Book a hotel room in a city for a number of nights."""
        hotel_id = booking.book_hotel(city, nights)
        record_undo_data({"hotel_id": hotel_id})
        return f"Hotel {hotel_id} in {city} for {nights} nights is booked."

    @function_tool
    @compensable(undo=refund_charge, scope=scope)
    def charge_card(card_number: str, amount_eur: int) -> str:
        """Charge the traveller's card with an amount in euros."""
        charge_id = booking.charge(card_number, amount_eur)  # raises CardDeclined
        record_undo_data({"charge_id": charge_id})
        return f"Charged {amount_eur} EUR ({charge_id})."

    return [book_flight, book_hotel, charge_card]


def scripted_model() -> ScriptedModel:
    """A deterministic model: flight, hotel, charge, then a cheerful final message.

    The script does not look at the tool outputs: like a model that is only told "an error
    occurred", it carries on as if the charge had worked.
    """
    return ScriptedModel(
        [
            [function_call("book_flight", {"destination": "Lisbon", "date": "2025-06-12"}, call_id="call_flight")],
            [function_call("book_hotel", {"city": "Lisbon", "nights": 3}, call_id="call_hotel")],
            [function_call("charge_card", {"card_number": CARD, "amount_eur": 740}, call_id="call_charge")],
            [assistant_message(FINAL_MESSAGE)],
        ]
    )


def build_agent(booking: BookingSystem, *, real_model: bool = False) -> Agent[Any]:
    """The trip agent, with the scripted model or (``real_model``) the SDK's default OpenAI model.

    It carries :func:`~sagacity_agents.saga_output_guardrail`, so a cheerful final answer after a
    failed (and compensated) saga is withheld rather than returned as a success.
    The real model needs ``OPENAI_API_KEY``; ``SAGACITY_DEMO_MODEL`` picks another model name.
    """
    model: Any = None
    if not real_model:
        model = scripted_model()
    elif os.environ.get("SAGACITY_DEMO_MODEL"):
        model = os.environ["SAGACITY_DEMO_MODEL"]
    kwargs: dict[str, Any] = {} if model is None else {"model": model}
    tools: list[Tool] = list(trip_tools(booking))
    return Agent(name="trip-agent", instructions=INSTRUCTIONS, tools=tools,
                 output_guardrails=[saga_output_guardrail()], **kwargs)
