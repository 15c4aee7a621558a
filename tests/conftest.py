"""The suite's one switch: `--long` runs the tests marked `slow` (long fuzz hunts, soaks), which the default
run leaves out so that nothing in it depends on how busy the machine is (`python3 dev.py test --long`)."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

import webhook.assembly  # noqa: F401  (it registers the wings' steps in the core's seams, as in the product)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true", default=False,
                     help="also run the tests marked slow: long fuzz hunts and soaks (minutes more)")


def pytest_configure(config: pytest.Config) -> None:
    # Read by tests/fixtures/effort.py when test modules are imported (after this hook, in every xdist worker).
    if config.getoption("--long"):
        os.environ["KGWE_LONG"] = "1"
    # KGWE's state (certificates, the signing key) of the tests' own, never the user's `~/.local/state/kgwe`;
    # tests that start `kgwe serve` give it a directory of their own.
    if "KGWE_STATE_DIR" not in os.environ:
        os.environ["KGWE_STATE_DIR"] = tempfile.mkdtemp(prefix="kgwe-test-state-")
    _schemas_read_once()
    _example_manifests_parsed_once()


def _example_manifests_parsed_once() -> None:
    """Hundreds of tests build a runtime over examples/cluster*, many a fresh one per request (the memo tests
    compare with a runtime that never saw the pod), and PyYAML's constructor is most of what that costs: 8 % of the
    suite's Python. The example manifests do not change during a run, so each version of each file (inode, size,
    mtime) is parsed once per worker and every reader gets a copy of its own, equal to what a parse returns. Files
    elsewhere (the tests' own directories, rewritten mid-test) are parsed every time, as the product does."""
    import copy
    from pathlib import Path

    import orjson

    from webhook.cluster import yaml_source

    examples = Path(__file__).resolve().parent.parent / "examples"
    parse = yaml_source.parse_manifest_file
    parsed: dict[tuple[str, int, int, int], list[dict[str, Any]]] = {}

    def parse_once(path: Path) -> list[dict[str, Any]]:
        resolved = Path(path).resolve()
        if not resolved.is_relative_to(examples):
            return parse(path)
        stat = resolved.stat()
        key = (str(resolved), stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if key not in parsed:
            parsed[key] = parse(path)
        try:
            return orjson.loads(orjson.dumps(parsed[key]))  # type: ignore[no-any-return]
        except TypeError:  # YAML's own types (dates, huge integers): copied as they are
            return copy.deepcopy(parsed[key])

    yaml_source.parse_manifest_file = parse_once  # type: ignore[assignment]


def _schemas_read_once() -> None:
    """kubernetes-validate reads and parses its schema files, the multi-megabyte definitions among them, at every
    `validate()`: the suite validates a few hundred objects, so each file is read once per worker instead. The
    library does not change what it reads, so sharing the parsed documents changes no answer."""
    import functools

    import kubernetes_validate.utils

    if not hasattr(kubernetes_validate.utils.schema_contents, "cache_info"):
        kubernetes_validate.utils.schema_contents = functools.lru_cache(maxsize=None)(
            kubernetes_validate.utils.schema_contents)


# The files that take longest on a worker, longest first (a full run on 2 CPUs, 2026-11-29): they run
# first, so that `--dist loadfile` (a whole file to one worker) never starts one of them last while the other
# worker has nothing left to do (issue 34). The other files keep their order after them.
LONGEST_FIRST = (
    "tests/server/test_real_runtime.py", "tests/server/test_callers.py", "tests/workloads/test_workload_admission.py",
    "tests/ui/test_pages.py", "tests/policies/test_answer_memo.py", "tests/policies/test_rego_rvm.py",
    "tests/faults/test_cluster_directory_faults.py", "tests/agent/test_agent_metrics_auth.py",
    "tests/chart/test_chart_render.py", "tests/firsthour/test_documented_commands.py",
    "tests/quotas/test_replica_queue_warnings.py", "tests/guarantees/test_ownership_and_updates.py",
    "tests/firsthour/test_kubectl_habits.py", "tests/chart/test_chart_scoping.py", "tests/ui/test_why_page.py",
    "tests/vap/test_quota_gate_policy.py", "tests/policies/test_gpupolicy_shapes.py",
    "tests/chart/test_chart_monitoring.py", "tests/quotas/test_admission_quotas.py",
    "tests/firsthour/test_serve_first_run.py", "tests/firsthour/test_example_cluster_story.py",
    "tests/ui/test_busy_cluster.py", "tests/ui/test_usage_columns.py", "tests/gangs/test_gang_serve_workload_api.py",
    "tests/workloads/test_kueue_profiles.py", "tests/policies/test_rego_projection_differential.py",
    "tests/costs/test_window_costs_prometheus.py", "tests/firsthour/test_wide_completion_exit_code.py",
    "tests/ui/test_mig_plan_page.py", "tests/dra/test_dra_offline.py", "tests/policies/test_native_split.py",
    "tests/load/test_wrk_driver.py", "tests/gangs/test_gang_serve.py", "tests/reports/test_cli_in_cluster.py",
    "tests/usage/test_usage_prometheus.py", "tests/reports/test_cli.py", "tests/reference/test_reference.py",
    "tests/server/test_serve_in_cluster.py", "tests/workloads/test_review_cli.py",
    "tests/faults/test_opa_unreachable_at_load.py", "tests/server/test_read_auth.py",
    "tests/quotas/test_quota_controller.py", "tests/faults/test_legal_size_floods.py", "tests/ui/test_costs_page.py",
)


# Files that share one worker, one after another, under `--dist loadfile`: the UI's tests share one browser
# (tests/ui/conftest.py), which costs about two CPU-seconds to start.
SHARED_SCOPES = ("tests/ui/",)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class _FilesAndSharedFolders(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return next((folder for folder in SHARED_SCOPES if path.startswith(folder)), path)

    return _FilesAndSharedFolders(config, log)


def _browser_files_together(items: list[pytest.Item]) -> None:
    """The files whose tests use a browser, one after another from where the first of them stands, so that the
    shared browser is started once."""
    files = {item.nodeid.split("::", 1)[0] for item in items if "browser" in getattr(item, "fixturenames", ())}
    using = [item for item in items if item.nodeid.split("::", 1)[0] in files]
    if not using:
        return
    for item in using:
        item.add_marker(pytest.mark.browser_file)
    others = [item for item in items if item.nodeid.split("::", 1)[0] not in files]
    first = items.index(using[0])
    items[:] = others[:first] + using + others[first:]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {path: n for n, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(LONGEST_FIRST)))  # stable
    _browser_files_together(items)
    if config.getoption("--long"):
        return
    skip = pytest.mark.skip(reason="slow: runs with --long (python3 dev.py test --long)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="module")
def _stored_parts_unchanged() -> Iterator[None]:
    """Nothing changes a stored object or any part of it in place: parts equal across pods are one object
    (webhook/cluster/shared_parts.py), so a change in place would change every pod that shares it. Checked after
    each module of tests, in every test process."""
    yield
    shared_parts = sys.modules.get("webhook.cluster.shared_parts")
    if shared_parts is not None:
        changed = shared_parts.SHARED.changed()
        assert not changed, f"stored pods' shared parts changed in place at {sorted(set(changed))}"
