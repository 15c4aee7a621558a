"""docs/reference.md, generated from the code so it cannot drift.

    python -m webhook.reference            # print the page
    python -m webhook.reference --write    # rewrite docs/reference.md
    python -m webhook.reference --check    # exit 1 when docs/reference.md is not what the code says

Three tables, each read from where the behaviour lives:

- every `kgwe.io/...` annotation, label and scheduling gate: module-level string constants of the
  packages (read with `ast`, nothing imported), with the modules that use them;
- every built-in accelerator type id (`agent/accelerator_types.py`): product, memory, MIG profiles,
  NVSwitch;
- every configuration key (`webhook/config.py`'s pydantic models): its path as written in YAML, its
  type, its default, and the comment above the field in the code.

tests/reference/test_reference.py regenerates the page and compares it with the committed one.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import sys
import types
import typing
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from policies.vocabulary.accelerator_types import BUILTIN_TYPES
from webhook.config import Config

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "reference.md"
PACKAGES = ("webhook", "policies", "agent", "certs")
PREFIX = "kgwe.io/"
# `kgwe.io/<version>` is an API group, not an annotation; a bare prefix is a namespace check.
# `kgwe.io/quantity` tags quantities inside the CEL engine and never appears on an object.
_NOT_KEYS = ("kgwe.io/v1", "kgwe.io/v1alpha1", "kgwe.io/v1beta1", "kgwe.io/quantity")


def _constants() -> dict[str, list[tuple[str, str]]]:
    """`kgwe.io/...` value -> [(module, constant name)], from every module-level `NAME = "kgwe.io/..."`."""
    found: dict[str, list[tuple[str, str]]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            for node in tree.body:
                targets: list[ast.expr] = []
                value: ast.expr | None = None
                if isinstance(node, ast.Assign):
                    targets, value = node.targets, node.value
                elif isinstance(node, ast.AnnAssign) and node.value is not None:
                    targets, value = [node.target], node.value
                if not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
                    continue
                text = value.value
                if not text.startswith(PREFIX) or text == PREFIX or text in _NOT_KEYS:
                    continue
                for target in targets:
                    if isinstance(target, ast.Name):
                        found.setdefault(text, []).append((module, target.id))
    return found


def _kinds(names: list[str]) -> str:
    kinds = set()
    for name in names:
        upper = name.upper()
        if upper.startswith("KUEUE_"):
            kinds.add("Kueue quota name")  # `kgwe profiles --kueue` on DRA clusters; never on an object
        elif "LABEL" in upper or upper.endswith("_KEY") or upper == "TENANT_LABEL":
            kinds.add("label")
        elif "GATE" in upper:
            kinds.add("scheduling gate")
        else:
            kinds.add("annotation")
    return ", ".join(sorted(kinds))


def annotations_table() -> list[str]:
    rows = ["| key | kind | defined in |", "| --- | --- | --- |"]
    for key, places in sorted(_constants().items()):
        where = ", ".join(sorted({f"`{module}.{name}`" for module, name in places}))
        rows.append(f"| `{key}` | {_kinds([name for _m, name in places])} | {where} |")
    return rows


def types_table() -> list[str]:
    rows = ["| type id | product | memory (GB) | MIG profiles | NVSwitch |", "| --- | --- | --- | --- | --- |"]
    for accel in sorted(BUILTIN_TYPES, key=lambda a: a.type_id):
        mig = ", ".join(f"`{p.name}` (up to {p.max_instances})" for p in accel.mig_profiles) or "-"
        rows.append(f"| `{accel.type_id}` | {accel.product_name} | {accel.memory_gb} | {mig} | "
                    f"{'yes' if accel.nvswitch else 'no'} |")
    return rows


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " \\| ".join(json.dumps(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin is not None:
        args = ", ".join(_type_name(a) for a in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation))


def _default_text(value: Any) -> str:
    if isinstance(value, BaseModel):
        return ""
    if isinstance(value, Decimal):
        return str(value)
    try:
        return json.dumps(value, default=str)
    except TypeError:
        return str(value)


def _field_comments(model: type[BaseModel]) -> dict[str, str]:
    """The `# ...` lines right above each field (and a trailing comment on its line), by field name."""
    try:
        lines = inspect.getsource(model).splitlines()
    except (OSError, TypeError):
        return {}
    comments: dict[str, str] = {}
    for index, line in enumerate(lines):
        stripped = line.strip()
        name = stripped.split(":", 1)[0].strip()
        if ":" not in stripped or name not in model.model_fields:
            continue
        above: list[str] = []
        cursor = index - 1
        while cursor >= 0 and lines[cursor].strip().startswith("#"):
            above.insert(0, lines[cursor].strip().lstrip("#").strip())
            cursor -= 1
        if "  # " in line:
            above.append(line.split("  # ", 1)[1].strip())
        comments[name] = " ".join(above).replace("|", "\\|")
    return comments


def _walk(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, str, str, str]]:
    comments = _field_comments(model)
    instance = model()
    for name, info in model.model_fields.items():
        key = f"{prefix}{info.alias or name}"
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _walk(annotation, f"{key}.")
            continue
        yield key, _type_name(annotation), _default_text(getattr(instance, name)), comments.get(name, "")


def config_table() -> list[str]:
    rows = ["| key | type | default | what |", "| --- | --- | --- | --- |"]
    for key, type_name, default, comment in _walk(Config, ""):
        rows.append(f"| `{key}` | {type_name} | `{default}` | {comment} |")
    return rows


def render() -> str:
    """The whole page."""
    parts = [
        "# Reference",
        "",
        "Generated from the code by `python -m webhook.reference --write`; do not edit by hand",
        "(tests/reference/test_reference.py fails when this page and the code disagree).",
        "",
        "## Annotations, labels and scheduling gates",
        "",
        "Every `kgwe.io/` key the code reads or writes. What each means for a pod is in",
        "[placement.md](placement.md), [gangs.md](gangs.md), [costs.md](costs.md) and [topology.md](topology.md).",
        "",
        *annotations_table(),
        "",
        "## Accelerator type ids",
        "",
        "The built-in table (`agent/accelerator_types.py`); `acceleratorTypes` in the configuration adds more.",
        "Memory is the marketed size; MIG profile sizes are read in GiB when matched against `kgwe.io/gpu-memory`.",
        "",
        *types_table(),
        "",
        "## Configuration keys",
        "",
        "The configuration file (`kgwe serve --config FILE`; the chart's `config:` values), by YAML path, with",
        "the default used when the key is absent (`webhook/config.py`).",
        "",
        *config_table(),
        "",
    ]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m webhook.reference", description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"rewrite {PAGE.relative_to(ROOT)}")
    mode.add_argument("--check", action="store_true", help=f"exit 1 when {PAGE.relative_to(ROOT)} is stale")
    args = parser.parse_args(argv)
    page = render()
    if args.write:
        PAGE.write_text(page, encoding="utf-8")
        return 0
    if args.check:
        current = PAGE.read_text(encoding="utf-8") if PAGE.is_file() else ""
        if current != page:
            print(f"{PAGE.relative_to(ROOT)} is stale: run python -m webhook.reference --write", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
