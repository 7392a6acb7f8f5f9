"""A worker's OpenTelemetry pipeline, from the standard `OTEL_*` variables.

`provider_from_env` builds the replay-safe SDK tracer provider (and the meter provider)
that export over OTLP when the variables ask for it; `flush` exports what a stopping
worker still holds. Kept apart from `tracing`, which says which spans a run makes and with
which ids: this module only says where they go, and it is the only part of tracing that
reads the environment or needs the OpenTelemetry SDK and exporters installed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import structlog
from opentelemetry import trace

__all__ = ["OTLP_ENDPOINT_ENVS", "TracingConfigError", "flush", "provider_from_env"]

log = structlog.get_logger("durable_agent.tracing")

OTLP_ENDPOINT_ENVS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def provider_from_env(environ: Mapping[str, str] | None = None) -> trace.TracerProvider | None:
    """A replay-safe SDK tracer provider exporting over OTLP when the standard variables ask
    for it (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`; protocol from
    `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` / `OTEL_EXPORTER_OTLP_PROTOCOL`, `http/protobuf` by
    default; service name from `OTEL_SERVICE_NAME`, else `durable-agent-worker`), else None.
    Metrics (`gen_ai.client.*`) go to the same endpoint unless `OTEL_METRICS_EXPORTER=none`.
    """
    env = os.environ if environ is None else environ
    if not any(env.get(name) for name in OTLP_ENDPOINT_ENVS):
        return None
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return None
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from temporalio.contrib.opentelemetry import create_tracer_provider
    except ImportError as error:
        raise TracingConfigError(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK is not installed: "
            "pip install 'durable-agent[otel]'"
        ) from error
    exporter: Any
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http import trace_exporter as http_exporter

        exporter = http_exporter.OTLPSpanExporter()
    elif protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc import (  # type: ignore[import-not-found,unused-ignore]
                trace_exporter as grpc_exporter,
            )
        except ImportError as error:
            raise TracingConfigError(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs opentelemetry-exporter-otlp-proto-grpc; "
                "install it, or use http/protobuf"
            ) from error
        exporter = grpc_exporter.OTLPSpanExporter()
    else:
        raise TracingConfigError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not supported; use http/protobuf "
            "(the default) or grpc"
        )
    attributes = {} if env.get("OTEL_SERVICE_NAME") else {"service.name": "durable-agent-worker"}
    provider = create_tracer_provider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    if env.get("OTEL_METRICS_EXPORTER", "otlp").lower() != "none" and protocol == "http/protobuf":
        _metrics_from_env(attributes)
    return provider


def _metrics_from_env(attributes: dict[str, str]) -> None:
    from opentelemetry import metrics
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    metrics.set_meter_provider(
        MeterProvider(metric_readers=[reader], resource=Resource.create(attributes))
    )


class TracingConfigError(Exception):
    """The OTLP settings ask for something this install cannot do."""


def flush(provider: trace.TracerProvider | None) -> None:
    """Exports what a stopping worker still holds: the spans of `provider`, the tracer
    provider its tracing resolves to (None: tracing is off), and the metrics."""
    if provider is None:
        return
    force_flush = getattr(provider, "force_flush", None)
    if callable(force_flush):
        try:
            force_flush(5_000)
        except Exception as error:
            log.warning("could not flush spans", error=repr(error))
    try:
        from opentelemetry import metrics

        meter_provider: Any = metrics.get_meter_provider()
        if callable(getattr(meter_provider, "force_flush", None)):
            meter_provider.force_flush(5_000)
    except Exception as error:
        log.warning("could not flush metrics", error=repr(error))
