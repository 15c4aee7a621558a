"""KGWE's configuration file (SPEC section 6): YAML on disk, the same content from a ConfigMap in a cluster."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from policies.vocabulary import resources
from policies.vocabulary.accelerator_types import AcceleratorTable, extra_types_from_config
from policies.vocabulary.selectors import parse_selector
from webhook.wing_config import DraConfig, Gangs, Quotas, Workloads


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Pricing(_Section):
    currency: str = "USD"
    per_gpu_hour: dict[str, Decimal] = Field(default_factory=dict, alias="perGPUHour")


class Rbac(_Section):
    # When true, naming or being steered to a type also needs verb `use` on acceleratortypes.kgwe.io/<id>.
    accelerator_types: bool = Field(default=False, alias="acceleratorTypes")
    # Seconds a SubjectAccessReview answer is reused for the same user, groups and resource.
    cache_seconds: float = Field(default=5.0, alias="cacheSeconds")


class Policies(_Section):
    # Embedded Rego engine by default; `opa` sends Rego to an OPA server at `opaUrl`.
    rego_engine: Literal["embedded", "opa"] = Field(default="embedded", alias="regoEngine")
    opa_url: str | None = Field(default=None, alias="opaUrl")
    # What to do when an engine or the OPA server cannot answer: fail open (admit) or closed (refuse). A policy
    # that cannot be evaluated for a pod (its CEL or Rego fails on the pod's values, or runs past its time
    # limit) refuses a GPU pod, a pod with a `kgwe.io/` key or a workload either way; `open` makes it a
    # warning for other pods.
    failure_mode: Literal["open", "closed"] = Field(default="open", alias="failureMode")
    # Embedded engine only: `auto` serves a policy set on regorus' compiled VM when it compiles there and
    # answers a load-time self-check as the interpreter does (docs/policies.md); `off`: the interpreter.
    rego_vm: Literal["auto", "off"] = Field(default="auto", alias="regoVm")
    builtin: bool = True
    directories: list[str] = Field(default_factory=list)
    # The leader writes a ValidatingAdmissionPolicy and binding for every CEL GPUPolicy the API server can
    # decide alone (webhook/vap/), so its rules hold while no replica answers. Read at start.
    generate_admission_policies: bool = Field(default=False, alias="generateAdmissionPolicies")


class Limits(_Section):
    max_request_bytes: int = Field(default=3 * 1024 * 1024, alias="maxRequestBytes")
    # Answer before the API server gives up on us (webhook timeoutSeconds minus a margin).
    deadline_seconds: float = Field(default=2.5, alias="deadlineSeconds")
    # On the deadline or an internal error: `allow` (fail open) or `deny` (fail closed).
    on_error: Literal["allow", "deny"] = Field(default="allow", alias="onError")


class Authentication(_Section):
    """Who may call /mutate and /validate (docs/security.md, "Transport and callers").

    With `clientCAFile` set, the TLS listener asks every client for a certificate (optional at the
    handshake, so probes and Prometheus still connect) and verifies any it gets against that CA; the
    admission endpoints then demand one whose subject common name or a DNS name is in `allowedNames`.
    Read when `kgwe serve` starts: a change needs a restart.
    """

    # PEM bundle of the CA that signs the API server's client certificate (`kgwe certs client`).
    client_ca_file: str | None = Field(default=None, alias="clientCAFile")
    # Certificate names accepted on the admission endpoints (common name or DNS SAN).
    allowed_names: list[str] = Field(default_factory=lambda: ["kgwe-apiserver-client"], alias="allowedNames")
    # required: 401 without a good certificate. permissive: answer, but as dryRun (no side effects),
    # for rolling the API server's kubeconfig out. off (default without clientCAFile): no check at all.
    mode: Literal["off", "permissive", "required"] | None = None

    @property
    def effective_mode(self) -> Literal["off", "permissive", "required"]:
        if self.mode is not None:
            return self.mode
        return "required" if self.client_ca_file else "off"

    @model_validator(mode="after")
    def _coherent(self) -> Authentication:
        if self.effective_mode != "off":
            if not self.client_ca_file:
                raise ValueError(f"authentication.mode {self.effective_mode} needs authentication.clientCAFile")
            if not [name for name in self.allowed_names if name]:
                raise ValueError("authentication.allowedNames must name at least one client certificate name")
        return self


class Server(_Section):
    """Connection limits of the HTTPS listener (docs/security.md, "Transport and callers"); read at start."""

    # A connection that has no request in flight is closed after this long (the API server reconnects).
    idle_timeout_seconds: float = Field(default=30.0, gt=0, le=3600, alias="idleTimeoutSeconds")
    # The TLS handshake must complete within this.
    handshake_timeout_seconds: float = Field(default=5.0, gt=0, le=300, alias="handshakeTimeoutSeconds")
    # From a request's first byte to the end of its headers.
    header_timeout_seconds: float = Field(default=5.0, gt=0, le=300, alias="headerTimeoutSeconds")
    # From the end of the headers to the end of the body.
    body_timeout_seconds: float = Field(default=10.0, gt=0, le=300, alias="bodyTimeoutSeconds")
    # Open connections per worker; a connection beyond this is closed as soon as it is accepted.
    max_connections: int = Field(default=1000, ge=1, le=1_000_000, alias="maxConnections")


class Audit(_Section):
    # The background audit's and `kgwe audit -o yaml`'s reports: OpenReports (openreports.io/v1alpha1 Report
    # and ClusterReport, as Kyverno writes them) or the Policy WG's wgpolicyk8s.io/v1alpha2 PolicyReports.
    report_format: Literal["openreports", "wgpolicyk8s"] = Field(default="openreports", alias="reportFormat")

    @field_validator("report_format", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


@functools.lru_cache(maxsize=256, typed=True)  # read once per workload by the usage wing: 10,000s a refresh
def parse_duration(text: str | float | int) -> float:
    """Seconds of a Prometheus-style duration (`90s`, `5m`, `24h`, `7d`, `1h30m`) or a plain number of seconds."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        seconds = float(text)
    else:
        raw = str(text).strip()
        parts = _DURATION.findall(raw)
        if not raw or "".join(n + u for n, u in parts) != raw:
            raise ValueError(f"{text!r} is not a duration (write e.g. 5m, 24h, 7d)")
        seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    if seconds <= 0:
        raise ValueError(f"{text!r}: a duration must be positive")
    return seconds


