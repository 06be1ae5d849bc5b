"""A saga's protection in use: the keys a writer holds, how a saga gets its secrets once it
holds its run lease, and what an undo or a check is given back.

The shapes are ``core.sensitive`` (what is sensitive, committed values, masks) and
``core.data_keys`` (master key, per-saga data keys, sealing). This module joins them to the
saga's writers:

* :func:`data_keys_of` turns what an application configures (``Sagacity(data_key=...)``: a
  key's text, a :class:`~.data_keys.MasterKey`, a :class:`~.data_keys.DataKeys`, or ``None`` for
  ``SAGACITY_DATA_KEY``) into one :class:`~.data_keys.DataKeys`, shared by every writer the
  application makes (the live sagas, recovery, resolve, checks), so one saga commits alike in
  all of them;
* :func:`secure` gives a saga's view its secrets (``view.secrets[saga_id]``): every append of
  the saga through that view is then committed and sealed (``AppendRequest.build``). A run
  calls it once it holds the saga's lease, so a refused run creates no data key;
* :func:`remember_raw_args` teaches the secrets the values named inside a call's raw argument
  text (a JSON object the model wrote): a text is not parsed by ``core.sensitive``, so a
  ``"password"`` inside it would otherwise stay in clear; each value found is then masked
  inside the text (and the whole text committed);
* :func:`opened` is what an undo (or a far-side check) gets: the entry's payload with its
  sealed values put back in clear, and the mask for a committed value with nothing stored
  (no master key when it was written: the issue's rule). An erased saga raises
  :class:`~sagacity_agents.errors.DataErasedError`: its undo is not run on masks.

With no master key a saga's data key is made in memory (32 random bytes, no I/O), so the cost
per run stays a few HKDF derivations.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from ..errors import ConfigurationError, DataErasedError, DataKeyError
from .data_keys import (
    DATA_KEY_ENVVAR, PREVIOUS_DATA_KEYS_ENVVAR, DataKeys, MasterKey, SagaSecrets,
)
from .entries import JournalEntry
from .fence import FencedJournal, JournalView
from .sensitive import (
    DEFAULT_SENSITIVITY, MIN_KNOWN_LENGTH, Sensitivity, is_committed, masked, redact,
)

__all__ = [
    "data_keys_of", "default_data_keys", "erased_reason", "held_secrets", "opened", "protected_view",
    "remember_raw_args", "secure", "undo_payloads",
]

_DEFAULT: dict[tuple[str, str], DataKeys] = {}
_DEFAULT_LOCK = threading.Lock()


def default_data_keys() -> DataKeys:
    """The process's :class:`DataKeys` for ``SAGACITY_DATA_KEY`` / ``SAGACITY_DATA_KEY_PREVIOUS``
    as they are now: one object per distinct setting, so every writer made without explicit
    keys (a ``Saga`` built by hand, a recovery) shares the in-memory keys of a saga.

    Raises:
        ConfigurationError: a key that is not 32 bytes of base64 or hex.
    """
    setting = (os.environ.get(DATA_KEY_ENVVAR, "").strip(),
               os.environ.get(PREVIOUS_DATA_KEYS_ENVVAR, "").strip())
    found = _DEFAULT.get(setting)
    if found is None:
        made = DataKeys.from_env({DATA_KEY_ENVVAR: setting[0], PREVIOUS_DATA_KEYS_ENVVAR: setting[1]})
        with _DEFAULT_LOCK:
            found = _DEFAULT.setdefault(setting, made)
    return found


def data_keys_of(source: Any) -> DataKeys:
    """The :class:`DataKeys` an application configured.

    Args:
        source: ``None`` (``SAGACITY_DATA_KEY`` from the environment, :func:`default_data_keys`),
            a master key's text (base64 of 32 bytes or 64 hex digits), a :class:`MasterKey`,
            or a :class:`DataKeys` (used as is: tests inject ``random_bytes``).

    Raises:
        ConfigurationError: a text that is not a master key, or another type.
    """
    if source is None:
        return default_data_keys()
    if isinstance(source, DataKeys):
        return source
    if isinstance(source, MasterKey):
        return DataKeys(source)
    if isinstance(source, str):
        return DataKeys(MasterKey.from_text(source))
    raise ConfigurationError(
        f"data_key= takes a master key's text ({DATA_KEY_ENVVAR}'s form), a MasterKey or a "
        f"DataKeys, not {type(source).__name__}")


async def secure(view: Any, data_keys: DataKeys, saga_id: str, *,
                 journal_id: str | None = None) -> SagaSecrets:
    """``saga_id``'s secrets, made or loaded (``DataKeys.for_saga``: a stored key is written,
    wrapped, before this returns), and given to ``view`` so that every append of the saga
    through it is protected.

    Args:
        view: the writer's view (``core.fence.JournalView``; a backend gets nothing set: its
            appends are not protected).
        data_keys: the application's keys.
        saga_id: the saga.
        journal_id: the journal's id when the caller has read it (``""``: it has none);
            ``None``: read here.

    Raises:
        DataKeyError: the saga's stored key was wrapped by a master key this process lacks.
        JournalError: the data-key store could not be read or written.
    """
    if journal_id is None:
        secrets = await data_keys.for_saga(view, saga_id)
    else:
        secrets = await data_keys.secrets_for(getattr(view, "backend", view), saga_id,
                                              journal_id=journal_id)
    held = getattr(view, "secrets", None)
    if isinstance(held, dict):
        held[saga_id] = secrets
        view.data_keys = data_keys  # a late append reloads from them (FencedJournal.rekey)
    return secrets


def remember_raw_args(secrets: SagaSecrets | None, raw_args: Any,
                      spec: Sensitivity = DEFAULT_SENSITIVITY) -> None:
    """Teach ``secrets`` the sensitive values named in ``raw_args``, a call's raw argument text
    (a JSON object), so that the append that journals the text masks each inside it.

    The text is parsed as ``args`` (and ``raw_args``, for paths rooted there) under ``spec``;
    strings (and numbers) of at least ``core.sensitive.MIN_KNOWN_LENGTH`` characters found are
    remembered. Text that is not JSON is left to the card-number scan. Never raises.
    """
    if secrets is None or not isinstance(raw_args, str) or "{" not in raw_args:
        return
    try:
        parsed = json.loads(raw_args)
    except ValueError:
        return
    if not isinstance(parsed, (dict, list)):
        return
    _, found = redact({"args": parsed, "raw_args": parsed}, spec, lambda _value: "")
    for item in found:
        value = item.value
        text = value if isinstance(value, str) else (
            json.dumps(value) if isinstance(value, (int, float)) and not isinstance(value, bool)
            else None)
        if text is not None and len(text) >= MIN_KNOWN_LENGTH:
            secrets.known.add(text)


def opened(secrets: SagaSecrets | None, entry: JournalEntry) -> Any:
    """``entry``'s payload as an undo or a check gets it: sealed values in clear, committed
    values with nothing stored replaced by their masks (``core.sensitive.masked``).

    Args:
        secrets: the saga's secrets (``None``: masks only).
        entry: one of the saga's entries.

    Raises:
        DataErasedError: the saga's data key was erased: its values are gone.
        DataKeyError: the values are stored but cannot be opened here (no master key, another
            one, or sealed bytes that do not open at their place).
    """
    payload = entry.payload
    if secrets is not None:
        payload = secrets.reveal(payload, getattr(entry, "sealed", None), entry.write_key)
        if payload is not entry.payload:
            _learn(secrets, entry.payload, payload)
    return masked(payload)


def _learn(secrets: SagaSecrets, committed: Any, clear: Any) -> None:
    """Remember the clear strings ``clear`` holds where ``committed`` holds committed values:
    a recovery in another process then masks them in what it journals (an undo's error text
    quoting the card it was given), as the run that first saw them did."""
    if is_committed(committed):
        if isinstance(clear, str) and len(clear) >= MIN_KNOWN_LENGTH:
            secrets.known.add(clear)
    elif isinstance(committed, dict) and isinstance(clear, dict):
        for key, value in committed.items():
            _learn(secrets, value, clear.get(key))
    elif isinstance(committed, list) and isinstance(clear, list):
        for old, new in zip(committed, clear):
            _learn(secrets, old, new)


def undo_payloads(secrets: SagaSecrets | None, intent: JournalEntry,
                  outcome: JournalEntry) -> tuple[dict[str, Any], dict[str, Any]]:
    """The INTENT's and the outcome's payloads as :func:`opened` gives them (``{}`` for a
    payload that is not an object).

    Raises:
        DataErasedError, DataKeyError: as :func:`opened`.
    """
    first, second = opened(secrets, intent), opened(secrets, outcome)
    return (first if isinstance(first, dict) else {}), (second if isinstance(second, dict) else {})


def erased_reason(exc: DataKeyError, saga_id: str) -> str:
    """The report's reason for an undo not run because its values cannot be opened: an erasure
    is named as such (the undo is never run on masks), any other key problem with what to set."""
    if isinstance(exc, DataErasedError):
        return (f"undo not run: sensitive data erased (saga {saga_id}'s data key was destroyed: "
                "`sagacity saga erase`); the effect may exist: undo it by hand")
    return (f"undo not run: its sensitive values cannot be opened here ({exc}); set "
            f"{DATA_KEY_ENVVAR} to the master key that wrapped them and recover again")


def protected_view(journal: Any, saga_id: str, secrets: SagaSecrets) -> Any:
    """A writer's view of ``journal`` whose appends to ``saga_id`` are protected by ``secrets``
    (for writers outside a run: a human's answer, an erasure's late outcome). A live saga's
    fenced view is given the secrets and returned as it is; another view is copied (same
    tagger), so a shared view keeps no saga's secrets."""
    if isinstance(journal, FencedJournal):
        journal.secrets[saga_id] = secrets
        return journal
    view = JournalView(journal, tagger=journal.tagger if isinstance(journal, JournalView) else None)
    view.secrets[saga_id] = secrets
    return view


def held_secrets(journal: Any, saga_id: str) -> SagaSecrets | None:
    """The secrets a writer's view holds for ``saga_id`` (``None``: none, or not a view)."""
    found = journal.secrets.get(saga_id) if isinstance(journal, JournalView) else None
    return found if isinstance(found, SagaSecrets) else None
