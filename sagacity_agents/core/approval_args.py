"""What an approval request and a paused run's snapshot hold of a call's sensitive values.

An approval binds a human's decision to a call's exact arguments by their SHA-256 (design.md,
"Approvals"). Hashing the clear arguments would force the journal, the approval store and the
snapshot to keep a card number in clear for the binding to be checked; so a request of version 2
(``core.approval.ARGS_VERSION``) hashes the *committed* arguments instead: each sensitive value
replaced by its keyed commitment (``core.sensitive``, ``core.data_keys``). Two equal values of
one saga commit alike, so the binding holds (a resume with another card number hashes
differently and is refused), and ``verify`` checks it from the journal alone, with no key.

* :func:`committed_args`: the arguments as an INTENT of the call will store them (the same
  commitment function, the same masks), which is what the request's hash covers.
* :func:`stored_snapshot` / :func:`opened_snapshot`: the RunState snapshot of a paused saga is
  stored encrypted under the saga's key when values are stored (a master key), else *masked*
  (every card number and every sensitive value the saga met replaced by its mask, the user's
  prompt and the model's tool-call argument text included): a resume of a masked snapshot whose
  pending call needs a masked value refuses (``SENSITIVE_NOT_STORED``) instead of running the
  tool with ``****``.
* :func:`sealed_request_args` / :func:`shown_args`: the store keeps the committed arguments (what
  the hash covers, checked with no key) and the clear ones sealed under the saga's key; an
  approver sees the clear value only when the process holds the key, the mask otherwise.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import DataKeyError, JournalError
from .canonical import to_canonical_value
from .data_keys import DataKeys, SagaSecrets, is_sealed_text
from .sensitive import (
    DEFAULT_SENSITIVITY, MIN_KNOWN_LENGTH, Sensitivity, masked, redact, redact_text,
)

__all__ = [
    "APPROVAL_ARGS_PURPOSE", "SNAPSHOT_PURPOSE", "approver_view", "committed_args", "data_keys_of", "committed_raw_args",
    "holds_sensitive", "masked_snapshot", "opened_snapshot", "sealed_request_args",
    "sensitivity_of", "shown_args", "stored_snapshot",
]

SNAPSHOT_PURPOSE = "snapshot"
"""``SagaSecrets.seal_text`` purpose of a stored RunState snapshot (its own HKDF key)."""

APPROVAL_ARGS_PURPOSE = "approval-args"
"""``SagaSecrets.seal_text`` purpose of a request's clear arguments in the approval store."""


def sensitivity_of(decl: Any) -> Sensitivity:
    """What is sensitive in the calls of a tool declared ``decl`` (a
    ``core.declarations.ToolDeclaration``; its ``sensitivity``), the defaults when it is
    ``None`` or declares nothing."""
    return Sensitivity.of(getattr(decl, "sensitivity", None)) if decl is not None else DEFAULT_SENSITIVITY


def committed_args(secrets: SagaSecrets, args: Any, spec: Sensitivity = DEFAULT_SENSITIVITY) -> Any:
    """``args`` with each sensitive value committed, as a journal entry of the call stores them
    under its ``"args"`` data root (the commitment depends on the saga's data key and the value,
    never on the entry's write key).

    Done twice: the first pass remembers this call's sensitive strings (``SagaSecrets.known``),
    the second masks them inside the call's own free text too, as the INTENT written after it
    will (a note quoting the password). Only the commitment key is used: nothing is sealed.

    Args:
        secrets: the saga's secrets (``core.data_keys``).
        args: the canonical arguments (a JSON object, or the MCP ``{"arguments", "mcp_tool"}``).
        spec: the tool's :class:`~.sensitive.Sensitivity` (the defaults when undeclared).

    Returns:
        The committed arguments: ``args`` itself when nothing in it is sensitive.

    Raises:
        DataKeyError: ``NO_MASTER_KEY``: a value is sensitive and the saga's key is not in this
            process (a commitment cannot be made).
    """
    payload = {"args": to_canonical_value(args)}
    for _ in range(2):
        out, found = redact(payload, spec, secrets.commit, known=tuple(secrets.known),
                            generation=secrets.generation)
        if not found:
            return payload["args"]
        secrets.learn(found)  # as the INTENT's protect will: its own free text masks them
    return out["args"]


def committed_raw_args(secrets: SagaSecrets, raw_args: str | None,
                       spec: Sensitivity = DEFAULT_SENSITIVITY) -> Any:
    """The model's raw argument text as an entry stores it under ``"raw_args"``: itself, or a
    committed value when it holds a card number or a value the saga knows as sensitive (the
    INTENT of a call journaled from outside its body stores the same, which
    ``core.approval_rule`` compares when the approval covers such a call).

    Raises:
        DataKeyError: as :func:`committed_args`.
    """
    if raw_args is None:
        return None
    out, found = redact({"raw_args": raw_args}, spec, secrets.commit, known=tuple(secrets.known),
                        generation=secrets.generation)
    return out["raw_args"] if found else raw_args


def holds_sensitive(args: Any, spec: Sensitivity = DEFAULT_SENSITIVITY) -> bool:
    """Whether ``args`` (canonical) hold a value ``spec`` calls sensitive: a version 1 request
    that does cannot be resumed (its binding needs the clear value the journal must not keep)."""
    _out, found = redact({"args": args}, spec, lambda _value: "")
    return bool(found)