def _duration_text(value: object) -> object:
    """A duration field's value as written in YAML: a number of seconds becomes `<n>s`; text is checked."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        parse_duration(value)
        return f"{value:g}s"
    if isinstance(value, str):
        parse_duration(value)
    return value


class Prometheus(_Section):
    """Where usage is read (SPEC section 11): a Prometheus that scrapes NVIDIA's DCGM exporter."""

    # Base URL of the Prometheus HTTP API (http://prometheus.monitoring:9090); unset: no usage, no recommendations.
    url: str | None = None
    # Each HTTP request to Prometheus gives up after this many seconds (also sent as the query's `timeout`).
    timeout_seconds: float = Field(default=30.0, gt=0, le=600, alias="timeoutSeconds")
    # A file holding a bearer token sent as `Authorization: Bearer` (e.g. a projected service account token).
    bearer_token_file: str | None = Field(default=None, alias="bearerTokenFile")


class Usage(_Section):
    """How GPU usage is read from Prometheus (docs/usage.md)."""

    prometheus: Prometheus = Field(default_factory=Prometheus)
    # How far back history is read; older windows weigh little after a few half-lives anyway.
    lookback: str = "7d"
    # Per-interval peaks are taken over windows this long (Autopilot's 5-minute windows).
    interval: str = "5m"
    # History is read in time chunks this long, so no answer grows with the lookback (only with the pods).
    chunk: str = "1d"
    # The API keeps a computed answer this long before asking Prometheus again.
    cache_seconds: float = Field(default=60.0, ge=0, alias="cacheSeconds")

    @field_validator("lookback", "interval", "chunk", mode="before")
    @classmethod
    def _durations(cls, value: object) -> object:
        return _duration_text(value)

    @property
    def lookback_seconds(self) -> float:
        return parse_duration(self.lookback)

    @property
    def interval_seconds(self) -> float:
        return parse_duration(self.interval)

    @property
    def chunk_seconds(self) -> float:
        return parse_duration(self.chunk)


RightsizingMode = Literal["off", "recommend", "auto"]


def _mode_text(value: object) -> object:
    """YAML 1.1 reads an unquoted `off` as false: that is the mode `off`."""
    if value is False:
        return "off"
    return value.lower() if isinstance(value, str) else value


