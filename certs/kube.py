"""In a cluster: keep the certificate material in a Secret and the CA bundle in the webhook configurations.

Order matters for a CA rotation: the new bundle (new CA + old CA) is written to the webhook
configurations BEFORE the Secret gets the new serving certificate, so the API server already trusts
the new leaf when a webhook pod starts serving it, and still trusts the old leaf meanwhile.

With a CA Secret (`ca_secret_name`, the chart's layout) the CA key never enters the serving Secret
the webhook pods mount: the CA Secret holds ca.crt and ca.key and only the certificate runners may
read it; the serving Secret holds ca.crt, tls.crt and tls.key. A serving Secret of the older
single-Secret layout (with ca.key) is split on the next run: CA Secret first, then the serving
Secret rewritten without the key.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from certs.authority import Changes, Material, Settings, reconcile
from certs.files import CA_CERT, CA_KEY, TLS_CERT, TLS_KEY

log = logging.getLogger(__name__)

CONFLICT_RETRIES = 5


def api_client(kubeconfig: str | None = None) -> k8s.ApiClient:
    """From `kubeconfig` when given, else the pod's service account."""
    configuration = k8s.Configuration()
    if kubeconfig:
        k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        k8s_config.load_incluster_config(client_configuration=configuration)
    return k8s.ApiClient(configuration)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def material_from_secret(secret: k8s.V1Secret) -> Material | None:
    data = secret.data or {}
    if not data.get(CA_CERT) or not data.get(CA_KEY):
        return None
    return Material(*(base64.b64decode(data.get(key) or "") for key in (CA_CERT, CA_KEY, TLS_CERT, TLS_KEY)))


