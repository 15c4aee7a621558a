"""The Rego engines in another process: OPA's own evaluator through the opa-go binding, and an OPA server
over its REST API (opa-python-client); and the engine the configuration names (`build_rego_engine`).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from policies.engines.aggregate import AGGREGATE_MODULE, CHECK_QUERY, EVERYTHING_QUERY
from policies.engines.rego import (
    UNDEFINED,
    PreparedRego,
    RegoCompileError,
    RegoEngine,
    RegoEngineName,
    RegoEngineUnavailable,
    RegoEngineUnreachable,
    RegoEvaluationError,
    RegoInput,
    RegorusEngine,
)

_OS_ERROR = re.compile(r"\[Errno -?\d+\] [^'\")]+")


def _why_unreachable(exc: BaseException) -> str:
    """The useful end of a connection failure ("[Errno 111] Connection refused", "timed out"), not the whole
    urllib3 retry chain: it is shown in refusal messages and warnings, which are short."""
    text = str(exc)
    found = _OS_ERROR.search(text)
    if found:
        return found.group(0).strip()
    if "timed out" in text.lower() or "timeout" in type(exc).__name__.lower():
        return "timed out"
    return text[:200]


def _unreachable(exc: BaseException) -> bool:
    """A failure to talk to the server at all (refused, reset, timed out), not an answer from it."""
    import requests
    from opa_client.errors import ConnectionsError

    return isinstance(exc, ConnectionsError | requests.exceptions.ConnectionError | requests.exceptions.Timeout)


class _PreparedOpaGo:
    engine_name = "opa-go"

    def __init__(self, modules: Mapping[str, str], data: Mapping[str, Any]) -> None:
        import opa_bindings

        self._errors = (opa_bindings.OpaError,)
        self._engine = opa_bindings.OpaEngine()
        try:
            for name, source in modules.items():
                self._engine.add_policy(name, source)
            self._engine.add_data(dict(data))
        except opa_bindings.OpaError as exc:
            self._engine.close()
            raise RegoCompileError(exc.message) from exc
        self._cluster: Mapping[str, Any] | None = None

    def set_cluster(self, cluster: Mapping[str, Any]) -> None:
        # add_data deep-merges and cannot replace a subtree, so the summary travels with each query.
        self._cluster = cluster

    def query(self, path: str, rego_input: RegoInput | None = None) -> Any:
        document = rego_input.document if rego_input is not None else {}
        if self._cluster is not None:
            document = {**document, "kgwe_cluster": self._cluster}
        query = f"x = {path}"
        if self._cluster is not None:
            query += " with data.kgwe.cluster as input.kgwe_cluster"
        try:
            rows = self._engine.eval_query(query, document)
        except self._errors as exc:
            raise RegoEvaluationError(str(exc)) from exc
        if not rows:
            return UNDEFINED
        return rows[0]["x"]

    def close(self) -> None:
        self._engine.close()


class OpaGoEngine:
    name = "opa-go"

    def prepare(self, modules: Mapping[str, str], data: Mapping[str, Any]) -> PreparedRego:
        return _PreparedOpaGo(modules, data)


def opa_go_available() -> bool:
    try:
        import opa_bindings  # noqa: F401
    except ImportError:
        return False
    return True


POLICY_ID_PREFIX = "kgwe/"


# Documents of the aggregate module that exist whenever it is loaded.
ALWAYS_DEFINED = frozenset({EVERYTHING_QUERY, CHECK_QUERY})


def _data_documents(data: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Data as (path, object) pairs one level below the root package, so that pushing `kgwe/params`
    never replaces `kgwe/cluster`, which is pushed on its own."""
    documents = []
    for root, subtree in data.items():
        if not isinstance(subtree, dict):
            raise RegoCompileError(f"data.{root} must be an object")
        for key, value in subtree.items():
            documents.append((f"{root}/{key}", value if isinstance(value, dict) else {"value": value}))
    return documents


