"""The Dockerfile (no container engine here): its stages, its user, and a build context that suffices."""

from __future__ import annotations

import tomllib

from chart_support import REPO, Rendered

DOCKERFILE = REPO / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    lines: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or (line.startswith("#") and not pending):
            continue
        if line.startswith("#"):
            continue
        pending += line.removesuffix("\\").strip() + " "
        if not line.endswith("\\"):
            keyword, _, rest = pending.strip().partition(" ")
            lines.append((keyword.upper(), rest.strip()))
            pending = ""
    return lines


def _final_stage() -> list[tuple[str, str]]:
    instructions = _instructions()
    last_from = max(i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    return instructions[last_from:]


def _copied_sources() -> list[str]:
    """Paths COPY'd from the build context (not from another stage)."""
    sources: list[str] = []
    for keyword, rest in _instructions():
        if keyword == "COPY" and not rest.startswith("--from"):
            sources.extend(rest.split()[:-1])
    return sources


def test_build_is_multi_stage() -> None:
    stages = [rest for keyword, rest in _instructions() if keyword == "FROM"]
    assert len(stages) >= 2
    assert any(rest.startswith("--from=build") for keyword, rest in _final_stage() if keyword == "COPY")


def test_runtime_user_is_the_charts_non_root_user(default: Rendered) -> None:
    users = [rest for keyword, rest in _final_stage() if keyword == "USER"]
    assert users, "the runtime stage must name its user"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0 and gid.isdigit() and int(gid) != 0
    pod = default.one("Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == int(uid)


def test_entrypoint_is_the_kgwe_cli() -> None:
    assert ("ENTRYPOINT", '["kgwe"]') in _final_stage()
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["scripts"]["kgwe"]


def test_every_package_is_in_the_build_context() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    # Packages are discovered by include patterns ("webhook*", ...): their roots are the top-level folders.
    patterns = project["tool"]["setuptools"]["packages"]["find"]["include"]
    top_level = {pattern.rstrip("*").split(".")[0] for pattern in patterns}
    copied = {source.split("/")[0] for source in _copied_sources()}
    assert top_level <= copied
    assert "pyproject.toml" in copied and project["project"]["readme"] in copied
    ignored = (REPO / ".dockerignore").read_text(encoding="utf-8").split()
    assert not top_level & set(ignored)
