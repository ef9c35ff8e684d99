"""xds-protos ships old copies of OpenTelemetry's proto modules; the exporter we use must still import."""


def test_otlp_exporter_and_envoy_protos_coexist() -> None:
    from envoy.config.listener.v3 import listener_pb2
    from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter

    assert listener_pb2.Listener.DESCRIPTOR.full_name == "envoy.config.listener.v3.Listener"
    assert OTLPSpanExporter is not None
