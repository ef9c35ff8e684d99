"""Serving certificates: a development CA and certificate (tollgate.runtime.certificates serves and reloads them).

The files follow the layout of a `kubernetes.io/tls` Secret (and of cert-manager's): `tls.crt`, `tls.key`
and `ca.crt` in one directory, so the same service runs on a generated pair, a Helm-generated Secret or a
cert-manager Certificate.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tollgate.runtime.certificates import CERT_FILE, KEY_FILE

log = logging.getLogger("tollgate.webhook.certs")

CA_FILE = "ca.crt"


@dataclass(frozen=True)
class Bundle:
    """PEM texts: the CA certificate (the webhook configurations' caBundle), the serving pair."""

    ca: bytes
    cert: bytes
    key: bytes

    def write(self, directory: Path) -> None:
        """Into `directory` as ca.crt, tls.crt and tls.key (the key readable by its owner only)."""
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in ((CA_FILE, self.ca), (CERT_FILE, self.cert)):
            _replace(directory / name, data, 0o644)
        _replace(directory / KEY_FILE, self.key, 0o600)


def _replace(path: Path, data: bytes, mode: int) -> None:
    """Write next to `path` and rename over it, so a reader never sees half a file."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(data)
    temporary.chmod(mode)
    temporary.replace(path)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def generate(hosts: list[str], days: int = 365, common_name: str = "tollgate-webhook") -> Bundle:
    """A new CA and a serving certificate it signs for `hosts` (DNS names and IP addresses)."""
    if not hosts:
        raise ValueError("a serving certificate needs at least one host name or address")
    now = datetime.now(UTC) - timedelta(minutes=5)  # tolerate clocks slightly behind ours
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name(f"{common_name}-ca"))
        .issuer_name(_name(f"{common_name}-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return Bundle(ca=ca.public_bytes(pem), cert=cert.public_bytes(pem), key=_key_pem(key))


def ensure(directory: Path, hosts: list[str]) -> Bundle:
    """The bundle in `directory`, generated first when any of its files is missing."""
    paths = [directory / name for name in (CA_FILE, CERT_FILE, KEY_FILE)]
    if not all(path.exists() for path in paths):
        generate(hosts).write(directory)
    return Bundle(*(path.read_bytes() for path in paths))
