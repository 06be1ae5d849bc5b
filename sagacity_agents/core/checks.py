"""Far-side checks: before a human is asked about a call in doubt, recovery asks the tool.

A tool declared with ``check=`` (decorators, ``protect_tool``, an MCP policy) gets, for each of
its calls recovery finds in doubt (an INTENT without outcome, its run taken over), a
:class:`CheckContext` (saga, tool, journaled arguments, the INTENT's seq and the forward call's
idempotency key) and answers with a :class:`CheckResult`: the call **ran** (with the undo data
its undo needs), did **not run**, or **unknown**. Recovery journals the verdict as a CHECKED
entry under its lease (``{"target_seq", "verdict", "saw", "undo_data", "checker"}``); the ledger
reads a CHECKED "ran" like an EXECUTED (undone in the same recovery when it can be) and a
CHECKED "not run" like a human's "not run"; "unknown" leaves the call in doubt for a human.

A check that raises, returns something else, or outlasts its timeout (the declaration's
``check_timeout``, else its ``undo_timeout``) counts as "unknown", journaled with the reason: a
check can only spare a human a question, never make recovery act on a guess.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import DataKeyError, JournalError, LeaseLostError, describe_error
from .canonical import to_canonical_value
from .compensation import _declaration_for  # the walk's own rule: which declaration is the call's
from .entries import JournalEntry, Phase
from .ledger import SagaLedger
from .identity import derivation_of, journal_id_of
from .protection import opened

__all__ = ["CHECK_VERDICTS", "CheckContext", "CheckResult", "check_in_doubt", "run_check"]

CHECK_VERDICTS = ("ran", "not_run", "unknown")
"""The verdicts a check may give (journaled in CHECKED's ``verdict``)."""


@dataclass(frozen=True, slots=True)
class CheckContext:
    """What a far-side check receives about one call in doubt (values in journaled form)."""

    saga_id: str
    """The saga."""
    tool: str
    """The tool's name as journaled."""
    args: dict[str, Any]
    """The call's journaled arguments."""
    intent_seq: int
    """The seq of the call's INTENT."""
    call_idempotency_key: str
    """The forward call's idempotency key (``core.undo.call_idempotency_key``): look the call
    up by it at the far side."""
    call_id: str | None = None
    """The model's call id."""
    raw_args: str | None = None
    """The raw argument text (fallback-protected and MCP tools)."""


@dataclass(frozen=True, slots=True)
class CheckResult:
    """A check's verdict on a call in doubt. Build one with :meth:`ran`, :meth:`not_run` or
    :meth:`unknown`.

    Raises:
        ValueError: from the constructor, a verdict not in ``("ran", "not_run", "unknown")``,
            or undo data with a verdict other than "ran".
    """

    verdict: str
    """``"ran"``, ``"not_run"`` or ``"unknown"``."""
    saw: Any = None
    """What the check saw at the far side (JSON-able; journaled)."""
    undo_data: Any = None
    """With "ran": what the undo needs (JSON-able; given to it as ``ctx.undo_data``)."""

    def __post_init__(self) -> None:
        if self.verdict not in CHECK_VERDICTS:
            raise ValueError(f"a check's verdict is one of {CHECK_VERDICTS}, got {self.verdict!r}")
        if self.undo_data is not None and self.verdict != "ran":
            raise ValueError("only a call that ran has undo data")

    @classmethod
    def ran(cls, undo_data: Any = None, *, saw: Any = None) -> CheckResult:
        """The call's effect exists; ``undo_data``: what its undo needs (JSON-able)."""
        return cls("ran", saw, undo_data)

    @classmethod
    def not_run(cls, *, saw: Any = None) -> CheckResult:
        """The far side has no trace of the call: nothing to undo."""
        return cls("not_run", saw)

    @classmethod
    def unknown(cls, *, saw: Any = None) -> CheckResult:
        """The check cannot tell: a human answers."""
        return cls("unknown", saw)


async def _call(check: Callable[[CheckContext], Any], ctx: CheckContext) -> Any:
    """Run ``check(ctx)``: a coroutine function on the loop, a sync one in a worker thread (it
    may block on the network); an awaitable it returns is awaited."""
    if inspect.iscoroutinefunction(check):
        return await check(ctx)
    result = await asyncio.to_thread(check, ctx)
    return await result if inspect.isawaitable(result) else result


async def run_check(check: Callable[[CheckContext], Any], ctx: CheckContext, *,
                    timeout: float) -> tuple[CheckResult, str | None]:
    """Run a far-side check and read its verdict.

    Args:
        check: the declared check (sync or async).
        ctx: the call in doubt.
        timeout: seconds to wait for it.

    Returns:
        ``(result, error)``: the check's :class:`CheckResult` with its ``saw`` and ``undo_data``
        in journaled (canonical JSON) form, and ``None``; or an "unknown" result and why (it
        raised, timed out, returned no :class:`CheckResult`, or values with no canonical
        encoding). Never raises for the check (``asyncio.CancelledError`` of the caller
        propagates).
    """
    try:
        result = await asyncio.wait_for(_call(check, ctx), timeout)
    except asyncio.TimeoutError:
        return CheckResult.unknown(), f"check timed out after {timeout:g} s"
    except Exception as exc:  # noqa: BLE001 - a failing check knows nothing: unknown, said why
        return CheckResult.unknown(), f"check raised {describe_error(exc)}"
    if not isinstance(result, CheckResult):
        return CheckResult.unknown(), f"check returned {type(result).__name__}, not a CheckResult"
    try:
        return CheckResult(result.verdict, to_canonical_value(result.saw),
                           to_canonical_value(result.undo_data)), None
    except Exception as exc:  # noqa: BLE001 - unencodable: journaled as unknown with the reason
        return CheckResult.unknown(), f"check's answer has no canonical encoding ({describe_error(exc)})"


def _checker_name(decl: Any) -> str:
    check = decl.check
    return str(getattr(check, "__qualname__", None) or type(check).__qualname__)


async def check_in_doubt(saga: Any, entries: list[JournalEntry]) -> int:
    """Run the far-side check of every call in doubt in ``entries`` whose declaration has one,
    and journal each verdict (CHECKED) through the saga's fenced journal, under its lease.

    Called by a recovery after it took the saga's lease and before it compensates, so that a
    call a check finds "ran" is undone in the same recovery, one found "not run" is dropped,
    and only "unknown" is left for a human (module notes).

    Args:
        saga: the recovery's :class:`~sagacity_agents.core.saga.Saga` (its lease held, its
            declarations bound).
        entries: the saga's verified entries the recovery read.

    Returns:
        How many CHECKED entries were journaled.

    Raises:
        LeaseLostError: another run took the saga over meanwhile (nothing more is checked).
        A CHECKED that cannot be written is skipped: its call stays in doubt, for a human.
    """
    written = 0
    derivation = derivation_of(entries, await journal_id_of(saga.journal))
    for intent in SagaLedger(entries).in_doubt():
        payload = intent.payload if isinstance(intent.payload, dict) else {}
        decl, _unsure = _declaration_for(saga.declarations, intent.tool or "",
                                         payload.get("declaration"), payload.get("agent"),
                                         saga.agent_declarations, payload.get("scope"))
        if decl is None or decl.check is None:
            continue
        try:  # the check reads the call's arguments in clear (masks where nothing is stored)
            clear = opened(saga.secrets, intent)
        except DataKeyError:
            continue  # erased, or not openable here: the call stays in doubt, for a human
        clear = clear if isinstance(clear, dict) else {}
        ctx = CheckContext(saga_id=saga.saga_id, tool=intent.tool or "",
                           args=clear.get("args") or {}, intent_seq=intent.seq,
                           call_idempotency_key=derivation.call_key(saga.saga_id, intent.seq),
                           call_id=intent.call_id, raw_args=clear.get("raw_args"))
        result, error = await run_check(decl.check, ctx, timeout=decl.check_timeout or decl.undo_timeout)
        body: dict[str, Any] = {"target_seq": intent.seq, "verdict": result.verdict,
                                "saw": result.saw, "checker": _checker_name(decl)}
        if result.verdict == "ran":
            body["undo_data"] = result.undo_data
        if error is not None:
            body["error"] = error
        try:
            await saga.journal.append(saga.saga_id, Phase.CHECKED, tool=intent.tool,
                                      write_key=f"check:{intent.seq}:{saga.fence}",
                                      call_id=intent.call_id, payload=body,
                                      sensitive=decl.sensitivity)
        except LeaseLostError:
            raise
        except JournalError:
            continue  # not journaled: the call stays in doubt, reported to a human
        written += 1
    return written
