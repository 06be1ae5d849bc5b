"""An application that mounts the approval inbox and resumes a saga once it is decided.

The payments agent of ``examples/wire_transfer`` pauses on its irreversible ``send_wire``. This
app (FastAPI; any Starlette app mounts it the same way):

* ``POST /pay`` starts a payment: the saga pauses, waiting for a human;
* ``/approvals/`` is the inbox (``sagacity_agents.web.create_app``), mounted under a prefix
  with ``mount_inbox``, which runs the inbox's lifespan inside the app's (polling starts with
  the app, not at the inbox's first request);
* ``on_decided`` resumes the saga in the background once its request is decided: the app owns
  the agent and its context, so resuming stays its job. Decisions made elsewhere (the CLI, another
  replica) are seen by polling, and a second resume of the same saga is refused (run lease,
  CONSUMED claim): the wire runs once.

Run it with ``python -m examples.approval_inbox`` (uvicorn on 127.0.0.1:8000).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from sagacity_agents import Sagacity
from sagacity_agents.approvals import ApprovalRequest
from sagacity_agents.web import TokenLogin, create_app, mount_inbox

from ..wire_transfer.app import agent

DB = os.environ.get("SAGACITY_DB", "inbox-example.db")
"""The journal (and approval store): a SQLite file here, a postgresql:// URI works the same."""

TOKEN = os.environ.get("INBOX_TOKEN") or secrets.token_urlsafe(18)
"""alice's sign-in token (printed by ``__main__`` when it was generated)."""

sagacity = Sagacity(DB)
resumed: list[Any] = []
"""Every resume's result (or refusal), for the curious and the tests."""


async def resume_when_decided(saga_id: str, requests: list[ApprovalRequest]) -> None:
    """``on_decided``: every pending request of ``saga_id`` is decided; finish the saga."""
    try:
        result = await sagacity.resume(saga_id, agent(), context=None)  # your trusted context here
        resumed.append(result.status.value)
    except Exception as exc:  # noqa: BLE001 - a second replica's resume is refused: fine
        resumed.append(exc)


inbox = create_app(sagacity, authenticator=TokenLogin({"alice": TOKEN}),
                   secret_key=os.environ.get("SAGACITY_WEB_SECRET"), on_decided=resume_when_decided,
                   poll_interval=2.0)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Close the journal at shutdown (after the inbox: ``mount_inbox`` nests its lifespan
    inside this one)."""
    yield
    await sagacity.aclose()


app = FastAPI(title="payments", lifespan=lifespan)
mount_inbox(app, "/approvals", inbox)  # not app.mount: that would run no lifespan of the inbox,
# and decisions made with the CLI would reach resume_when_decided only after a request to it.


@app.post("/pay")
async def pay() -> dict[str, Any]:
    """Start paying invoice 42: the run pauses on the wire, waiting for an approver."""
    result = await sagacity.run(agent(), "Pay invoice 42 to our supplier.")
    return {"saga_id": result.saga_id, "status": result.status.value,
            "approvals": [f"/approvals/requests/{r.request_id}" for r in result.approvals]}
