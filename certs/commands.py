"""`kgwe certs ...`: make, renew and rotate the webhook's certificates, and publish the CA bundle."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

# cryptography is imported when a command runs: `kgwe certs --help` reads the parser alone
# (docs/performance.md, "The command line's start-up").
if TYPE_CHECKING:
    from kubernetes import client as k8s

    from certs.authority import Changes, Settings

# The chart's defaults (docs/operations.md installs into kgwe-system): a certificate made here without
# flags serves the chart's Service.
DEFAULT_SERVICE = "kgwe-webhook"
DEFAULT_NAMESPACE = "kgwe-system"


def _validity_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ca-validity-days", type=int, default=3650, help="lifetime of a new CA (default 3650)")
    parser.add_argument("--cert-validity-days", type=int, default=90,
                        help="lifetime of a new serving certificate (default 90)")
    parser.add_argument("--renew-before-days", type=int, default=30,
                        help="renew the serving certificate this many days before it expires (default 30)")
    parser.add_argument("--rotate-ca", action="store_true",
                        help="make a new CA now; the old one stays in the bundle until it expires")
    parser.add_argument("--dns-name", action="append", default=[], metavar="NAME",
                        help="an extra DNS name for the serving certificate (repeatable)")
    parser.add_argument("--ip-address", action="append", default=[], metavar="IP",
                        help="an extra IP address for the serving certificate (127.0.0.1 is always included)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kgwe certs", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    generate = commands.add_parser(
        "generate", help="write ca.crt, ca.key, tls.crt, tls.key to a directory (reusing its CA)",
        description="Create the CA and serving certificate in --out-dir, or renew the serving certificate "
                    "when it is inside the renewal window; an existing CA is reused.",
    )
    generate.add_argument("--out-dir", type=Path, required=True, help="directory for the four PEM files")
    generate.add_argument("--service", help="webhook Service name (default: the name in --out-dir's certificate, "
                          f"else {DEFAULT_SERVICE})")
    generate.add_argument("--namespace", help="webhook namespace (default: the namespace in --out-dir's certificate, "
                          f"else {DEFAULT_NAMESPACE}, the chart's)")
    _validity_arguments(generate)

    ensure = commands.add_parser(
        "ensure", help="in a cluster: create or renew the TLS Secret and patch the webhooks' caBundle",
        description="Read the TLS Secret, create or renew what needs it, write the CA bundle into the "
                    "mutating and validating webhook configurations (first), then the Secret.",
    )
    ensure.add_argument("--namespace", required=True, help="namespace of the Service and the Secret")
    ensure.add_argument("--service", required=True, help="webhook Service name")
    ensure.add_argument("--secret", required=True,
                        help="Secret the webhook mounts: ca.crt, tls.crt, tls.key (and ca.key without --ca-secret)")
    ensure.add_argument("--ca-secret",
                        help="Secret holding ca.crt and ca.key, so the CA key stays out of the mounted Secret; "
                             "a ca.key found in --secret is moved here")
    ensure.add_argument("--mutating-config", help="MutatingWebhookConfiguration to patch")
    ensure.add_argument("--validating-config", help="ValidatingWebhookConfiguration to patch")
    ensure.add_argument("--kubeconfig", help="use this kubeconfig instead of the pod's service account")
    _validity_arguments(ensure)

    client = commands.add_parser(
        "client", help="make the API server's client certificate, its kubeconfig and AdmissionConfiguration",
        description="Create (or reuse) a client CA in --out-dir and issue the certificate the API server presents "
                    "to the webhook; write the kubeconfig and AdmissionConfiguration for kube-apiserver "
                    "--admission-control-config-file. Put client-ca.crt in the Secret named by the chart's "
                    "authentication.clientCASecret (docs/security.md).",
    )
    client.add_argument("--out-dir", type=Path, required=True, help="directory for the files")
    client.add_argument("--name", default="kgwe-apiserver-client",
                        help="the certificate's common name; must be in authentication.allowedNames "
                             "(default kgwe-apiserver-client)")
    client.add_argument("--service", default=DEFAULT_SERVICE, help=f"webhook Service name (default {DEFAULT_SERVICE})")
    client.add_argument("--namespace", default=DEFAULT_NAMESPACE,
                        help=f"webhook namespace (default {DEFAULT_NAMESPACE}, the chart's)")
    client.add_argument("--port", type=int, default=443, help="the Service port the API server calls (default 443)")
    client.add_argument("--cert-validity-days", type=int, default=365,
                        help="lifetime of a new client certificate (default 365)")
    client.add_argument("--renew-before-days", type=int, default=30,
                        help="reissue the client certificate this many days before it expires (default 30)")
    client.add_argument("--kubeconfig-path", default="/etc/kubernetes/kgwe/apiserver-webhook-kubeconfig.yaml",
                        help="where the kubeconfig will be on the control-plane hosts (written into the "
                             "AdmissionConfiguration)")

    patch = commands.add_parser(
        "patch-ca-bundle", help="write a CA bundle file into webhook configurations' caBundle",
        description="Set clientConfig.caBundle of every webhook in the named configurations.",
    )
    patch.add_argument("--ca-file", type=Path, required=True, help="PEM file with the CA certificate(s)")
    patch.add_argument("--mutating-config", help="MutatingWebhookConfiguration to patch")
    patch.add_argument("--validating-config", help="ValidatingWebhookConfiguration to patch")
    patch.add_argument("--kubeconfig", help="use this kubeconfig instead of the pod's service account")
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    from certs.authority import Settings

    ips = ["127.0.0.1", *(ip for ip in args.ip_address if ip != "127.0.0.1")]
    return Settings(
        service=args.service,
        namespace=args.namespace,
        ca_validity_days=args.ca_validity_days,
        cert_validity_days=args.cert_validity_days,
        renew_before_days=args.renew_before_days,
        extra_dns_names=tuple(args.dns_name),
        ip_addresses=tuple(ips),
    )


def names_in_use(directory: Path) -> tuple[str, str] | None:
    """(service, namespace) of the serving certificate already in `directory`, read from its
    `SERVICE.NAMESPACE.svc` DNS name; None when there is none or it names no Service.

    `generate` re-run without --service/--namespace (a renewal, `--rotate-ca`) keeps these, so the
    certificate is never silently re-issued for another Service."""
    from cryptography import x509

    from certs.files import read_material

    try:
        material = read_material(directory)
        if material is None or not material.tls_cert:
            return None
        leaf = material.leaf()
        san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, IndexError, x509.ExtensionNotFound):
        return None
    for name in san.get_values_for_type(x509.DNSName):
        parts = name.split(".")
        if len(parts) == 3 and parts[2] == "svc" and all(parts[:2]):
            return parts[0], parts[1]
    return None


def _generate_names(args: argparse.Namespace) -> None:
    """Fill --service and --namespace: given flags win, then the existing certificate, then the chart's."""
    in_use = names_in_use(args.out_dir) if args.service is None or args.namespace is None else None
    if args.service is None:
        args.service = in_use[0] if in_use else DEFAULT_SERVICE
    if args.namespace is None:
        args.namespace = in_use[1] if in_use else DEFAULT_NAMESPACE


