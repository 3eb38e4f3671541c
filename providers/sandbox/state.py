"""A stand-in's state on disk, so that ``make run`` restarts it where it was.

Alfred's database outlives a restart of ``make run``; the stand-ins must too, or an execution
in flight finds the zone, certificate or alias it recorded gone (``NoSuchHostedZone`` for a
zone id the fresh seed gave another value) and its lane ends ``recovery_required``. Each
stand-in that keeps state in memory writes it, as one JSON document, after every change that
took effect, and reads it back when it is made with the same file.

The document is written whole or not at all (a temporary file beside it, flushed to disk,
then renamed over it), so a stand-in killed mid-write restarts from the last complete state.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


class StateFile:
    """One JSON document at ``path``; its directory is made on the first save."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def load(self) -> dict[str, Any] | None:
        """The last document saved, or None when there is none yet."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        document = json.loads(text)
        if not isinstance(document, dict):
            raise ValueError(f"{self.path}: not a stand-in's state (a JSON object)")
        return document

    def save(self, document: dict[str, Any]) -> None:
        # dumps, not dump: dump streams through the encoder's pure-Python path, ten times
        # slower on a sandbox's thousands of record sets.
        text = json.dumps(document, separators=(",", ":"))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, partial = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.replace(partial, self.path)
        except BaseException:
            Path(partial).unlink(missing_ok=True)
            raise
