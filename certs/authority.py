"""A small certificate authority for the webhook: a long-lived CA and a short-lived serving certificate.

Everything here is pure (bytes in, bytes out); `files.py` and `kube.py` store the result. The rules
follow the outage stories in REFERENCE B 5.2: the CA lives for years, the leaf for months and is
renewed well before it expires, and a rotated CA stays in the bundle next to its successor until it
expires, so the API server trusts the serving certificate during every step of a rotation.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Tolerate clocks a few minutes behind ours on the API server.
BACKDATE = dt.timedelta(minutes=5)
CA_COMMON_NAME = "kgwe-webhook-ca"


@dataclass(frozen=True)
class Settings:
    service: str = "kgwe-webhook"
    namespace: str = "kgwe"
    ca_validity_days: int = 3650
    cert_validity_days: int = 90
    renew_before_days: int = 30
    extra_dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ("127.0.0.1",)

    def dns_names(self) -> list[str]:
        return [*service_dns_names(self.service, self.namespace), *self.extra_dns_names]


@dataclass(frozen=True)
class Material:
    """What the webhook and the API server need: the trust bundle, the CA key, and the serving pair."""

    ca_bundle: bytes  # PEM; the current CA first, then older CAs that are still valid
    ca_key: bytes
    tls_cert: bytes
    tls_key: bytes

    def current_ca(self) -> x509.Certificate:
        return x509.load_pem_x509_certificates(self.ca_bundle)[0]

    def leaf(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.tls_cert)


@dataclass
class Changes:
    ca_rotated: bool = False
    leaf_issued: bool = False
    reasons: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.ca_rotated or self.leaf_issued


def service_dns_names(service: str, namespace: str) -> list[str]:
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
        "localhost",
    ]


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _new_key() -> ec.EllipticCurvePrivateKey:
    # P-256: cheaper TLS handshakes than RSA, accepted by every Kubernetes API server.
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    # PKCS#8, the one encoding every TLS server (uvicorn, granian) loads.
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _load_key(pem: bytes) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("KGWE's CA key must be an EC key")
    return key


def new_ca(
    validity_days: int, now: dt.datetime | None = None, common_name: str = CA_COMMON_NAME
) -> tuple[bytes, bytes]:
    """(CA certificate PEM, CA key PEM)."""
    now = now or _utcnow()
    key = _new_key()
    name = x509.Name([
        x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, f"kgwe {now:%Y%m%d%H%M%S}"),
    ])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + dt.timedelta(days=validity_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def new_serving_cert(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    dns_names: Sequence[str],
    ip_addresses: Iterable[str] = ("127.0.0.1",),
    validity_days: int = 90,
    now: dt.datetime | None = None,
) -> tuple[bytes, bytes]:
    """(serving certificate PEM, its key PEM), signed by the CA."""
    now = now or _utcnow()
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = _load_key(ca_key_pem)
    key = _new_key()
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    not_after = min(now + dt.timedelta(days=validity_days), ca_cert.not_valid_after_utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, key_cert_sign=False, crl_sign=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def new_client_cert(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    common_name: str,
    validity_days: int = 365,
    now: dt.datetime | None = None,
) -> tuple[bytes, bytes]:
    """(client certificate PEM, its key PEM) for TLS client authentication, signed by the CA.

    This is the certificate the API server presents to the webhook (docs/security.md); the webhook
    accepts it when `common_name` is in `authentication.allowedNames`.
    """
    now = now or _utcnow()
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = _load_key(ca_key_pem)
    key = _new_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(min(now + dt.timedelta(days=validity_days), ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, key_cert_sign=False, crl_sign=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def bundle(certificates: Iterable[x509.Certificate], now: dt.datetime | None = None) -> bytes:
    """PEM bundle of the certificates that are still valid, in order, without duplicates."""
    now = now or _utcnow()
    seen: set[bytes] = set()
    parts: list[bytes] = []
    for cert in certificates:
        fingerprint = cert.fingerprint(hashes.SHA256())
        if fingerprint in seen or cert.not_valid_after_utc <= now:
            continue
        seen.add(fingerprint)
        parts.append(cert.public_bytes(serialization.Encoding.PEM))
    return b"".join(parts)


def leaf_problems(material: Material, settings: Settings, now: dt.datetime | None = None) -> list[str]:
    """Why the serving certificate must be replaced (empty when it is fine)."""
    now = now or _utcnow()
    try:
        leaf = material.leaf()
        key = serialization.load_pem_private_key(material.tls_key, password=None)
    except ValueError as exc:
        return [f"serving certificate or key unreadable: {exc}"]
    problems = []
    renew_at = leaf.not_valid_after_utc - dt.timedelta(days=settings.renew_before_days)
    if now >= renew_at:
        problems.append(f"serving certificate expires {leaf.not_valid_after_utc:%Y-%m-%d}, inside the renewal window")
    if key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo) != (
        leaf.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    ):
        problems.append("serving key does not match the certificate")
    try:
        leaf.verify_directly_issued_by(material.current_ca())
    except (ValueError, TypeError, InvalidSignature):
        problems.append("serving certificate is not signed by the current CA")
    try:
        san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        present = set(san.get_values_for_type(x509.DNSName))
        present |= {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    except x509.ExtensionNotFound:
        present = set()
    missing = [n for n in [*settings.dns_names(), *settings.ip_addresses] if n not in present]
    if missing:
        problems.append(f"serving certificate lacks names {', '.join(missing)}")
    return problems


def ca_problems(material: Material, settings: Settings, now: dt.datetime | None = None) -> list[str]:
    """Why the CA must be rotated: it would not outlive a fresh leaf plus its renewal window."""
    now = now or _utcnow()
    try:
        ca = material.current_ca()
        _load_key(material.ca_key)
    except (ValueError, IndexError) as exc:
        return [f"CA certificate or key unreadable: {exc}"]
    needed = dt.timedelta(days=settings.cert_validity_days + settings.renew_before_days)
    if ca.not_valid_after_utc - now < needed:
        return [f"CA expires {ca.not_valid_after_utc:%Y-%m-%d}, too soon to sign a {settings.cert_validity_days}-day"
                " certificate"]
    return []


def reconcile(
    existing: Material | None, settings: Settings, *, rotate_ca: bool = False, now: dt.datetime | None = None
) -> tuple[Material, Changes]:
    """The material to use from now on: `existing` where it is still good, renewed parts where not.

    A rotated CA is put in front of the old one in the bundle; publish the bundle (caBundle) before
    serving the new leaf so the API server trusts it at every moment.
    """
    now = now or _utcnow()
    if existing is None:
        ca_reasons = ["no certificates yet"]
    else:
        ca_reasons = ["CA rotation requested"] if rotate_ca else ca_problems(existing, settings, now)
    changes = Changes(reasons=list(ca_reasons))
    material = existing
    if ca_reasons or material is None:
        ca_pem, ca_key = new_ca(settings.ca_validity_days, now)
        previous = x509.load_pem_x509_certificates(existing.ca_bundle) if existing is not None else []
        ca_bundle = bundle([x509.load_pem_x509_certificate(ca_pem), *previous], now)
        material = Material(ca_bundle, ca_key, b"", b"")
        changes.ca_rotated = True
    else:
        changes.reasons.extend(leaf_problems(material, settings, now))
    if changes.reasons:
        ca_pem = material.current_ca().public_bytes(serialization.Encoding.PEM)
        tls_cert, tls_key = new_serving_cert(
            ca_pem, material.ca_key, settings.dns_names(), settings.ip_addresses, settings.cert_validity_days, now
        )
        material = Material(material.ca_bundle, material.ca_key, tls_cert, tls_key)
        changes.leaf_issued = True
    return material, changes
