"""Who is calling /mutate and /validate: the API server, proved by its client certificate, or not.

The TLS handshake has already verified any certificate a client presented against the client CA
(certs/reloader.py, CERT_OPTIONAL); what is left per request is to look at that certificate:
present, meant for client authentication, and named as configured (`authentication.allowedNames`
against its subject common name and DNS names). The certificate reaches the app through the ASGI
`tls` extension (webhook/server/transport.py).

Modes (config `authentication.mode`): `required` answers an unauthenticated caller 401 before its
body is read; `permissive` answers it, as dryRun (nothing written); `off` treats
every caller as authenticated and is announced loudly at startup.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from prometheus_client import Counter

from policies.kernel.metric_kinds import KeptChildren
from webhook.config import Authentication

log = logging.getLogger(__name__)

CALLERS = Counter(
    "kgwe_admission_callers_total",
    "Callers of the admission endpoints by authentication result: authenticated, refused, dry_run, unchecked.",
    ["endpoint", "result"],
)


@dataclass(frozen=True)
class CallerCheck:
    """The verdict on one request's caller."""

    authenticated: bool
    refused: bool  # answer 401, read nothing
    reason: str = ""


def certificate_names(certificate: x509.Certificate) -> list[str]:
    """The subject common names and DNS subject alternative names of a certificate."""
    names = [str(attr.value) for attr in certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    try:
        san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names.extend(san.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        pass
    return names


def _for_client_auth(certificate: x509.Certificate) -> bool:
    try:
        usages = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return True  # no EKU: any purpose (RFC 5280 4.2.1.12)
    return ExtendedKeyUsageOID.CLIENT_AUTH in usages or ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE in usages


# Verdicts kept per distinct client certificate; past this many, the cache starts again (a caller
# presenting ever new certificates makes it parse each once, as it would without the cache).
VERDICTS_KEPT = 256

_ALLOWED = CallerCheck(True, False)


class CallerAuthenticator:
    """Decides, per request, whether the caller is the API server. Built once, from the config at start."""

    def __init__(self, settings: Authentication) -> None:
        self.mode: Literal["off", "permissive", "required"] = settings.effective_mode
        self.allowed_names = frozenset(name for name in settings.allowed_names if name)
        # The verdict on a certificate depends on its bytes and on allowedNames, fixed for the process's life;
        # the handshake verified the chain already. Parsing it (x509, extensions, names) cost 57-82 us per
        # request, 5-7 % of a /validate answer (docs/performance.md, "Per core"); the API server sends every
        # request of a connection with the same certificate, which the connection's `tls` extension holds as
        # one string, so a lookup hashes it once per connection.
        self._verdicts: dict[str, tuple[bool, str]] = {}
        self._counters = KeptChildren(CALLERS)

    def _count(self, endpoint: str, result: str) -> None:
        self._counters(endpoint, result).inc()

    def identify(self, scope: Mapping[str, Any]) -> tuple[bool, str]:
        """(authenticated, why not) from the request's verified client certificate."""
        tls = (scope.get("extensions") or {}).get("tls")
        if not isinstance(tls, dict):
            return False, "not a TLS connection of this server"
        chain = tls.get("client_cert_chain") or []
        if not chain:
            return False, "no client certificate"
        pem = str(chain[0])
        verdict = self._verdicts.get(pem)
        if verdict is None:
            if len(self._verdicts) >= VERDICTS_KEPT:
                self._verdicts.clear()
            verdict = self._verdicts[pem] = self._judge(pem)
        return verdict

    def _judge(self, pem: str) -> tuple[bool, str]:
        try:
            certificate = x509.load_pem_x509_certificate(pem.encode("ascii"))
        except ValueError:
            return False, "unreadable client certificate"
        if not _for_client_auth(certificate):
            return False, "client certificate is not for client authentication"
        names = certificate_names(certificate)
        if not self.allowed_names.intersection(names):
            return False, f"client certificate name {', '.join(names)[:200] or '(none)'} is not allowed"
        return True, ""

    def check(self, scope: Mapping[str, Any], endpoint: str) -> CallerCheck:
        if self.mode == "off":
            self._count(endpoint, "unchecked")
            return _ALLOWED
        authenticated, reason = self.identify(scope)
        if authenticated:
            self._count(endpoint, "authenticated")
            return _ALLOWED
        client = scope.get("client")
        where = f"{client[0]}:{client[1]}" if isinstance(client, list | tuple) and len(client) == 2 else "?"
        if self.mode == "required":
            self._count(endpoint, "refused")
            log.debug("%s from %s refused: %s", endpoint, where, reason)
            return CallerCheck(False, True, reason)
        self._count(endpoint, "dry_run")
        log.debug("%s from %s not authenticated (%s): answered as dryRun (authentication.mode permissive)",
                 endpoint, where, reason)
        return CallerCheck(False, False, reason)

    def announce(self) -> None:
        """Say at startup what protects the admission endpoints (loudly when nothing does)."""
        if self.mode == "off":
            log.warning(
                "authentication is OFF: anyone who can reach this port can call /mutate and /validate "
                "(no call holds or changes any tenant's quota: KGWE releases pods that exist). "
                "Set authentication.clientCAFile (docs/security.md)."
            )
        elif self.mode == "permissive":
            log.warning(
                "authentication is PERMISSIVE: callers without an allowed client certificate are answered "
                "as dryRun (nothing written). Switch authentication.mode to required once the API server "
                "presents its certificate (docs/security.md)."
            )
        else:
            log.info("admission callers must present a client certificate named %s",
                     ", ".join(sorted(self.allowed_names)))
