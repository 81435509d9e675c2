"""What the tests' own HTTP clients and servers share."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

#: The TLS context of the tests' httpx clients, made once per process: httpx otherwise loads the
#: CA bundle for every client it makes (about 35 ms of CPU), plain-HTTP ones to 127.0.0.1
#: included. Polling /healthz with a new client every 50 ms cost a gateway's start more CPU than
#: the start itself, and slowed it.
TLS = ssl.create_default_context()


def self_signed_certificate(directory: Path, *names: str) -> tuple[Path, Path]:
    """A CA-less self-signed certificate for ``names`` (host names or IP literals), written to
    ``directory``: (certificate path, key path), both PEM. An EC key: quick to make."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    alternatives: list[x509.GeneralName] = []
    for name in names:
        try:
            alternatives.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alternatives.append(x509.DNSName(name))
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName(alternatives), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "server.pem", directory / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


@contextlib.asynccontextmanager
async def tls_site(app: web.Application, cert: Path, key: Path) -> AsyncIterator[int]:
    """``app`` served over TLS with ``cert`` and ``key`` on 127.0.0.1, a free port: yields the
    port, and stops the server on leaving."""
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        yield site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    finally:
        await runner.cleanup()