class RightsizingRule(_Section):
    """Where a rightsizing mode applies: pods of namespaces the selector picks and/or that name the profile
    (`kgwe.io/profile`). A rule with both needs both; the first rule that matches decides."""

    namespace_selector: dict[str, Any] | None = Field(default=None, alias="namespaceSelector")
    profile: str | None = None
    mode: RightsizingMode

    _mode = field_validator("mode", mode="before")(_mode_text)

    @model_validator(mode="after")
    def _selects_something(self) -> RightsizingRule:
        if self.namespace_selector is None and not self.profile:
            raise ValueError("a rightsizing rule needs namespaceSelector and/or profile")
        parse_selector(self.namespace_selector)  # raises ValueError naming what is wrong
        return self

    def matches(self, namespace_labels: Mapping[str, str], profile: str | None) -> bool:
        if self.profile and self.profile != profile:
            return False
        selector = parse_selector(self.namespace_selector)
        return selector is None or selector.matches(namespace_labels)


class Rightsizing(_Section):
    """How recommendations and idle GPUs are worked out from usage (SPEC section 11, docs/usage.md)."""

    # At admission (docs/usage.md "At admission"): off (nothing), recommend (a warning with the recommended
    # intent and the saving), auto (new pods of a workload with a confident recommendation get its intent).
    mode: RightsizingMode = "off"
    # Per namespace selector or profile; the first rule that matches a pod decides, else `mode`.
    rules: list[RightsizingRule] = Field(default_factory=list)
    # `auto` writes only recommendations at least this confident (0.67: "high", docs/usage.md).
    auto_min_confidence: float = Field(default=0.67, ge=0, le=1, alias="autoMinConfidence")
    # Admission reads recommendations from a table refreshed from Prometheus this often, in the background.
    refresh_interval: str = Field(default="5m", alias="refreshInterval")
    # A table older than this (Prometheus down since) is no longer used at admission: nothing changes.
    stale_after: str = Field(default="1h", alias="staleAfter")

    # Added to the peak memory before a shape is chosen (0.2: the shape holds the peak plus 20 %).
    memory_margin: float = Field(default=0.2, ge=0, le=10, alias="memoryMargin")
    # A workload gets a recommendation only when its history spans at least this long.
    min_history: str = Field(default="24h", alias="minHistory")
    # Weight of a window halves with each half-life of age (decaying histogram, as VPA and Autopilot).
    half_life: str = Field(default="24h", alias="halfLife")
    # Percentile of the decayed per-interval memory peaks; never below the highest peak seen either way.
    memory_percentile: float = Field(default=0.98, gt=0, le=1, alias="memoryPercentile")
    # Percentile of the decayed per-interval engine activity that a shape's compute share must hold.
    activity_percentile: float = Field(default=0.95, gt=0, le=1, alias="activityPercentile")
    # A pod whose GPUs stayed below this engine activity (0..1) for `idleFor` is idle.
    idle_below: float = Field(default=0.05, ge=0, le=1, alias="idleBelow")
    idle_for: str = Field(default="1h", alias="idleFor")

    _mode = field_validator("mode", mode="before")(_mode_text)

    @field_validator("min_history", "half_life", "idle_for", "refresh_interval", "stale_after", mode="before")
    @classmethod
    def _durations(cls, value: object) -> object:
        return _duration_text(value)

    def mode_for(self, namespace_labels: Mapping[str, str], profile: str | None) -> RightsizingMode:
        """The mode of a pod in a namespace with these labels that names this profile (or none)."""
        for rule in self.rules:
            if rule.matches(namespace_labels, profile):
                return rule.mode
        return self.mode

    @property
    def refresh_seconds(self) -> float:
        return parse_duration(self.refresh_interval)

    @property
    def stale_seconds(self) -> float:
        return parse_duration(self.stale_after)

    @property
    def min_history_seconds(self) -> float:
        return parse_duration(self.min_history)

    @property
    def half_life_seconds(self) -> float:
        return parse_duration(self.half_life)

    @property
    def idle_for_seconds(self) -> float:
        return parse_duration(self.idle_for)


