"""What authenticating every entry costs (issue 19): the two schemes weighed, the per-append
cost of the tag, and the verify rate with a keyring.

    python bench/authenticity.py [--entries 2000] [--rounds 5] [--json OUT]

1. **Schemes, per entry** (the tag's own work, nothing else): Ed25519 sign and verify of the
   entry statement (what ships, ``core.authenticity``), and HMAC-SHA256 under a key derived with
   HKDF-SHA256 from a 32-byte secret (the alternative: ``cryptography``'s HMAC and HKDF).
2. **Per append**: the in-memory journal (no I/O, so the tag is not hidden behind a commit) with
   and without a tagger, and the SQLite journal (``synchronous=NORMAL``) both ways; the median
   of ``--rounds`` rounds of ``--entries`` appends each, interleaved.
3. **Verify rate**: ``Evidence.check`` over one saga of ``--entries`` entries: the chain alone
   (no keyring), with the keyring and a cold tag cache (every tag verified), and warm (the tags
   remembered, as a live saga re-reads itself).

Figures depend on the host; the docs quote one run (docs/threat-model.md, "What a tag costs").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cryptography.hazmat.primitives import hashes, hmac  # noqa: E402
from cryptography.hazmat.primitives.kdf.hkdf import HKDF  # noqa: E402

from sagacity_agents.backends.memory.journal import InMemoryJournal  # noqa: E402
from sagacity_agents.backends.sqlite.journal import SqliteJournal  # noqa: E402
from sagacity_agents.core.authenticity import (  # noqa: E402
    EntryTagger, TagCache, signing_view, tag_statement, unlinked_bytes,
)
from sagacity_agents.core.entries import Phase  # noqa: E402
from sagacity_agents.core.evidence import Evidence  # noqa: E402
from sagacity_agents.core.signing import Keyring, generate_key  # noqa: E402

PAYLOAD = {"args": {"city": "Lisbon", "nights": 3, "guest": "Alice Example"}, "reversibility": "compensatable",
           "declaration": "hotels:book_hotel#0123456789ab"}


def per_call(fn, n: int) -> float:
    """Seconds per call of ``fn`` (best of 3 runs of ``n`` calls)."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, time.perf_counter() - start)
    return best / n


async def appends(journal, n: int, sid: str) -> float:
    start = time.perf_counter()
    for i in range(n):
        await journal.append(sid, Phase.INTENT, write_key=f"k{i}", tool="book_hotel", call_id=f"c{i}",
                             payload=PAYLOAD)
    return (time.perf_counter() - start) / n


async def main(args: argparse.Namespace) -> dict:
    keys = Path(tempfile.mkdtemp()) / "keys"
    generate_key(keys, "writer-1")
    keyring = Keyring.load(keys)
    out: dict = {"entries": args.entries, "rounds": args.rounds, "host": os.uname().nodename}

    # 1. schemes
    sample = InMemoryJournal()
    entry = await sample.append("s", Phase.INTENT, write_key="k", tool="book_hotel", call_id="c1", payload=PAYLOAD)
    unlinked = unlinked_bytes(entry.canonical, entry.seq, entry.prev_hash)
    tagger = EntryTagger(keyring)
    statement = tag_statement(unlinked, "writer-1")
    key = keyring.signing_key[1]
    signature = key.sign(statement)
    public = key.public_key()
    secret = os.urandom(32)
    mac_key = HKDF(hashes.SHA256(), 32, salt=None, info=b"sagacity.entry-tag.v1").derive(secret)

    def mac() -> bytes:
        h = hmac.HMAC(mac_key, hashes.SHA256())
        h.update(statement)
        return h.finalize()

    n = max(200, args.entries)
    out["scheme_us"] = {
        "ed25519_sign": per_call(lambda: key.sign(statement), n) * 1e6,
        "ed25519_verify": per_call(lambda: public.verify(signature, statement), n) * 1e6,
        "hmac_sha256": per_call(mac, n) * 1e6,
        "unlinked_bytes": per_call(lambda: unlinked_bytes(entry.canonical, entry.seq, entry.prev_hash), n) * 1e6,
        "tag_entry_total": per_call(lambda: tagger.tag_entry(entry), n) * 1e6,
    }

    # 2. per append, interleaved rounds
    rows: dict[str, list[float]] = {"memory": [], "memory_tagged": [], "sqlite_normal": [], "sqlite_normal_tagged": []}
    folder = Path(tempfile.mkdtemp())
    for r in range(args.rounds):
        for name in rows:
            if name.startswith("memory"):
                journal = InMemoryJournal()
            else:
                journal = SqliteJournal(folder / f"{name}-{r}.db", synchronous="NORMAL")
            if name.endswith("tagged"):
                journal = signing_view(journal, keyring)
            rows[name].append(await appends(journal, args.entries, f"s{r}"))
            await journal.close()
    out["append_us"] = {name: statistics.median(v) * 1e6 for name, v in rows.items()}
    out["tag_per_append_us"] = {
        "memory": out["append_us"]["memory_tagged"] - out["append_us"]["memory"],
        "sqlite_normal": out["append_us"]["sqlite_normal_tagged"] - out["append_us"]["sqlite_normal"],
    }

    # 3. verify rate
    journal = signing_view(InMemoryJournal(), keyring)
    await appends(journal, args.entries, "v")
    entries = await journal.entries("v")
    chain_only, keyed = Evidence(), Evidence(keyring=keyring)

    def rate(check) -> float:
        start = time.perf_counter()
        result = check()
        assert result.ok, result
        return len(entries) / (time.perf_counter() - start)

    out["verify_entries_per_s"] = {
        "chain_only": statistics.median(rate(lambda: chain_only.check("v", entries, None)) for _ in range(args.rounds)),
        "keyring_cold": statistics.median(
            rate(lambda: Evidence(keyring=keyring, tags=TagCache()).check("v", entries, None)) for _ in range(args.rounds)),
        "keyring_warm": statistics.median(rate(lambda: keyed.check("v", entries, None)) for _ in range(args.rounds)),
    }
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", default=None)
    ns = parser.parse_args()
    result = asyncio.run(main(ns))
    text = json.dumps(result, indent=1)
    print(text)
    if ns.json:
        Path(ns.json).write_text(text + "\n", encoding="utf-8")
