"""KGWE's configuration file (SPEC section 6): YAML on disk, the same content from a ConfigMap in a cluster."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent.accelerator_types import AcceleratorTable, extra_types_from_config
from webhook.dra.config import DraConfig


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
    # What to do when an engine or the OPA server cannot answer: fail open (admit) or closed (refuse).
    failure_mode: Literal["open", "closed"] = Field(default="open", alias="failureMode")
    builtin: bool = True
    directories: list[str] = Field(default_factory=list)


class Limits(_Section):
    max_request_bytes: int = Field(default=3 * 1024 * 1024, alias="maxRequestBytes")
    # Answer before the API server gives up on us (webhook timeoutSeconds minus a margin).
    deadline_seconds: float = Field(default=2.5, alias="deadlineSeconds")
    # On the deadline or an internal error: `allow` (fail open) or `deny` (fail closed).
    on_error: Literal["allow", "deny"] = Field(default="allow", alias="onError")


class Quotas(_Section):
    # Reservations no pod backs are released after this many seconds.
    reservation_grace_seconds: float = Field(default=60.0, alias="reservationGraceSeconds")


class Config(_Section):
    mode: Literal["enforce", "audit"] = "enforce"
    pricing: Pricing = Field(default_factory=Pricing)
    rbac: Rbac = Field(default_factory=Rbac)
    policies: Policies = Field(default_factory=Policies)
    limits: Limits = Field(default_factory=Limits)
    quotas: Quotas = Field(default_factory=Quotas)
    dra: DraConfig = Field(default_factory=DraConfig)
    # Topology annotations older than this are stale: the webhook falls back to GFD labels.
    topology_staleness_seconds: float = Field(default=300.0, alias="topologyStalenessSeconds")
    # Taint keys that mark GPU nodes; eligible nodes' taints with these keys get tolerated.
    gpu_taint_keys: list[str] = Field(
        default_factory=lambda: ["nvidia.com/gpu", "amd.com/gpu", "kgwe.io/gpu"], alias="gpuTaintKeys"
    )
    # Users allowed to write KGWE's output annotations (the bound-pod controller's service account).
    controller_users: list[str] = Field(default_factory=list, alias="controllerUsers")
    # Extensions of the accelerator type table (see docs/placement.md).
    accelerator_types: list[dict[str, Any]] = Field(default_factory=list, alias="acceleratorTypes")
    # Namespaces the webhook never touches, in addition to the webhook configuration's selector.
    excluded_namespaces: list[str] = Field(default_factory=lambda: ["kube-system"], alias="excludedNamespaces")

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