def _report(changes: Changes, where: str) -> None:
    if not changes.changed:
        print(f"{where}: certificates are current, nothing to do")
        return
    what = "new CA and serving certificate" if changes.ca_rotated else "new serving certificate"
    print(f"{where}: {what} ({'; '.join(changes.reasons)})")


def _validate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.command in {"generate", "ensure"}:
        if min(args.ca_validity_days, args.cert_validity_days) <= 0 or args.renew_before_days < 0:
            parser.error("validity days must be positive and --renew-before-days not negative")
        if args.renew_before_days >= args.cert_validity_days:
            parser.error("--renew-before-days must be shorter than --cert-validity-days")
    if args.command == "client":
        if args.cert_validity_days <= 0 or not 0 <= args.renew_before_days < args.cert_validity_days:
            parser.error("--cert-validity-days must be positive and above --renew-before-days (not negative)")
        if not 0 < args.port < 65536 or not args.name:
            parser.error("--port must be a TCP port and --name not empty")
    if args.command in {"ensure", "patch-ca-bundle"} and not (args.mutating_config or args.validating_config):
        parser.error("name --mutating-config and/or --validating-config")


def _client(args: argparse.Namespace) -> int:
    from certs import client

    settings = client.ClientSettings(
        name=args.name, service=args.service, namespace=args.namespace, port=args.port,
        cert_validity_days=args.cert_validity_days, renew_before_days=args.renew_before_days,
        kubeconfig_path=args.kubeconfig_path,
    )
    files = client.ensure_client_files(args.out_dir, settings)
    what = "new client CA and certificate" if files.ca_created else (
        "new client certificate" if files.issued else "client certificate is current")
    print(f"{files.directory}: {what} (name {settings.name})")
    print(f"client CA (for the chart's authentication.clientCASecret, key ca.crt): {files.path(client.CLIENT_CA_CERT)}")
    print(f"kubeconfig for the API server (copy to {settings.kubeconfig_path} on each control-plane host): "
          f"{files.path(client.KUBECONFIG)}")
    print(f"AdmissionConfiguration (kube-apiserver --admission-control-config-file): "
          f"{files.path(client.ADMISSION_CONFIG)}")
    print(f"the client CA key stays here, with you: {files.path(client.CLIENT_CA_KEY)}")
    return 0


