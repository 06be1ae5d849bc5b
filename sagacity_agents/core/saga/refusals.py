"""Calls a saga refuses: an irreversible call without a consumed approval of its exact arguments
(the grant is read from the journal, ``core.grants``), and, under the REFUSE_EFFECTS policy, any
call that would change the world after the saga failed.
A call refused before its INTENT is journaled FAILED (``not_run``); one refused by the policy is
journaled REFUSED, and the model is told the saga's verdict.
"""

from __future__ import annotations

from typing import Any, NoReturn

from ...errors import ApprovalError, DataKeyError
from ...errors import describe_error as _describe
from ..approval_args import committed_args
from ..canonical import canonical_bytes, sha256_hex
from ..declarations import ToolDeclaration
from ..entries import JournalEntry, Phase
from ..evidence import verified_entries
from ..grants import grant_for_call
from ..protection import remember_raw_args
from ..sensitive import DEFAULT_SENSITIVITY, Sensitivity
from .outcomes import OutcomeLog
from .payloads import REVERSIBILITY_TEXT, encode_or_marker, sensitivity_of
from .state import SagaCore
from .status import FailurePolicy, FailureRecord
from .verdict import VerdictSource, changes_world, read_verdict

__all__ = ["Refusals"]


class Refusals:
    """Refusing calls, before their INTENT or by policy (a part of :class:`~.saga.Saga`).

    Args:
        core: the saga's shared state.
        outcomes: where a REFUSED entry is written (or held).
        saga: what the saga's verdict is read from (the model is told it).
    """

    def __init__(self, core: SagaCore, outcomes: OutcomeLog, saga: VerdictSource) -> None:
        self.core = core
        self.outcomes = outcomes
        self.saga = saga
        self._claimed: set[str] = set()  # approvals taken by calls of this saga object
        self.resumed_approvals: set[str | None] = set()
        """Call ids whose approval a resume of this object consumed (CONSUMED journaled): only
        such a call of an undeclared tool reads the journal for its grant."""

    async def refused_before_intent(
        self, error: Exception, tool: str, call_id: str | None, invocation: str,
        extra: dict[str, Any], spec: Sensitivity = DEFAULT_SENSITIVITY,
    ) -> NoReturn:
        """Journal FAILED (``not_run``) for a call refused before its INTENT, fail the saga,
        and raise ``error``. ``spec``: what is sensitive in the call's values."""
        remember_raw_args(self.core.secrets, extra.get("raw_args"), spec)
        seq = None
        try:
            entry = await self.core.journal.append(
                self.core.saga_id, Phase.FAILED, write_key=f"{invocation}:outcome", tool=tool,
                call_id=call_id,
                payload={"intent_seq": None, "not_run": True, "error": str(error), **extra},
                sensitive=spec,
            )
            seq = entry.seq
        finally:
            self.core.note_failure(FailureRecord(seq, tool, call_id, str(error), error))
        raise error

    def committed_digest(self, args: Any, spec: Sensitivity | None) -> str | None:
        """SHA-256 of ``args`` committed as this saga's view will store them in the call's
        INTENT (what a version 2 approval is bound to, ``core.approval_args``); ``None`` when the
        view commits nothing for this saga (no secrets: the INTENT stores the clear arguments).
        A sensitive value with no key here gives a hash no approval has (fail closed)."""
        secrets = getattr(self.core.journal, "secrets", {}).get(self.core.saga_id)
        if secrets is None:
            return None
        try:
            return sha256_hex(canonical_bytes(committed_args(secrets, args, spec or Sensitivity())))
        except DataKeyError:
            return "0" * 64  # no commitment can be made: nothing approved matches

    async def check_grant(
        self, tool: str, call_id: str | None, args: dict[str, Any], invocation: str, *,
        required: bool = True, spec: Sensitivity | None = None,
    ) -> str | None:
        """Execution-time approval check of an irreversible call (fail closed).

        The call runs only when the saga's journal holds APPROVED and CONSUMED for this call
        and the SHA-256 of the canonical arguments the body is about to receive, not yet used by
        an INTENT (``core.grants``). Grants come from the journal, never from memory, so a
        ``RunState`` approved through the SDK's own API, a forged snapshot, or a decision never
        consumed by a resume runs nothing. Anything else is journaled as FAILED, fails the saga,
        and raises :class:`~sagacity_agents.errors.ApprovalError`.

        With ``required=False`` (an undeclared tool the SDK may pause) a call for which
        the journal holds no decision at all runs without one (``None``); one that has a
        decision is held to it exactly as an irreversible call is.

        ``spec``: the tool's :class:`~..sensitive.Sensitivity` (default: the defaults): a
        version 2 request is bound to the arguments committed under it (:meth:`committed_digest`).

        Returns:
            The request id the call uses up (journaled in its INTENT), or ``None`` (only with
            ``required=False``).
        """
        digest = sha256_hex(canonical_bytes(args))
        committed = self.committed_digest(args, spec)
        code: str | None  # which check refused (ApprovalError.code)
        try:
            # Acted on only once it verifies (and, with a keyring, its decisions' signatures).
            entries = await verified_entries(self.core.journal, self.core.saga_id, self.core.evidence)
        except Exception as exc:  # noqa: BLE001 - fail closed: no evidence, no run
            problem, code = f"the journal could not be read or verified ({_describe(exc)})", "JOURNAL_UNVERIFIED"
        else:
            with self.core.lock:
                request_id, problem, code = grant_for_call(
                    entries, tool=tool, call_id=call_id, args_hash=digest,
                    claimed=self._claimed, committed_hash=committed,
                )
                if request_id is not None:
                    self._claimed.add(request_id)
                    return request_id
                if not required and code == "NO_CONSUMED_APPROVAL":
                    return None
        error = ApprovalError(f"{tool} (call {call_id}) refused: {problem}; the tool was not run",
                              code=code)
        await self.refused_before_intent(
            # The committed hash when there is one: a plain SHA-256 of a card number's arguments
            # could be brute-forced from the journal.
            error, tool, call_id, invocation,
            {"args": encode_or_marker(args), "args_hash": committed or digest}, spec or DEFAULT_SENSITIVITY)

    def refuses_effects(self, decl: ToolDeclaration | None) -> bool:
        """Whether the REFUSE_EFFECTS policy refuses a call of a tool declared ``decl`` now: the
        saga has failed and the tool may change the world (``decl`` ``None``: undeclared)."""
        core = self.core
        return bool(core.failures) and core.policy is FailurePolicy.REFUSE_EFFECTS and changes_world(decl)

    async def refuse_call(
        self, decl: ToolDeclaration | None, tool: str, call_id: str | None,
        args: dict[str, Any] | None, *, raw_args: str | None = None, refused_by: str,
        intent: JournalEntry | None = None,
    ) -> str:
        """Refuse one call because the saga has failed: journal REFUSED (the body is not run, no
        INTENT is written) and return the message for the model (:meth:`SagaVerdict.model_message`).

        Args:
            decl: the tool's declaration (``None``: undeclared).
            tool, call_id: the call.
            args: validated arguments when known (the wrapper), else ``None``.
            raw_args: the raw argument text (guardrails see only that).
            refused_by: who refused it (journaled): ``"policy"`` or a guardrail's name.
            intent: the call's INTENT when it was written before the refusal (the saga failed
                while it was being written): the REFUSED entry is then its one outcome.

        Returns:
            The message the model gets instead of the tool's output. It is returned even when the
            REFUSED entry cannot be written (the entry is then held and retried like an outcome).
        """
        message = (await read_verdict(self.saga)).model_message()
        payload: dict[str, Any] = {
            "intent_seq": intent.seq if intent else None, "not_run": True, "result": message,
            "refused_by": refused_by,
            "reason": "saga failed",
            "reversibility": REVERSIBILITY_TEXT[decl.reversibility] if decl else "undeclared",
        }
        if args is not None:
            payload["args"] = encode_or_marker(args)
        if raw_args is not None:
            payload["raw_args"] = raw_args
            remember_raw_args(self.core.secrets, raw_args, sensitivity_of(decl))
        invocation = intent.write_key.rsplit(":", 1)[0] if intent else self.core.invocation_id()
        keys: dict[str, Any] = {"write_key": f"{invocation}:outcome", "tool": tool, "call_id": call_id,
                                "sensitive": sensitivity_of(decl)}
        await self.outcomes.write(Phase.REFUSED, payload, keys)  # held and retried if refused
        return message
