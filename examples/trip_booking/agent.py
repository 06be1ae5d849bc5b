"""The trip agent: three tools declared with their undos, and the agent that uses them.

Source: ``sagacity_agents/demo/trip.py``. The pattern, in short::

    def trip_tools(booking, scope="demo"):  # built again around each run's booking system
        def cancel_flight(ctx: CompensationContext) -> None:
            booking.cancel_flight(ctx.undo_data["flight_id"], key=ctx.idempotency_key)

        @function_tool                                  # the SDK's decorator stays on top
        @compensable(undo=cancel_flight, scope=scope)   # ours goes under it, on the plain function
        def book_flight(destination: str, date: str) -> str:
            flight_id = booking.book_flight(destination, date)
            record_undo_data({"flight_id": flight_id})  # journaled, handed to the undo
            return f"Flight {flight_id} to {destination} on {date} is booked."
        ...

``book_hotel`` follows the same shape; ``charge_card`` is compensatable with a refund, and raises
``CardDeclined`` for the demo's card. Then, to run it under a saga::

    sagacity = Sagacity("journal.db", policy=FailurePolicy.CONTINUE)
    result = await sagacity.run(build_agent(BookingSystem("bookings.db")), TRIP_REQUEST)
    result.status            # SagaStatus.COMPENSATED
    result.report.undone     # book_hotel, then book_flight
    result.final_output      # None: the agent's saga_output_guardrail() withheld "booked!"
    result.withheld_reason   # which call failed and what was undone
"""

from sagacity_agents.demo.trip import (
    CARD,
    FINAL_MESSAGE,
    INSTRUCTIONS,
    TRIP_REQUEST,
    build_agent,
    scripted_model,
    trip_tools,
)

__all__ = [
    "CARD",
    "FINAL_MESSAGE",
    "INSTRUCTIONS",
    "TRIP_REQUEST",
    "build_agent",
    "scripted_model",
    "trip_tools",
]
