"""The saga's guardrails for Agents SDK agents, and the verdict they hand back.

* :func:`saga_output_guardrail`: an output guardrail that withholds the agent's final answer
  when the saga has failed, been compensated or has a call in doubt;
* :func:`saga_tool_guardrail`: a tool input guardrail that refuses further calls that change
  the world once the saga has failed.

Their ``output_info`` is a :class:`SagaVerdict`: the failed calls, what will be undone, what is
in doubt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import on_first_use
from .core.saga.verdict import SagaVerdict

if TYPE_CHECKING:
    from .sdk.guardrails import saga_output_guardrail, saga_tool_guardrail

__getattr__ = on_first_use(globals())  # the guardrails: from the Agents SDK adapter

__all__ = ["SagaVerdict", "saga_output_guardrail", "saga_tool_guardrail"]
