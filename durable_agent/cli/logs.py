"""Logging setup: structlog for everything, JSON or console, stdlib records included.

Temporal's replay-safe `workflow.logger` and the SDK log through the standard library;
routing them through the same processors gives one consistent stream. Workflow records
carry Temporal's `temporal_workflow` context (workflow id, run id, type).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, Literal

import structlog
from opentelemetry import trace

__all__ = ["configure_logging"]

LogFormat = Literal["json", "console"]


def _flatten_temporal(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    record = event.get("_record")
    workflow_info = getattr(record, "temporal_workflow", None) if record else None
    if isinstance(workflow_info, dict):
        event.setdefault("workflow_id", workflow_info.get("workflow_id"))
        event.setdefault("run_id", workflow_info.get("run_id"))
    activity_info = getattr(record, "temporal_activity", None) if record else None
    if isinstance(activity_info, dict):
        event.setdefault("workflow_id", activity_info.get("workflow_id"))
        event.setdefault("run_id", activity_info.get("workflow_run_id"))
    for key in ("node", "reason", "tool_call_id", "approved", "decided_by"):
        if record is not None and hasattr(record, key):
            event.setdefault(key, getattr(record, key))
    return event


def _trace_ids(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """`trace_id` and `span_id` of the OpenTelemetry span current where the record was made
    (W3C hex, as backends show them), so logs and traces can be joined."""
    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        event.setdefault("trace_id", f"{context.trace_id:032x}")
        event.setdefault("span_id", f"{context.span_id:016x}")
    return event


def configure_logging(fmt: LogFormat = "console", level: int | str = logging.INFO) -> None:
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _trace_ids,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        # A record below the level is dropped before the shared chain (time stamp,
        # context) runs: an activity's INFO lines cost nothing on a WARNING worker.
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, _flatten_temporal],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
