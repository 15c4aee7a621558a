"""Reads policy sources into `PolicySource` units: built-in Rego modules, admin `.rego` files and
`GPUPolicy` manifests from directories, and `GPUPolicy` objects from the cluster.

A unit is what succeeds or fails to load as a whole and what a status condition talks about: one Rego
package (all its files) or one GPUPolicy. Nothing is compiled here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from policies.engines.rego_source import RegoModuleInfo, RegoSourceError, bind_params, inspect_module
from policies.loading.gpupolicy import fingerprint, policy_name

Origin = Literal["builtin", "directory", "cluster"]
ORIGIN_RANK: dict[str, int] = {"builtin": 0, "directory": 1, "cluster": 2}


@dataclass
class PolicySource:
    name: str  # Rego package path, or the GPUPolicy's metadata.name
    kind: Literal["rego", "GPUPolicy"]
    origin: Origin
    location: str  # "builtin", file paths, or "GPUPolicy/<name>"
    modules: dict[str, str] = field(default_factory=dict)  # module file name -> source (Rego units)
    infos: list[RegoModuleInfo] = field(default_factory=list)
    gpu_policy: dict[str, Any] | None = None
    error: str | None = None  # a problem found while reading (unreadable file, no package)

    @property
    def fingerprint(self) -> str:
        if self.gpu_policy is not None:
            return fingerprint(self.gpu_policy)
        digest = hashlib.sha256()
        for name in sorted(self.modules):
            digest.update(name.encode() + b"\0" + self.modules[name].encode() + b"\0")
        return digest.hexdigest()

    @property
    def rules(self) -> frozenset[str]:
        return frozenset().union(*(info.rules for info in self.infos)) if self.infos else frozenset()

    @property
    def is_policy(self) -> bool:
        """Rego packages without deny/warn/decision are libraries the policies import."""
        return self.kind == "GPUPolicy" or bool(self.rules)


def _rego_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*.rego") if not p.name.endswith("_test.rego"))


def read_rego_directory(directory: Path, origin: Origin) -> list[PolicySource]:
    """Group a directory's non-test modules by package; a package split over files is one unit."""
    units: dict[str, PolicySource] = {}
    for path in _rego_files(directory):
        module_name = f"{origin}:{path.relative_to(directory).as_posix()}"
        try:
            source = path.read_text(encoding="utf-8")
            info = inspect_module(source)
        except (OSError, UnicodeDecodeError, RegoSourceError) as exc:
            name = f"{origin}:{path.name}"
            units[name] = PolicySource(name, "rego", origin, str(path), error=f"{path}: {exc}")
            continue
        unit = units.setdefault(info.package, PolicySource(info.package, "rego", origin, ""))
        unit.modules[module_name] = source
        unit.infos.append(info)
        unit.location = ", ".join(filter(None, [unit.location, "builtin" if origin == "builtin" else str(path)]))
    return list(units.values())


def read_gpu_policy_manifests(directory: Path) -> list[dict[str, Any]]:
    """GPUPolicy documents from YAML files (multi-document allowed); other kinds are ignored."""
    found: list[dict[str, Any]] = []
    for path in sorted([*directory.rglob("*.yaml"), *directory.rglob("*.yml")]):
        try:
            documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue  # not ours to judge: the cluster directory reader reports broken manifests
        for document in documents:
            if isinstance(document, dict) and document.get("kind") == "GPUPolicy":
                found.append(document)
    return found


def gpu_policy_sources(objects: Iterable[Mapping[str, Any]], origin: Origin) -> list[PolicySource]:
    units: list[PolicySource] = []
    for obj in objects:
        name = policy_name(obj)
        unit = PolicySource(name or "<unnamed>", "GPUPolicy", origin, f"GPUPolicy/{name}", gpu_policy=dict(obj))
        spec = obj.get("spec")
        rego = spec.get("rego") if isinstance(spec, dict) else None
        # A malformed spec is refused by compile_gpu_policy (gpupolicy.shape_errors), with its messages.
        module = rego.get("module") if isinstance(rego, dict) else None
        if module is not None:
            try:
                info = inspect_module(str(module))
            except RegoSourceError:
                info = None  # compile_gpu_policy reports it with the rest of the spec's problems
            if info is not None:
                unit.modules[f"GPUPolicy:{name}.rego"] = bind_params(str(module), name)
                unit.infos.append(info)
        units.append(unit)
    return units


def collect_sources(
    *, builtin_dir: Path | None, directories: Iterable[str], gpu_policies: Iterable[Mapping[str, Any]]
) -> list[PolicySource]:
    """Every unit in precedence order: built-ins, then directories, then cluster objects.

    An admin Rego package with the same name as a built-in one replaces it; a GPUPolicy object from the
    cluster replaces a manifest of the same name from a directory.
    """
    units: dict[tuple[str, str], PolicySource] = {}

    def add(unit: PolicySource) -> None:
        key = (unit.kind, unit.name)
        units.pop(key, None)  # re-insert so that the overriding unit takes the later position
        units[key] = unit

    if builtin_dir is not None:
        for unit in read_rego_directory(builtin_dir, "builtin"):
            add(unit)
    for directory in directories:
        path = Path(directory)
        for unit in read_rego_directory(path, "directory"):
            add(unit)
        for unit in gpu_policy_sources(read_gpu_policy_manifests(path), "directory"):
            add(unit)
    for unit in gpu_policy_sources(gpu_policies, "cluster"):
        add(unit)
    return list(units.values())