def _cluster_client(kubeconfig: str | None) -> k8s.ApiClient | None:
    """The API client, or None after one line on stderr saying why there is none and what to do."""
    from kubernetes.config import ConfigException

    from certs import kube

    try:
        return kube.api_client(kubeconfig)
    except (ConfigException, OSError) as exc:
        where = f"--kubeconfig {kubeconfig}" if kubeconfig else "no --kubeconfig and not running in a pod"
        print(f"kgwe certs: cannot reach a Kubernetes cluster ({where}: {exc}); give --kubeconfig FILE, "
              "or run `kgwe certs generate --out-dir DIR` for local files", file=sys.stderr)
        return None


def run(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(list(argv))
    _validate(parser, args)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "generate":
            from certs.files import ensure_files

            _generate_names(args)
            paths, changes = ensure_files(args.out_dir, _settings(args), rotate_ca=args.rotate_ca)
            _report(changes, str(paths.directory))
            print(f"CA bundle: {paths.ca_cert}\ncertificate: {paths.tls_cert}\nkey: {paths.tls_key}")
            return 0
        if args.command == "client":
            return _client(args)
        from certs import kube

        if args.command == "ensure":
            api = _cluster_client(args.kubeconfig)
            if api is None:
                return 2
            changes = kube.ensure(
                api, _settings(args), args.secret, args.mutating_config, args.validating_config,
                rotate_ca=args.rotate_ca, ca_secret_name=args.ca_secret,
            )
            _report(changes, f"Secret {args.namespace}/{args.secret}")
            return 0
        bundle = args.ca_file.read_bytes()
        if b"-----BEGIN CERTIFICATE-----" not in bundle:
            print(f"kgwe certs: {args.ca_file} holds no PEM certificate", file=sys.stderr)
            return 2
        from kubernetes import client as k8s

        patch_api = _cluster_client(args.kubeconfig)
        if patch_api is None:
            return 2
        admission = k8s.AdmissionregistrationV1Api(patch_api)
        changed = kube.patch_ca_bundle(admission, bundle, args.mutating_config, args.validating_config)
        print("caBundle updated" if changed else "caBundle already current")
        return 0
    except Exception as exc:
        print(f"kgwe certs {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
