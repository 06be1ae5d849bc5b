"""Serve the example: ``python -m examples.approval_inbox`` (needs the web extra)."""

from __future__ import annotations

import uvicorn

from .app import DB, TOKEN, app

if __name__ == "__main__":
    print(f"journal {DB}; start a payment:  curl -X POST http://127.0.0.1:8000/pay")
    print(f"then open http://127.0.0.1:8000/approvals/ and sign in with: {TOKEN}")
    uvicorn.run(app, host="127.0.0.1", port=8000)