class Costs(_Section):
    """Costs over time and budgets (SPEC section 12, docs/costs.md)."""

    # The grid on which cost series are integrated in Prometheus (`sum_over_time(x[W:step])`): each point
    # stands for one step of time. Shorter is finer and costs Prometheus more points per series.
    step: str = "1m"
    # The API, the pages and budgets keep a computed answer this long before reading again.
    cache_seconds: float = Field(default=60.0, ge=0, alias="cacheSeconds")
    # Read history from `usage.prometheus.url` when it is set (KGWE's own cost series); `directory`: always
    # compute from the pods the cluster model holds (their start and finish times).
    source: Literal["auto", "directory"] = "auto"

    @field_validator("step", mode="before")
    @classmethod
    def _durations(cls, value: object) -> object:
        return _duration_text(value)

    @property
    def step_seconds(self) -> float:
        return parse_duration(self.step)


class MigManager(_Section):
    """NVIDIA's MIG manager's ConfigMap: mode apply adds the configs it names to it (docs/mig.md)."""

    # The ConfigMap the MIG manager reads: the GPU operator's default, or the one its ClusterPolicy names
    # (spec.migManager.config.name). Mode apply adds each config it labels a node with, never removing one.
    config_map: str = Field(default="default-mig-parted-config", alias="configMap", min_length=1, max_length=253)
    # Its namespace (the GPU operator's).
    namespace: str = Field(default="gpu-operator", min_length=1, max_length=63)
    # The key holding the mig-parted file (`version: v1`, `mig-configs: ...`).
    key: str = Field(default="config.yaml", min_length=1, max_length=253)


class Config(_Section):
    mode: Literal["enforce", "audit"] = "enforce"
    pricing: Pricing = Field(default_factory=Pricing)
    rbac: Rbac = Field(default_factory=Rbac)
    policies: Policies = Field(default_factory=Policies)
    limits: Limits = Field(default_factory=Limits)
    quotas: Quotas = Field(default_factory=Quotas)
    authentication: Authentication = Field(default_factory=Authentication)
    server: Server = Field(default_factory=Server)
    gangs: Gangs = Field(default_factory=Gangs)
    audit: Audit = Field(default_factory=Audit)
    dra: DraConfig = Field(default_factory=DraConfig)
    # Topology annotations older than this are stale: the webhook falls back to GFD labels.
    topology_staleness_seconds: float = Field(default=300.0, alias="topologyStalenessSeconds")
    # Taint keys that mark GPU nodes; eligible nodes' taints with these keys get tolerated.
    gpu_taint_keys: list[str] = Field(
        default_factory=lambda: list(resources.DEFAULT_GPU_TAINT_KEYS), alias="gpuTaintKeys"
    )
    # Users allowed to write KGWE's output annotations (the bound-pod controller's service account).
    controller_users: list[str] = Field(default_factory=list, alias="controllerUsers")
    # Extensions of the accelerator type table (see docs/placement.md).
    accelerator_types: list[dict[str, Any]] = Field(default_factory=list, alias="acceleratorTypes")
    # Namespaces the webhook never touches, in addition to the webhook configuration's selector.
    excluded_namespaces: list[str] = Field(default_factory=lambda: ["kube-system"], alias="excludedNamespaces")
    workloads: Workloads = Field(default_factory=Workloads)
    # GPU usage from Prometheus, and the recommendations and idle GPUs worked out from it (SPEC section 11).
    usage: Usage = Field(default_factory=Usage)
    rightsizing: Rightsizing = Field(default_factory=Rightsizing)
    # Costs over time and budgets (SPEC section 12).
    costs: Costs = Field(default_factory=Costs)
    # Where MIGStrategies in mode apply put the configs they name (SPEC section 11, docs/mig.md).
    mig_manager: MigManager = Field(default_factory=MigManager, alias="migManager")

    @field_validator("mode", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    def accelerator_table(self) -> AcceleratorTable:
        return AcceleratorTable.build(extra_types_from_config(self.accelerator_types))

    def price_per_gpu_hour(self, type_id: str) -> Decimal | None:
        return self.pricing.per_gpu_hour.get(type_id)


class ConfigError(ValueError):
    pass


def parse_config(text: str, source: str = "<config>") -> Config:
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the configuration must be a mapping")
    try:
        return Config.model_validate(raw)
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from exc


def load_config(path: str | Path | None) -> Config:
    if path is None:
        return Config()
    file = Path(path)
    return parse_config(file.read_text(encoding="utf-8"), str(file))