class _PreparedOpaServer:
    engine_name = "opa"

    def __init__(self, client: Any, modules: Mapping[str, str], data: Mapping[str, Any], url: str = "") -> None:
        self._client = client
        self._url = url
        self._modules = dict(modules)
        self._data = dict(data)
        self._cluster: Mapping[str, Any] | None = None
        self._lock = threading.Lock()
        self._always_defined = ALWAYS_DEFINED if AGGREGATE_MODULE in self._modules else frozenset()
        self.push()

    def push(self) -> None:
        """Make the server serve exactly this module set and data (policy API + data API)."""
        from opa_client.errors import ConnectionsError, RegoParseError

        wanted = {POLICY_ID_PREFIX + name: source for name, source in self._modules.items()}
        try:
            for policy_id, source in wanted.items():
                self._client.update_policy_from_string(source, policy_id, rego_compat=False)
            for policy_id in self._client.get_policies_list():
                if str(policy_id).startswith(POLICY_ID_PREFIX) and policy_id not in wanted:
                    self._client.delete_policy(policy_id)
            for path, value in _data_documents(self._data):
                self._client.update_or_create_data(value, path)
        except RegoParseError as exc:
            raise RegoCompileError(str(exc)) from exc
        except ConnectionsError as exc:
            raise RegoEngineUnavailable(f"OPA server {self._url} unreachable: {_why_unreachable(exc)}") from exc
        except Exception as exc:
            if _unreachable(exc):
                raise RegoEngineUnavailable(f"OPA server {self._url} unreachable: {_why_unreachable(exc)}") from exc
            raise RegoCompileError(f"OPA server refused the policy set: {exc}") from exc

    def set_cluster(self, cluster: Mapping[str, Any]) -> None:
        if cluster is self._cluster:
            return
        with self._lock:
            if cluster is not self._cluster:
                try:
                    self._client.update_or_create_data(dict(cluster), "kgwe/cluster")
                except Exception as exc:
                    if _unreachable(exc):
                        raise RegoEngineUnreachable(f"OPA server {self._url} unreachable: {_why_unreachable(exc)}"
                                                    ) from exc
                    raise RegoEvaluationError(f"OPA server refused the cluster summary: {exc}") from exc
                self._cluster = cluster

    def query(self, path: str, rego_input: RegoInput | None = None) -> Any:
        package, _, rule = path.removeprefix("data.").rpartition(".")
        try:
            answer = self._client.query_rule(
                input_data=rego_input.document if rego_input is not None else {},
                package_path=package or rule,
                rule_name=rule if package else None,
            )
        except Exception as exc:
            if _unreachable(exc):
                raise RegoEngineUnreachable(f"OPA server {self._url} unreachable: {_why_unreachable(exc)}") from exc
            raise RegoEvaluationError(f"OPA server query failed: {exc}") from exc
        if "result" not in answer:
            if path in self._always_defined:
                # The aggregate's `check` is defined whenever its module is loaded: the server lost the set.
                raise RegoEngineUnreachable(f"OPA server {self._url} no longer holds the KGWE policy set (restarted?)")
            return UNDEFINED
        return answer["result"]

    def close(self) -> None:
        self._client.close_connection()


class OpaServerEngine:
    """Rego on a real OPA server. `url` like `http://127.0.0.1:8181`."""

    name = "opa"

    def __init__(self, url: str, timeout: float = 1.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an OPA URL: {url!r}")
        self.url = url
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = parts.scheme == "https"
        self._timeout = timeout

    def client(self) -> Any:
        from opa_client import OpaClient

        return OpaClient(host=self._host, port=self._port, ssl=self._ssl, timeout=self._timeout, retries=0)

    def prepare(self, modules: Mapping[str, str], data: Mapping[str, Any]) -> PreparedRego:
        return _PreparedOpaServer(self.client(), modules, data, self.url)


def build_rego_engine(name: RegoEngineName = "regorus", opa_url: str | None = None) -> RegoEngine:
    if name == "regorus":
        return RegorusEngine()
    if name == "opa-go":
        return OpaGoEngine()
    if name == "opa":
        if not opa_url:
            raise ValueError("the OPA server engine needs --opa-url")
        return OpaServerEngine(opa_url)
    raise ValueError(f"unknown Rego engine {name!r}")
