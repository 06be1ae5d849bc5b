"""The in-memory approval store: for tests and short-lived processes (one process)."""

from __future__ import annotations

import builtins
import dataclasses
import datetime as dt
import threading

from ...errors import ApprovalError
from ...core.approval import (
    ApprovalRequest,
    Decision,
    DecisionNotifier,
    apply_decision,
    check_decision,
    consume_refusal,
    unique_ids,
)
from ...core.canonical import format_timestamp

__all__ = ["InMemoryApprovalStore"]


class InMemoryApprovalStore:
    """An :class:`ApprovalStore` held in this process's memory (tests, short-lived processes).

    One ``threading.Lock`` guards every read-modify-write (never held across an ``await``), so
    :meth:`consume` is atomic across tasks and threads.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[str, ApprovalRequest] = {}
        self._snapshots: dict[str, str] = {}
        self.notifier = DecisionNotifier()
        """Woken by :meth:`decide`; used by :func:`wait_for_decision`."""

    async def create(self, request: ApprovalRequest) -> None:
        """See :meth:`ApprovalStore.create`."""
        with self._lock:
            if request.request_id in self._requests:
                raise ApprovalError(f"approval request {request.request_id!r} already exists")
            self._requests[request.request_id] = request

    async def get(self, request_id: str) -> ApprovalRequest | None:
        """See :meth:`ApprovalStore.get`."""
        with self._lock:
            return self._requests.get(request_id)

    async def list(
        self, saga_id: str | None = None, *, pending_only: bool = False
    ) -> builtins.list[ApprovalRequest]:
        """See :meth:`ApprovalStore.list`."""
        with self._lock:
            found = [
                r
                for r in self._requests.values()
                if (saga_id is None or r.saga_id == saga_id) and (not pending_only or r.pending)
            ]
        return sorted(found, key=lambda r: r.created_at)  # stable: ties keep insertion order

    async def decide(
        self,
        request_id: str,
        decision: Decision,
        approver: str | None,
        reason: str | None,
        at: dt.datetime,
    ) -> ApprovalRequest:
        """See :meth:`ApprovalStore.decide`."""
        check_decision(decision)
        decided_at = format_timestamp(at)
        with self._lock:
            updated, changed = apply_decision(
                self._requests.get(request_id), request_id, decision, approver, reason, decided_at
            )
            if changed:
                self._requests[request_id] = updated
        if changed:
            self.notifier.notify(request_id)
        return updated

    async def consume(self, request_ids: builtins.list[str], at: dt.datetime) -> None:
        """See :meth:`ApprovalStore.consume`."""
        consumed_at = format_timestamp(at)
        ids = unique_ids(request_ids)
        with self._lock:
            unknown = [i for i in ids if i not in self._requests]
            consumed = [
                i for i in ids if i in self._requests and self._requests[i].consumed_at is not None
            ]
            if unknown or consumed:
                raise consume_refusal(unknown, consumed)
            for i in ids:
                self._requests[i] = dataclasses.replace(self._requests[i], consumed_at=consumed_at)

    async def save_snapshot(self, saga_id: str, snapshot: str) -> None:
        """See :meth:`ApprovalStore.save_snapshot`."""
        if not isinstance(snapshot, str):
            raise TypeError("snapshot must be a str")
        with self._lock:
            self._snapshots[saga_id] = snapshot

    async def load_snapshot(self, saga_id: str) -> str | None:
        """See :meth:`ApprovalStore.load_snapshot`."""
        with self._lock:
            return self._snapshots.get(saga_id)

    async def delete_snapshot(self, saga_id: str) -> None:
        """See :meth:`ApprovalStore.delete_snapshot`."""
        with self._lock:
            self._snapshots.pop(saga_id, None)

    async def close(self) -> None:
        """Nothing to release."""
