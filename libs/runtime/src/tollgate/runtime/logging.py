"""JSON-lines logging (python-json-logger): one object per record with time, level, service, logger, message,
the trace_id and span_id of the span current when the record was made, and any `extra=` fields."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from opentelemetry import trace
from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

# kopf attaches its whole OperatorSettings and internal flags to every record; the object reference is kept.
_KOPF_INTERNALS = ("settings", "k8s_skip", "k8s_ref")


class _ContextFields(logging.Filter):
    """Adds what the JSON line carries beyond the record's own attributes: the lower-case level, the current span's
    trace_id and span_id (W3C hex, as trace backends show them) and the kopf object reference as object/kind."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.level = record.levelname.lower()
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            record.trace_id = trace.format_trace_id(context.trace_id)
            record.span_id = trace.format_span_id(context.span_id)
        reference = getattr(record, "k8s_ref", None)
        if isinstance(reference, dict) and reference.get("name"):
            record.object = "/".join(str(reference[k]) for k in ("namespace", "name") if reference.get(k))
            record.kind = reference.get("kind")
        return True


def json_formatter(service: str) -> JsonFormatter:
    return JsonFormatter(
        ["level", "name", "message"],
        rename_fields={"name": "logger", "exc_info": "exception"},
        static_fields={"service": service},
        reserved_attrs=[*RESERVED_ATTRS, *_KOPF_INTERNALS, "taskName"],
        timestamp="time",
    )


def setup_logging(service: str, level: str = "INFO", fmt: str = "json", stream: TextIO | None = None) -> None:
    """Replace the root logger's handlers with one that writes `fmt` lines to `stream` (stderr)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(_ContextFields())
    if fmt == "json":
        handler.setFormatter(json_formatter(service))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
