"""The serving certificate `kgwe serve` makes for itself when given no --tls-cert-file (signed by KGWE's own CA
under the state directory, renewed as it nears its end), the line that tells a new user how to trust it, and the
expiry metric every loaded certificate sets."""

from __future__ import annotations

import ipaddress
import logging
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the certificate tools are imported when a certificate is made (serving.py says why)
    from cryptography import x509

log = logging.getLogger("webhook.server.serving")  # the name these lines have always been logged under

SELF_SIGNED_SERVICE = "kgwe-webhook"
SELF_SIGNED_NAMESPACE = "kgwe"


def self_signed_pair(host: str, extra_dns_names: list[str], directory: Path | None = None) -> tuple[Path, Path, Path]:
    """(certificate, key, CA) of a serving certificate made and renewed under the state directory."""
    from certs.authority import Settings
    from certs.files import ensure_files
    from webhook.state import state_dir

    ips = ["127.0.0.1", "::1"]
    dns = list(extra_dns_names)
    try:
        address = ipaddress.ip_address(host)
        if not address.is_unspecified and str(address) not in ips:
            ips.append(str(address))
    except ValueError:
        dns.append(host)
    settings = Settings(
        service=SELF_SIGNED_SERVICE, namespace=SELF_SIGNED_NAMESPACE,
        extra_dns_names=tuple(n for n in dns if n != "localhost"), ip_addresses=tuple(ips),
    )
    paths, changes = ensure_files(directory or state_dir() / "certs", settings)
    if changes.changed:
        log.info("self-signed certificates updated in %s: %s", paths.directory, "; ".join(changes.reasons))
    return paths.tls_cert, paths.tls_key, paths.ca_cert


def trust_notice(ca_file: Path, host: str, port: int) -> str:
    """The first line `kgwe serve` prints without --tls-cert-file: which CA signs what it serves and how to
    trust it, so the browser's warning page is not the first thing a new user meets."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    address = f"[{shown}]" if ":" in shown else shown
    # The path stays last, after "CA: ": scripts (and the tests) read it from there.
    return (f"kgwe serve: no --tls-cert-file given; serving a certificate of KGWE's own CA. To open "
            f"https://{address}:{port}/ui/ without a warning, trust it once (README.md, \"Trust the CA\"; Chrome or "
            "Chromium on Linux: certutil -d sql:$HOME/.pki/nssdb -A -t C,, -n kgwe-dev -i CA; curl: --cacert CA). "
            f"CA: {ca_file}")


def record_expiry(certificate: x509.Certificate) -> None:
    from webhook.server import metrics

    metrics.CERTIFICATE_EXPIRY.set(certificate.not_valid_after_utc.timestamp())
