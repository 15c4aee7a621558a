"""Raw JSON over the kubernetes client's connection: requests and watch streams without its model classes.

`KubeJson` sends requests through an `ApiClient` (its host, auth with token refresh, and TLS) and reads
the answers with `orjson`, so objects keep the API's camelCase JSON shape. Every part of KGWE that talks
to the API server uses it: the cluster source's list + watch (webhook/cluster/kube_source.py), the
controllers, the leader election, the gang controller, the audit, DRA templates.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from typing import Any

import orjson
import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

TEST_KUBECONFIG_ENV = "KGWE_TEST_KUBECONFIG"

# Errors after which a loop talking to the API server backs off and retries; anything else is a bug and
# propagates.
RETRYABLE = (ApiException, urllib3.exceptions.HTTPError, OSError, orjson.JSONDecodeError, ValueError)


class KubeJson:
    """Raw JSON requests through a kubernetes `ApiClient`: its host, auth (token refresh included) and TLS."""

    def __init__(self, api_client: k8s_client.ApiClient) -> None:
        self.api_client = api_client

    def open(
        self,
        method: str,
        path: str,
        *,
        query: Iterable[tuple[str, str]] = (),
        body: dict[str, Any] | None = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float] | None = None,
    ) -> urllib3.BaseHTTPResponse:
        """Send a request; the caller reads (or streams) and releases the response. Non-2xx raises ApiException."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        serialized = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(query) or None,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api_client.call_api(*serialized, _request_timeout=timeout)
        raw: urllib3.BaseHTTPResponse = response.response
        if not 200 <= raw.status <= 299:
            data = raw.read()
            raw.release_conn()
            raise ApiException(status=raw.status, reason=raw.reason, body=data.decode("utf-8", "replace"))
        return raw

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Iterable[tuple[str, str]] = (),
        body: dict[str, Any] | None = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float] | None = None,
    ) -> dict[str, Any]:
        raw = self.open(method, path, query=query, body=body, content_type=content_type, timeout=timeout)
        try:
            data = raw.read()
        finally:
            raw.release_conn()
        loaded = orjson.loads(data) if data else {}
        return loaded if isinstance(loaded, dict) else {}


def load_kube_client(kubeconfig: str | None) -> k8s_client.ApiClient:
    """An ApiClient from `kubeconfig`, else $KGWE_TEST_KUBECONFIG, else the in-cluster service account when
    running in a pod, else the usual kubeconfig ($KUBECONFIG or ~/.kube/config) as kubectl finds it."""
    configuration = k8s_client.Configuration()
    path = kubeconfig or os.environ.get(TEST_KUBECONFIG_ENV)
    if path:
        k8s_config.load_kube_config(config_file=path, client_configuration=configuration)
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_incluster_config(client_configuration=configuration)
    else:
        k8s_config.load_kube_config(client_configuration=configuration)
    # One long-lived watch per kind plus patches and lease renewals share the pool.
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, 32)
    return k8s_client.ApiClient(configuration)


def watch_events(stream: urllib3.BaseHTTPResponse) -> Iterator[dict[str, Any]]:
    """Watch events, one JSON document per line; a line cut off by a broken stream is never yielded."""
    pending = b""
    for chunk in stream.stream(65536, decode_content=True):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                event = orjson.loads(line)
                if isinstance(event, dict):
                    yield event
    if pending.strip():
        event = orjson.loads(pending)
        if isinstance(event, dict):
            yield event


def close_stream(stream: urllib3.BaseHTTPResponse) -> None:
    """Unblock a reader in another thread and drop the connection (a half-read stream cannot be reused)."""
    shutdown = getattr(stream, "shutdown", None)
    if shutdown is not None:
        # ValueError: urllib3 has not wired the socket for shutdown (the body is not being read yet);
        # RuntimeError: the stream ended cleanly and its connection is already back in the pool;
        # AttributeError: the reader's thread is closing it at the same moment (urllib3 drops its file object).
        with contextlib.suppress(OSError, RuntimeError, ValueError, AttributeError):
            shutdown()
    with contextlib.suppress(OSError, RuntimeError, ValueError, AttributeError):
        stream.close()


def describe_error(exc: BaseException) -> str:
    """An API error as its status and reason, anything else as its type and message (for logs)."""
    if isinstance(exc, ApiException):
        return f"API error {exc.status} {exc.reason or ''}".strip()
    return f"{type(exc).__name__}: {exc}"
