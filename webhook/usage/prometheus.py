"""The rim where usage comes in: Prometheus' HTTP API (`/api/v1/query`, `/api/v1/query_range`), read-only.

urllib3 (already here with the kubernetes client) with a connect and read timeout per request; the query's
own `timeout` is sent too, so Prometheus stops evaluating when we stop waiting. urllib3 is imported by the
first client, not with this module, which the admission core (and so `kgwe review`) loads. Every failure (refused
connection, timeout, an HTTP error, an answer that is not Prometheus' JSON, a query error) becomes one
`PrometheusUnavailable` whose message names the URL and what went wrong: callers print or serve it, and
nothing of KGWE crashes because Prometheus is down.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ValidationError

# Answers larger than this are refused rather than read into memory (a cluster of 10,000 GPU pods over
# one day of 5-minute windows is about 100 MB of JSON; chunks keep each answer well below).
MAX_ANSWER_BYTES = 512 * 1024 * 1024


class PrometheusUnavailable(RuntimeError):
    """Prometheus could not answer a query; the message says where and why."""


class _Data(BaseModel):
    resultType: Literal["matrix", "vector", "scalar", "string"]
    result: Any


class _Envelope(BaseModel):
    status: Literal["success", "error"]
    data: _Data | None = None
    errorType: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class Series:
    """One series of an answer: its labels and its (unix time, value) points, NaN and infinities dropped."""

    labels: dict[str, str]
    points: list[tuple[float, float]]


class PrometheusClient:
    """Queries one Prometheus. Thread-safe (urllib3's pool is)."""

    def __init__(self, url: str, timeout_seconds: float = 30.0, bearer_token_file: str | None = None) -> None:
        if not url.startswith(("http://", "https://")):
            raise PrometheusUnavailable(f"Prometheus URL {url!r}: expected http://HOST[:PORT] or https://HOST[:PORT]")
        self.url = url.rstrip("/")
        self.timeout_seconds = timeout_seconds
        self._token_file = Path(bearer_token_file) if bearer_token_file else None
        import urllib3

        self._pool = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=min(5.0, timeout_seconds), read=timeout_seconds),
            retries=False,
        )

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self._token_file is not None:
            try:
                # Read per request: projected tokens are rotated on disk.
                headers["Authorization"] = "Bearer " + self._token_file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise PrometheusUnavailable(
                    f"cannot read the Prometheus bearer token {self._token_file}: {exc}"
                ) from exc
        return headers

    def _get(self, path: str, fields: dict[str, str]) -> _Data:
        import urllib3

        url = f"{self.url}{path}"
        fields = {**fields, "timeout": f"{self.timeout_seconds:g}s"}
        try:
            answer = self._pool.request("GET", url, fields=fields, headers=self._headers(), preload_content=False)
        except urllib3.exceptions.HTTPError as exc:
            raise PrometheusUnavailable(f"Prometheus at {self.url} did not answer: {_reason(exc)}") from exc
        try:
            body = answer.read(MAX_ANSWER_BYTES + 1)
        except urllib3.exceptions.HTTPError as exc:
            raise PrometheusUnavailable(f"Prometheus at {self.url} broke off its answer: {_reason(exc)}") from exc
        finally:
            answer.release_conn()
        if len(body) > MAX_ANSWER_BYTES:
            raise PrometheusUnavailable(
                f"Prometheus at {self.url} answered more than {MAX_ANSWER_BYTES // 2**20} MiB for one query; "
                "shorten usage.chunk"
            )
        try:
            envelope = _Envelope.model_validate(orjson.loads(body))
        except (orjson.JSONDecodeError, ValidationError):
            snippet = body[:200].decode("utf-8", "replace").strip()
            raise PrometheusUnavailable(
                f"{url} answered HTTP {answer.status} with something that is not Prometheus' API: {snippet!r}"
            ) from None
        if envelope.status != "success" or envelope.data is None:
            raise PrometheusUnavailable(
                f"Prometheus at {self.url} refused the query ({envelope.errorType or answer.status}): {envelope.error}"
            )
        return envelope.data

    def query_range(self, query: str, start: float, end: float, step: float) -> list[Series]:
        data = self._get("/api/v1/query_range", {
            "query": query, "start": _stamp(start), "end": _stamp(end), "step": f"{step:g}",
        })
        return _series(data, "values")

    def query(self, query: str, at: float) -> list[Series]:
        data = self._get("/api/v1/query", {"query": query, "time": _stamp(at)})
        return _series(data, "value")


def _stamp(moment: float) -> str:
    return f"{moment:.3f}"


def _reason(exc: Exception) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason or exc)


def _series(data: _Data, key: str) -> list[Series]:
    if data.resultType not in ("matrix", "vector") or not isinstance(data.result, list):
        raise PrometheusUnavailable(f"Prometheus answered a {data.resultType}, not series by pod")
    out: list[Series] = []
    for item in data.result:
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
            continue
        raw = item.get(key)
        raw_points = [raw] if key == "value" else raw
        points: list[tuple[float, float]] = []
        for point in raw_points if isinstance(raw_points, list) else ():
            try:
                moment, value = float(point[0]), float(point[1])
            except (TypeError, ValueError, IndexError):
                continue
            if math.isfinite(value):
                points.append((moment, value))
        labels = {str(k): str(v) for k, v in item["metric"].items()}
        out.append(Series(labels, points))
    return out


class PrometheusClients:
    """One client per Prometheus (URL, timeout, token file), kept across calls so their connection pools are
    reused; `override` (a command's `--prometheus`) wins over `usage.prometheus.url`. Thread-safe."""

    def __init__(self, override: str | None = None) -> None:
        self.override = override
        self._lock = threading.Lock()
        self._clients: dict[tuple[str, float, str | None], PrometheusClient] = {}

    def for_settings(self, settings: Any) -> PrometheusClient | None:
        """The client for `settings` (`usage.prometheus`); None when no URL is configured or given."""
        url = self.override or settings.url
        if not url:
            return None
        key = (url, settings.timeout_seconds, settings.bearer_token_file)
        with self._lock:
            found = self._clients.get(key)
            if found is None:
                found = self._clients[key] = PrometheusClient(url, settings.timeout_seconds,
                                                              settings.bearer_token_file)
        return found