def _structural(key: Any) -> bool:
    """A RunState key whose string value the SDK itself made (an id, a hash, an approval scope):
    never free text, and masking it would make the snapshot unreadable."""
    return isinstance(key, str) and (key == "id" or key.endswith(("_id", "_scope")) or "hash" in key)


def _mask_strings(value: Any, known: tuple[str, ...]) -> Any:
    if type(value) is str:
        shown = redact_text(value, DEFAULT_SENSITIVITY, known)
        return value if shown is None else shown
    if type(value) is dict:
        return {k: v if _structural(k) else _mask_strings(v, known) for k, v in value.items()}
    if type(value) is list:
        return [_mask_strings(v, known) for v in value]
    return value


def masked_snapshot(snapshot: dict[str, Any], known: Any = ()) -> dict[str, Any]:
    """``snapshot`` (a RunState's JSON) with every card number, and every value in ``known``,
    replaced by its mask in every string (keys are kept): the user's prompt, the model's text and
    each tool call's argument JSON text. What is stored when values cannot be (no master key)."""
    values = tuple(k for k in known if len(k) >= MIN_KNOWN_LENGTH)
    out: dict[str, Any] = _mask_strings(snapshot, values)
    return out


def stored_snapshot(secrets: SagaSecrets | None, snapshot: dict[str, Any]) -> str:
    """The text a paused run's snapshot is stored as (its SHA-256 is journaled).

    Sealed under the saga's snapshot key when values are stored (``secrets.stored``); masked
    (:func:`masked_snapshot`, with the saga's known sensitive values) otherwise.

    Raises:
        DataKeyError: the saga's key is not in this process although values are stored.
    """
    if secrets is not None and secrets.stored:
        return secrets.seal_text(SNAPSHOT_PURPOSE, json.dumps(snapshot, sort_keys=True))
    known = secrets.known if secrets is not None else ()
    return json.dumps(masked_snapshot(snapshot, known), sort_keys=True)


def opened_snapshot(secrets: SagaSecrets | None, stored: str) -> tuple[str, bool]:
    """The snapshot text ``stored`` holds, and whether it was sealed (``False``: a masked or a
    pre-upgrade plain snapshot).

    Raises:
        DataKeyError: sealed, and the saga's key is not in this process, or it does not open
            (``DataErasedError`` when the saga's key was erased).
    """
    if not is_sealed_text(stored):
        return stored, False
    if secrets is None or not (secrets.stored or secrets.erased):
        raise DataKeyError("the snapshot is sealed and no master data key is configured "
                           "(SAGACITY_DATA_KEY)", code="NO_MASTER_KEY")
    return secrets.open_text(SNAPSHOT_PURPOSE, stored), True


def sealed_request_args(secrets: SagaSecrets, args: Any, raw_args: str | None,
                        needed: bool) -> str | None:
    """The clear arguments sealed for the approval store, or ``None`` when nothing is worth
    sealing (not ``needed``: the stored arguments hold no commitment or mask) or values are not
    stored (no master key)."""
    if not secrets.stored or not needed:
        return None
    return secrets.seal_text(APPROVAL_ARGS_PURPOSE, json.dumps({"args": args, "raw_args": raw_args},
                                                                sort_keys=True))


def shown_args(args: Any, raw_args: str | None, sealed: str | None,
               secrets: SagaSecrets | None) -> tuple[Any, str | None, bool]:
    """What an approver is shown of a request: ``(args, raw_args, clear)``.

    The clear arguments when ``sealed`` opens under ``secrets`` (``clear`` true); otherwise the
    stored (committed) arguments with each committed value as its mask (``**** **** **** 4242``),
    and the sensitive values of clear arguments (a version 1 request) masked too. Never raises
    for a missing or wrong key: the mask is shown.
    """
    if sealed is not None and secrets is not None:
        try:
            opened = json.loads(secrets.open_text(APPROVAL_ARGS_PURPOSE, sealed))
            return opened["args"], opened.get("raw_args"), True
        except (DataKeyError, ValueError, KeyError, TypeError):
            pass
    hidden, _found = redact({"args": args}, DEFAULT_SENSITIVITY, lambda _value: "")
    shown_raw = None if raw_args is None else (redact_text(raw_args, DEFAULT_SENSITIVITY) or raw_args)
    return masked(hidden["args"]), shown_raw, False


def data_keys_of(owner: Any) -> DataKeys:
    """The data keys of ``owner`` (a ``Sagacity``: its ``data_keys``), else those the
    environment names (``DataKeys.from_env()``: ``SAGACITY_DATA_KEY``).

    Raises:
        ConfigurationError: the environment's master key is not 32 bytes of base64 or hex.
    """
    keys = getattr(owner, "data_keys", None)
    return keys if isinstance(keys, DataKeys) else DataKeys.from_env()


async def approver_view(request: Any, journal: Any,
                        data_keys: DataKeys | None) -> tuple[Any, str | None, bool]:
    """:func:`shown_args` of the stored request ``request`` (``core.approval.ApprovalRequest``):
    clear only when this process holds the saga's key (``data_keys`` with a master key that
    wrapped it; read from ``journal``'s data-key store, never created).

    Never raises: a key that cannot be read shows the mask.
    """
    secrets = None
    if request.args_sealed is not None and data_keys is not None and data_keys.master is not None:
        try:
            secrets = await data_keys.for_saga(journal, request.saga_id, create=False)
        except (DataKeyError, JournalError):
            secrets = None
    return shown_args(request.args, request.raw_args, request.args_sealed, secrets)
