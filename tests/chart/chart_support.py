"""Render charts/kgwe with the real Helm engine (helm-python-sdk bundles Helm's Go library)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import celpy
import helm_python as helm
import pytest
import yaml

# libyaml's parser where PyYAML has it: reading Helm's output was most of a render's time with the pure-Python
# one (the same safe constructor builds the objects either way).
from manifests import YAML_LOADER, manifests

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "kgwe"
RELEASE = "kgwe"
NAMESPACE = "kgwe-system"

# Value sets every structural test runs against.
SCENARIOS: dict[str, dict[str, Any]] = {
    "default": {},
    "cert-manager": {"certManager": {"enabled": True}},
    "cert-manager-external-issuer": {
        "certManager": {"enabled": True, "issuerRef": {"kind": "ClusterIssuer", "name": "corp-ca"}}
    },
    "audit-mode": {"config": {"mode": "audit"}},
    "agent-off": {"agent": {"enabled": False}},
    "agent-volume-mount-devices": {"agent": {"devicesAsVolumeMount": True}},
    "agent-metrics": {"agent": {"metrics": {"enabled": True, "serviceMonitor": {"enabled": True}}}},
    "agent-metrics-tls": {"agent": {"metrics": {
        "enabled": True, "podResources": False, "tls": {"secretName": "agent-tls"}, "serviceMonitor": {"enabled": True},
    }}},
    "ui-off": {"ui": {"enabled": False}},
    "monitoring": {
        "metrics": {
            "serviceMonitor": {"enabled": True},
            "prometheusRule": {"enabled": True},
            "grafanaDashboard": {"enabled": True},
        }
    },
    "locked-down": {
        "rbac": {"allowAllProfiles": False},
        "agent": {"runtimeClassName": "", "nodeScopePolicy": {"enabled": False}},
        "webhook": {"replicas": 1, "podDisruptionBudget": {"enabled": False}, "priorityClassName": ""},
        "webhooks": {
            "excludedNamespaces": ["kube-system", "monitoring"],
            "resourcePrefixes": ["nvidia.com/", "amd.com/"],
            "namespaceSelectorExpressions": [{"key": "kgwe.io/enabled", "operator": "In", "values": ["true"]}],
        },
    },
}


@dataclass(frozen=True)
class Rendered:
    """One `helm template` run: the release's objects (templates only) and NOTES.txt."""

    objects: list[dict[str, Any]]
    notes: str
    namespace: str

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [obj for obj in self.objects if obj["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [obj for obj in self.of_kind(kind) if name is None or obj["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
        return found[0]

    def names(self, kind: str) -> set[str]:
        return {obj["metadata"]["name"] for obj in self.of_kind(kind)}


def render(values: dict[str, Any] | None = None, namespace: str = NAMESPACE, release: str = RELEASE) -> Rendered:
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render(values or {}, name=release, namespace=namespace, is_install=True)
    objects: list[dict[str, Any]] = []
    notes = ""
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        objects.extend(doc for doc in yaml.load_all(text, Loader=YAML_LOADER) if doc)
    return Rendered(objects=objects, notes=notes, namespace=namespace)


def crds() -> list[dict[str, Any]]:
    with helm.Chart.load(CHART) as chart:
        return [yaml.load(crd["data"], Loader=YAML_LOADER) for crd in chart.crds]


@pytest.fixture(scope="session")
def rendered_scenarios() -> dict[str, Rendered]:
    return {name: render(values) for name, values in SCENARIOS.items()}


@pytest.fixture(scope="session")
def default(rendered_scenarios: dict[str, Rendered]) -> Rendered:
    return rendered_scenarios["default"]


@pytest.fixture(scope="session")
def chart_crds() -> dict[str, dict[str, Any]]:
    return {crd["spec"]["names"]["kind"]: crd for crd in crds()}


class Cel:
    """Evaluates the chart's CEL with cel-python, the way the API server would on an admission request."""

    def __init__(self) -> None:
        self._env = celpy.Environment()

    def evaluate(self, expression: str, /, **activation: Any) -> Any:
        program = self._env.program(self._env.compile(expression))
        return program.evaluate({name: celpy.json_to_cel(value) for name, value in activation.items()})

    def check(self, expression: str, /, **activation: Any) -> bool:
        """A condition's value; anything but a bool (an error, a string) is a test failure."""
        result = self.evaluate(expression, **activation)
        assert isinstance(result, celpy.celtypes.BoolType), f"{expression!r} gave {result!r}"
        return bool(result)


@pytest.fixture(scope="session")
def cel() -> Cel:
    return Cel()


def example_documents(*directories: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    return manifests(*directories, pattern="*.y*ml")
