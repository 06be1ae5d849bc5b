"""Signed checkpoints in a directory: :class:`DirectoryCheckpointStore`, a
:class:`~sagacity_agents.core.checkpoints.CheckpointStore` that keeps one JSON Lines file per saga
(put it on storage the journal's writers cannot rewrite: another host, WORM, a separate account).
"""

from __future__ import annotations

import asyncio
import builtins
import json
import os
from pathlib import Path

from ...core.canonical import sha256_hex
from ...core.checkpoints import Checkpoint

__all__ = ["DirectoryCheckpointStore"]


class DirectoryCheckpointStore:
    """Checkpoints as JSON Lines, one file per saga (named by SHA-256 of the saga id) in a directory.

    Each :meth:`put` appends one line with ``O_APPEND`` and ``fsync``: lines are never rewritten.

    Args:
        path: the directory (created if missing).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    def _file(self, saga_id: str) -> Path:
        return self.path / f"{sha256_hex(saga_id.encode('utf-8'))[:40]}.jsonl"

    def _put_sync(self, checkpoint: Checkpoint) -> None:
        line = (json.dumps(checkpoint.to_json(), sort_keys=True) + "\n").encode("utf-8")
        fd = os.open(self._file(checkpoint.saga_id), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _read(self, path: Path) -> builtins.list[Checkpoint]:
        try:
            text = path.read_text("utf-8")
        except FileNotFoundError:
            return []
        return [Checkpoint.from_json(json.loads(line)) for line in text.splitlines() if line.strip()]

    async def put(self, checkpoint: Checkpoint) -> None:
        """See :meth:`CheckpointStore.put`."""
        await asyncio.to_thread(self._put_sync, checkpoint)

    async def list(self, saga_id: str) -> builtins.list[Checkpoint]:
        """See :meth:`CheckpointStore.list`.

        Raises:
            ValueError: also when the saga's file holds a checkpoint of another saga (files
                swapped or copied between sagas: dropping those lines would hide the swap).
        """
        found = await asyncio.to_thread(self._read, self._file(saga_id))
        other = next((c for c in found if c.saga_id != saga_id), None)
        if other is not None:
            raise ValueError(f"the checkpoint file of saga {saga_id!r} holds a checkpoint of saga "
                             f"{other.saga_id!r}: files were swapped or copied")
        return found

    async def saga_ids(self) -> builtins.list[str]:
        """See :meth:`CheckpointStore.saga_ids`."""

        def scan() -> builtins.list[str]:
            # Line by line, skipping what does not parse: one damaged file must not stop the
            # other sagas from being listed; ``list`` of its saga reports the damage.
            ids: dict[str, None] = {}
            for path in sorted(self.path.glob("*.jsonl")):
                for line in path.read_bytes().splitlines():
                    try:
                        ids.setdefault(Checkpoint.from_json(json.loads(line)).saga_id, None)
                    except ValueError:
                        continue
            return list(ids)

        return await asyncio.to_thread(scan)
