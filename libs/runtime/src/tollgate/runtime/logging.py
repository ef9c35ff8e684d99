"""JSON-lines logging: one object per record with time, level, logger, message and any `extra=` fields."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

_STANDARD_ATTRIBUTES = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}
# kopf attaches its whole OperatorSettings and internal flags to every record; the object reference is kept.
_KOPF_INTERNALS = {"settings", "k8s_skip", "k8s_ref"}


class JSONFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRIBUTES and key not in _KOPF_INTERNALS and not key.startswith("_"):
                entry[key] = value
        reference = getattr(record, "k8s_ref", None)
        if isinstance(reference, dict) and reference.get("name"):
            entry["object"] = "/".join(str(reference[k]) for k in ("namespace", "name") if reference.get(k))
            entry["kind"] = reference.get("kind")
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def setup_logging(service: str, level: str = "INFO", fmt: str = "json", stream: TextIO | None = None) -> None:
    """Replace the root logger's handlers with one that writes `fmt` lines to `stream` (stderr)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    if fmt == "json":
        handler.setFormatter(JSONFormatter(service))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
