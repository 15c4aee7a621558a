"""The API server's client certificate for calling the webhook, and the files that make it use it.

`kgwe certs client --out-dir DIR` keeps, in DIR:
- client-ca.crt / client-ca.key: a CA used for nothing else (its certificate goes into the Secret
  named by the chart's `authentication.clientCASecret`; its key stays with the admin);
- client.crt / client.key: the API server's client certificate (common name = the allowed name);
- apiserver-webhook-kubeconfig.yaml: a kubeconfig whose user entry, named after the webhook's
  Service DNS name, carries that certificate inline;
- admission-configuration.yaml: the AdmissionConfiguration that points both webhook admission
  plugins at that kubeconfig (kube-apiserver --admission-control-config-file).
An existing client CA is reused; the client certificate is reissued when it is missing, names
another subject, or is within `renew_before_days` of its end.
"""

from __future__ import annotations

import base64
import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from certs.authority import new_ca, new_client_cert
from certs.files import write_file

CLIENT_CA_CERT = "client-ca.crt"
CLIENT_CA_KEY = "client-ca.key"
CLIENT_CERT = "client.crt"
CLIENT_KEY = "client.key"
KUBECONFIG = "apiserver-webhook-kubeconfig.yaml"
ADMISSION_CONFIG = "admission-configuration.yaml"
DEFAULT_CLIENT_NAME = "kgwe-apiserver-client"
CLIENT_CA_COMMON_NAME = "kgwe-apiserver-client-ca"


@dataclass(frozen=True)
class ClientSettings:
    name: str = DEFAULT_CLIENT_NAME
    service: str = "kgwe-webhook"
    namespace: str = "kgwe"
    port: int = 443
    ca_validity_days: int = 3650
    cert_validity_days: int = 365
    renew_before_days: int = 30
    # Where the kubeconfig will live on the control-plane hosts (written into the AdmissionConfiguration).
    kubeconfig_path: str = "/etc/kubernetes/kgwe/" + KUBECONFIG

    @property
    def user_entry_name(self) -> str:
        """The API server picks a kubeconfig user by the webhook's Service DNS name (":port" unless 443)."""
        host = f"{self.service}.{self.namespace}.svc"
        return host if self.port == 443 else f"{host}:{self.port}"


@dataclass(frozen=True)
class ClientFiles:
    directory: Path
    issued: bool
    ca_created: bool

    def path(self, name: str) -> Path:
        return self.directory / name


def _needs_new_cert(cert_file: Path, settings: ClientSettings, ca_pem: bytes, now: dt.datetime) -> bool:
    if not cert_file.is_file():
        return True
    try:
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
        cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_pem))
    except Exception:  # unreadable, or signed by another CA: reissue
        return True
    names = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    return names != [settings.name] or cert.not_valid_after_utc - now <= dt.timedelta(days=settings.renew_before_days)


def kubeconfig(settings: ClientSettings, cert_pem: bytes, key_pem: bytes) -> str:
    """The kubeconfig the API server reads for calls to the webhook: one user entry with the certificate inline."""
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "users": [{
            "name": settings.user_entry_name,
            "user": {
                "client-certificate-data": base64.b64encode(cert_pem).decode("ascii"),
                "client-key-data": base64.b64encode(key_pem).decode("ascii"),
            },
        }],
    }
    return yaml.safe_dump(document, sort_keys=False)


def admission_configuration(settings: ClientSettings) -> str:
    """AdmissionConfiguration naming the kubeconfig for both webhook admission plugins."""
    plugin_config = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "WebhookAdmissionConfiguration",
        "kubeConfigFile": settings.kubeconfig_path,
    }
    document = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AdmissionConfiguration",
        "plugins": [
            {"name": "ValidatingAdmissionWebhook", "configuration": dict(plugin_config)},
            {"name": "MutatingAdmissionWebhook", "configuration": dict(plugin_config)},
        ],
    }
    return yaml.safe_dump(document, sort_keys=False)


def ensure_client_files(directory: Path, settings: ClientSettings, now: dt.datetime | None = None) -> ClientFiles:
    """Create or renew the client CA, the client certificate and the API server's two files in `directory`."""
    now = now or dt.datetime.now(dt.UTC)
    ca_cert_file, ca_key_file = directory / CLIENT_CA_CERT, directory / CLIENT_CA_KEY
    ca_created = not (ca_cert_file.is_file() and ca_key_file.is_file())
    if ca_created:
        ca_pem, ca_key = new_ca(settings.ca_validity_days, now, common_name=CLIENT_CA_COMMON_NAME)
        write_file(ca_key_file, ca_key, 0o600)
        write_file(ca_cert_file, ca_pem, 0o644)
    ca_pem, ca_key = ca_cert_file.read_bytes(), ca_key_file.read_bytes()
    issued = _needs_new_cert(directory / CLIENT_CERT, settings, ca_pem, now)
    if issued:
        cert_pem, key_pem = new_client_cert(ca_pem, ca_key, settings.name, settings.cert_validity_days, now)
        write_file(directory / CLIENT_KEY, key_pem, 0o600)
        write_file(directory / CLIENT_CERT, cert_pem, 0o644)
    cert_pem, key_pem = (directory / CLIENT_CERT).read_bytes(), (directory / CLIENT_KEY).read_bytes()
    # The kubeconfig holds the client key: owner-only, like the key itself.
    write_file(directory / KUBECONFIG, kubeconfig(settings, cert_pem, key_pem).encode(), 0o600)
    write_file(directory / ADMISSION_CONFIG, admission_configuration(settings).encode(), 0o644)
    return ClientFiles(directory, issued, ca_created)
