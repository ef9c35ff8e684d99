"""A serving certificate that follows its files, for every TLS server of tollgate (the webhook's HTTPS, the
allocator's gRPC): a renewed certificate is served without a restart.

The files follow the layout of a `kubernetes.io/tls` Secret (and of cert-manager's): `tls.crt` and `tls.key` in
one directory, which the kubelet swaps atomically on renewal. A change is told by content (a hash), not by file
stamps, so a pair rewritten within one mtime tick, or swapped through a symlink, is seen all the same. A pair
that does not load (half-written, a key that does not match) is logged and skipped: the previous pair keeps
serving until the files hold a good one. Connections already open keep the pair they started with.
"""

from __future__ import annotations

import hashlib
import logging
import ssl
from pathlib import Path

import grpc

log = logging.getLogger("tollgate.runtime.certificates")

CERT_FILE, KEY_FILE = "tls.crt", "tls.key"


class ServingCertificate:
    """The pair in `directory`; `reload()` takes it up again when its content changed. Raises FileNotFoundError
    when the directory holds no usable pair to start with."""

    def __init__(self, directory: Path) -> None:
        self.cert_file, self.key_file = directory / CERT_FILE, directory / KEY_FILE
        self.cert = self.key = b""
        self._fingerprint = b""
        self._context: ssl.SSLContext | None = None
        if not self.reload():
            raise FileNotFoundError(f"no usable certificate and key at {self.cert_file} and {self.key_file}")

    def _check(self) -> None:
        """Load the files on a scratch context: a failed load can leave a context without its key."""
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(self.cert_file, self.key_file)

    def reload(self) -> bool:
        """Take the pair up when its content changed; True when what is served is what the files hold."""
        try:
            cert, key = self.cert_file.read_bytes(), self.key_file.read_bytes()
        except OSError as error:
            log.warning("certificate not reloaded", extra={"cert_file": str(self.cert_file), "error": str(error)})
            return False
        fingerprint = hashlib.sha256(cert + b"\0" + key).digest()
        if fingerprint == self._fingerprint:
            return True
        try:
            self._check()
            if self._context is not None:
                self._context.load_cert_chain(self.cert_file, self.key_file)
        except (ssl.SSLError, OSError) as error:
            log.warning("certificate not reloaded", extra={"cert_file": str(self.cert_file), "error": str(error)})
            return False
        first = not self._fingerprint
        self.cert, self.key, self._fingerprint = cert, key, fingerprint
        if not first:
            log.info("serving certificate reloaded", extra={"cert_file": str(self.cert_file)})
        return True

    def ssl_context(self) -> ssl.SSLContext:
        """A server context (TLS 1.2 at least) on the pair, which every `reload()` that sees a new pair updates:
        the handshakes that follow use it."""
        if self._context is None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.load_cert_chain(self.cert_file, self.key_file)
            self._context = context
        return self._context

    def grpc_credentials(self) -> grpc.ServerCredentials:
        """gRPC server credentials on the pair; gRPC asks before each handshake, which reloads changed files."""

        def fetch() -> grpc.ServerCertificateConfiguration | None:
            before = self._fingerprint
            self.reload()
            return self._grpc_configuration() if self._fingerprint != before else None

        return grpc.dynamic_ssl_server_credentials(self._grpc_configuration(), fetch)

    def _grpc_configuration(self) -> grpc.ServerCertificateConfiguration:
        return grpc.ssl_server_certificate_configuration([(self.key, self.cert)])