def read_secret(core: k8s.CoreV1Api, namespace: str, name: str) -> tuple[Material | None, k8s.V1Secret | None]:
    try:
        secret = core.read_namespaced_secret(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None, None
        raise
    return material_from_secret(secret), secret


def write_secret(
    core: k8s.CoreV1Api, namespace: str, name: str, material: Material, existing: k8s.V1Secret | None
) -> None:
    """The single-Secret layout: all four files in one Secret."""
    data = {
        CA_CERT: material.ca_bundle, CA_KEY: material.ca_key, TLS_CERT: material.tls_cert, TLS_KEY: material.tls_key
    }
    write_secret_data(core, namespace, name, data, existing, "kubernetes.io/tls")


def write_secret_data(
    core: k8s.CoreV1Api,
    namespace: str,
    name: str,
    files: dict[str, bytes],
    existing: k8s.V1Secret | None,
    secret_type: str,
) -> None:
    """Create the Secret with exactly `files`, or replace the data of `existing` (read just before)."""
    data: dict[str, bytes | str] = {key: _b64(value) for key, value in files.items()}
    if existing is None:
        body = k8s.V1Secret(
            metadata=k8s.V1ObjectMeta(name=name, namespace=namespace, labels={"app.kubernetes.io/part-of": "kgwe"}),
            type=secret_type,
            data=data,
        )
        core.create_namespaced_secret(namespace, body)
        return
    # Replace with the resourceVersion read: a concurrent writer makes this fail (409) instead of being lost.
    existing.data = data
    core.replace_namespaced_secret(name, namespace, existing)


def _patch_configuration(
    read: Callable[[str], Any], replace: Callable[[str, Any], Any], name: str, ca_bundle: bytes
) -> bool:
    """Set caBundle on every webhook of one configuration; True when something changed."""
    encoded = _b64(ca_bundle)
    for _attempt in range(CONFLICT_RETRIES):
        try:
            configuration = read(name)
        except ApiException as exc:
            # The chart's pre-install hook runs before Helm creates the configurations; its post-install
            # hook patches them.
            if exc.status == 404:
                log.info("%s does not exist yet: caBundle not patched", name)
                return False
            raise
        webhooks = configuration.webhooks or []
        stale = [w for w in webhooks if w.client_config.ca_bundle != encoded]
        if not stale:
            return False
        for webhook in stale:
            webhook.client_config.ca_bundle = encoded
        try:
            replace(name, configuration)
        except ApiException as exc:
            if exc.status == 409:
                continue
            raise
        log.info("caBundle of %s updated on %d webhook(s)", name, len(stale))
        return True
    raise RuntimeError(f"caBundle of {name}: still conflicting after {CONFLICT_RETRIES} attempts")


def patch_ca_bundle(
    admission: k8s.AdmissionregistrationV1Api, ca_bundle: bytes, mutating: str | None, validating: str | None
) -> bool:
    changed = False
    if mutating:
        changed |= _patch_configuration(
            admission.read_mutating_webhook_configuration, admission.replace_mutating_webhook_configuration,
            mutating, ca_bundle,
        )
    if validating:
        changed |= _patch_configuration(
            admission.read_validating_webhook_configuration, admission.replace_validating_webhook_configuration,
            validating, ca_bundle,
        )
    return changed


def ensure(
    api: k8s.ApiClient,
    settings: Settings,
    secret_name: str,
    mutating: str | None,
    validating: str | None,
    *,
    rotate_ca: bool = False,
    ca_secret_name: str | None = None,
) -> Changes:
    """Create or renew the Secrets' material and make both configurations trust it.

    Without `ca_secret_name`, one Secret holds everything; with it, see the module docstring.
    """
    core = k8s.CoreV1Api(api)
    admission = k8s.AdmissionregistrationV1Api(api)
    if ca_secret_name is None:
        existing, secret = read_secret(core, settings.namespace, secret_name)
        material, changes = reconcile(existing, settings, rotate_ca=rotate_ca)
        # Always re-assert the bundle: it repairs configurations re-applied by Helm with an empty caBundle.
        patch_ca_bundle(admission, material.ca_bundle, mutating, validating)
        if changes.changed:
            write_secret(core, settings.namespace, secret_name, material, secret)
            log.info("Secret %s/%s updated: %s", settings.namespace, secret_name, "; ".join(changes.reasons))
        return changes
    return _ensure_split(
        core, admission, settings, (secret_name, ca_secret_name), (mutating, validating), rotate_ca
    )


def _data(secret: k8s.V1Secret | None) -> dict[str, bytes]:
    if secret is None:
        return {}
    return {key: base64.b64decode(value or "") for key, value in (secret.data or {}).items()}


def _read(core: k8s.CoreV1Api, namespace: str, name: str) -> k8s.V1Secret | None:
    try:
        return core.read_namespaced_secret(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _ensure_split(
    core: k8s.CoreV1Api,
    admission: k8s.AdmissionregistrationV1Api,
    settings: Settings,
    names: tuple[str, str],
    configurations: tuple[str | None, str | None],
    rotate_ca: bool,
) -> Changes:
    """`ensure` with the CA in its own Secret. `names`: (serving Secret, CA Secret)."""
    namespace = settings.namespace
    secret_name, ca_secret_name = names
    serving_secret, ca_secret = _read(core, namespace, secret_name), _read(core, namespace, ca_secret_name)
    serving, authority = _data(serving_secret), _data(ca_secret)
    # The CA Secret wins; a ca.key in the serving Secret is the older layout's, taken over once.
    ca_source = authority if authority.get(CA_CERT) and authority.get(CA_KEY) else serving
    existing: Material | None = None
    if ca_source.get(CA_CERT) and ca_source.get(CA_KEY):
        existing = Material(
            ca_source[CA_CERT], ca_source[CA_KEY], serving.get(TLS_CERT, b""), serving.get(TLS_KEY, b"")
        )
    material, changes = reconcile(existing, settings, rotate_ca=rotate_ca)
    # Always re-assert the bundle: it repairs configurations re-applied by Helm with an empty caBundle.
    patch_ca_bundle(admission, material.ca_bundle, *configurations)
    wanted_ca = {CA_CERT: material.ca_bundle, CA_KEY: material.ca_key}
    wanted_serving = {CA_CERT: material.ca_bundle, TLS_CERT: material.tls_cert, TLS_KEY: material.tls_key}
    # The CA Secret first: if the second write fails, the CA key is not lost.
    if authority != wanted_ca:
        write_secret_data(core, namespace, ca_secret_name, wanted_ca, ca_secret, "Opaque")
        log.info("Secret %s/%s (CA) written", namespace, ca_secret_name)
    if serving != wanted_serving:
        write_secret_data(core, namespace, secret_name, wanted_serving, serving_secret, "kubernetes.io/tls")
        reasons = "; ".join(changes.reasons) or "CA key moved out of the serving Secret"
        log.info("Secret %s/%s updated: %s", namespace, secret_name, reasons)
    return changes
