"""Issue 34: `kgwe --help` and every `kgwe COMMAND --help` start in well under 0.3 s of CPU, because they import
no engine, client or model (docs/performance.md, "The command line's start-up").

Held without a clock, which a busy machine would fail: one fresh interpreter runs every help and says which
modules each one imported. A heavy library, or a KGWE module outside the command line's own, is named with
the command that pulled it in; the fix is to import it in the function that needs it. `kgwe review` is held
the same way to what a review of files needs: no API client, no HTTP server, no second engine.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from cluster_dirs import ROOT

# What the helps may load of KGWE: the command line and the modules that build the delegated commands' parsers.
LIGHT = {
    "webhook", "webhook.cli", "webhook.explain_cli", "webhook.command_input", "webhook.output", "webhook.completion",
    "webhook.reports", "webhook.reports.commands", "webhook.reports.parsers", "webhook.reports.tables",
    "policies", "policies.runtime", "policies.runtime.testing", "rego",
    "agent", "agent.main", "agent.defaults", "certs", "certs.commands",
}
KGWE = ("webhook", "policies", "agent", "certs", "rego")
# The libraries whose import alone costs tens to hundreds of milliseconds (or starts native code).
HEAVY = {
    "fastapi", "starlette", "uvicorn", "kubernetes", "kubernetes_validate", "pydantic", "pydantic_core",
    "prometheus_client", "celpy", "cel_expr_python", "re2", "regorus", "opa_bindings", "opa_client",
    "cryptography", "pynvml", "yaml", "jsonschema", "jsonpatch", "requests", "urllib3", "httpx", "anyio",
}

# Runs every help in one interpreter, in order, and prints per help the modules it imported first.
SCRIPT = r"""
import contextlib, io, json, sys

from webhook.cli import DELEGATED, build_parser, main

helps = [[], ["completion", "bash"], ["policy", "test", "--help"], ["certs", "generate", "--help"]]
commands = next(a for a in build_parser()._actions if hasattr(a, "choices") and isinstance(a.choices, dict))
helps += [[name, "--help"] for name in commands.choices]
seen = set(sys.modules)
found = {"(import webhook.cli, build the parser)": [sorted(seen), 0, 1]}
for argv in helps:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            status = main(argv or ["--help"])
        except SystemExit as exc:
            status = exc.code
    now = set(sys.modules)
    found["kgwe " + " ".join(argv or ["--help"])] = [sorted(now - seen), status, len(out.getvalue())]
    seen = now
print(json.dumps(found))
"""


def _imports_by_help() -> dict[str, list]:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=ROOT, timeout=60,
                          check=True)
    found: dict[str, list] = json.loads(done.stdout)
    return found


def test_no_help_imports_an_engine_a_client_or_a_model() -> None:
    found = _imports_by_help()
    assert "kgwe nodes --help" in found and "kgwe explain --help" in found and "kgwe policy --help" in found
    problems = []
    for command, (modules, status, printed) in found.items():
        assert status == 0 and printed, f"{command}: exit status {status}, {printed} characters printed"
        heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY and "." not in m)
        ours = sorted(m for m in modules if m.split(".")[0] in KGWE and m not in LIGHT)
        if heavy or ours:
            problems.append(f"{command} imports {', '.join(heavy + ours)}")
    assert not problems, "\n".join(problems)


# `kgwe review` needs the admission core, its configuration (pydantic) and the policy engines; it reads the
# cluster from files, so nothing that serves HTTP, talks to an API server or runs the other engines. The
# kubernetes client's package alone was half a CPU-second of a review: quantities are parsed by its parser
# loaded without it (policies/vocabulary/kube_quantity.py), and the API writers live apart from what
# admission reads (e.g. webhook/gangs/native_writer.py). The example cluster has no GPUPolicy, so its policy
# set is Rego alone: CEL's engine (cel-expr-python and the protobuf runtime under it, a tenth of a CPU-second
# with its environment) is built by the first GPUPolicy a reload compiles (policies/loading/policy_set.py).
# The server's libraries are not loaded either: a one-shot command's metrics are never read, so they do nothing
# and prometheus_client (whose package imports an HTTP and a WSGI server, urllib and ssl) is not imported for
# them (policies/kernel/metric_kinds.py); its gates run inline, so asyncio (and ssl under it) is imported only
# where the server runs a gate on a thread (webhook/admission/validate.py).
NOT_FOR_REVIEW = {"fastapi", "starlette", "uvicorn", "celpy", "cryptography", "pynvml", "kubernetes",
                  "kubernetes_validate", "jsonschema", "requests", "urllib3", "cel_expr_python", "google",
                  "prometheus_client", "asyncio", "ssl", "wsgiref", "http"}
# KGWE modules a review does not run: the costs report's pydantic models are built by the window view
# (webhook/spend/service.py window_costs); the budget states that admission reads need none of them.
NOT_FOR_REVIEW_MODULES = {"webhook.spend.report"}

REVIEW = r"""
import contextlib, gc, io, json, sys

from webhook.cli import main

sys.argv = ["kgwe", "review", "examples/pods/01-single-type.yaml", "--cluster", "examples/cluster"]
with contextlib.redirect_stdout(io.StringIO()) as out:
    status = main()  # as the process's entry, the way `kgwe` runs it
collector = [gc.isenabled(), gc.get_stats()[2]["collections"], gc.get_freeze_count() > 0]
# Called with arguments, as a longer-lived process does (a test): the pause alone, nothing frozen.
frozen = gc.get_freeze_count()
with contextlib.redirect_stdout(io.StringIO()):
    main(sys.argv[1:])
collector.append(gc.get_freeze_count() <= frozen)  # frozen objects freed leave the count
print(json.dumps([status, "allowed" in out.getvalue().lower(), sorted(sys.modules), collector]))
"""


def test_review_imports_no_server_or_other_engine() -> None:
    done = subprocess.run([sys.executable, "-c", REVIEW], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          check=True)
    status, answered, modules, (collecting, full_collections, frozen, in_process_frozen_nothing) = json.loads(
        done.stdout)
    assert status == 0 and answered
    # The collector waits while the engines are imported and the runtime built (webhook/cluster/collector_pause.py
    # built_once), and runs again afterwards: none of its full passes over what import made. `kgwe` itself freezes
    # what it built (it exits after answering); `main([...])` in a longer-lived process leaves it collectable.
    assert collecting and full_collections == 0 and frozen and in_process_frozen_nothing
    packages = {m.split(".")[0] for m in modules}
    assert not NOT_FOR_REVIEW & packages, f"kgwe review imports {sorted(NOT_FOR_REVIEW & packages)}"
    assert not NOT_FOR_REVIEW_MODULES & set(modules), (
        f"kgwe review imports {sorted(NOT_FOR_REVIEW_MODULES & set(modules))}"
    )


EXPLAIN = r"""
import contextlib, io, json, sys

from webhook.cli import main

sys.argv = ["kgwe", "explain", "ml-research/waiting", "--cluster", "examples/cluster"]
with contextlib.redirect_stdout(io.StringIO()) as out:
    status = main()
print(json.dumps([status, bool(out.getvalue()), sorted(sys.modules)]))
"""


def test_explain_of_files_imports_no_server_library() -> None:
    done = subprocess.run([sys.executable, "-c", EXPLAIN], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          check=True)
    status, answered, modules = json.loads(done.stdout)
    assert status == 0 and answered
    packages = {m.split(".")[0] for m in modules}
    assert not NOT_FOR_REVIEW & packages, f"kgwe explain imports {sorted(NOT_FOR_REVIEW & packages)}"


# Every other process (the server, the reports, the tests) gets prometheus_client's own metrics, registered when
# their module is imported, so `/metrics` shows each one from the start and a request counts straight into it;
# after `unscraped()` the metrics made do nothing and prometheus_client stays unloaded.
METRICS = r"""
import json, sys

if sys.argv[1] == "unscraped":
    from policies.kernel.metric_kinds import unscraped

    unscraped()
import webhook.assembly
from policies.kernel import background, metrics
from webhook.admission import validate
from webhook.cluster import metrics as cluster_metrics
from webhook.spend import metrics as spend_metrics

# What KGWE's modules do with a metric, each kind once.
metrics.record_refusal("quota")
metrics.POLICY_EVALUATION_SECONDS.labels("validate").observe(0.001)
metrics.replace_series(cluster_metrics.TOPOLOGY_AGE, {("n1",): 1.0})
metrics.replace_series(cluster_metrics.TOPOLOGY_AGE, {("n2",): 2.0})  # n1 goes
cluster_metrics.CLUSTER_DIRECTORY_ERRORS.set(1)
cluster_metrics.CLUSTER_DIRECTORY_REFUSED.inc()
validate.GATE_ANSWERS.labels("quota", "at-once").inc()
background.FAILURES.labels("task").inc()
background.LAST_SUCCESS.labels("task").set_to_current_time()
background.LAST_SUCCESS.labels("task").dec()
background.LAST_SUCCESS.clear()
made = [metrics.ADMISSION_REFUSALS, metrics.POLICY_EVALUATION_SECONDS, cluster_metrics.TOPOLOGY_AGE,
        validate.GATE_ANSWERS, background.LAST_SUCCESS, spend_metrics.BUDGET_SPENT, webhook.runtime.WOULD_MUTATE]
found = {"kinds": sorted({type(m).__module__ for m in made}), "loaded": "prometheus_client" in sys.modules}
if found["loaded"]:
    from prometheus_client import REGISTRY

    found["samples"] = [REGISTRY.get_sample_value(name, labels) for name, labels in (
        ("kgwe_admission_refusals_total", {"reason": "quota"}), ("kgwe_topology_age_seconds", {"node": "n1"}),
        ("kgwe_topology_age_seconds", {"node": "n2"}), ("kgwe_cluster_directory_refused_total", {}),
        ("kgwe_validate_gate_answers_total", {"gate": "quota", "where": "at-once"}),
        ("kgwe_would_mutate_total", {"step": "x"}), ("kgwe_budget_spent", {"tenant": "x"}))]
print(json.dumps(found))
"""


def test_metrics_are_prometheus_clients_own_unless_a_one_shot_command_says_none_is_read() -> None:
    def run(mode: str) -> dict:
        done = subprocess.run([sys.executable, "-c", METRICS, mode], capture_output=True, text=True, cwd=ROOT,
                              timeout=120, check=True)
        found: dict = json.loads(done.stdout)
        return found

    served = run("served")
    assert served["loaded"] and served["kinds"] == ["prometheus_client.metrics"]
    assert served["samples"] == [1.0, None, 2.0, 1.0, 1.0, None, None]
    quiet = run("unscraped")
    assert quiet == {"kinds": ["policies.kernel.metric_kinds"], "loaded": False}


# A mistake in the arguments is told before the engines load: the input is checked first, then the
# configuration, then the engines are imported (the configuration's model is the one thing allowed after the
# file and the directory are read).
MISTAKES = r"""
import contextlib, io, json, sys

from webhook.cli import main

found = {}
for argv in (["review", "missing.yaml", "--cluster", "examples/cluster"],
             ["review", "examples/pods/01-single-type.yaml", "--cluster", "nowhere"],
             ["serve", "--tls-cert-file", "x.crt"]):
    seen = set(sys.modules)
    with contextlib.redirect_stderr(io.StringIO()) as err:
        status = main(argv)
    found[" ".join(argv)] = [status, err.getvalue(), sorted(set(sys.modules) - seen)]
print(json.dumps(found))
"""


def test_a_mistake_in_the_arguments_is_told_before_the_engines_load() -> None:
    done = subprocess.run([sys.executable, "-c", MISTAKES], capture_output=True, text=True, cwd=ROOT, timeout=60,
                          check=True)
    problems = []
    for command, (status, error, modules) in json.loads(done.stdout).items():
        assert status == 2 and error.startswith("kgwe "), f"kgwe {command}: status {status}, {error!r}"
        heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY - {"yaml"} and "." not in m)
        ours = sorted(m for m in modules if m.split(".")[0] in KGWE and m not in LIGHT)
        if heavy or ours:
            problems.append(f"kgwe {command} imports {', '.join(heavy + ours)} before saying {error.strip()!r}")
    assert not problems, "\n".join(problems)


def test_several_workers_refused_on_a_busy_port_leave_no_metrics_directory(tmp_path: Path) -> None:
    """The parent re-executes itself for prometheus-client's multiprocess mode before it reads the configuration
    (so that it imports the engines once), and removes the directory it made when it cannot start."""
    with socket.create_server(("127.0.0.1", 0)) as held:
        env = {**os.environ, "TMPDIR": str(tmp_path), "KGWE_STATE_DIR": str(tmp_path / "state")}
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        done = subprocess.run(
            [sys.executable, "-m", "webhook.cli", "serve", "--cluster", "examples/cluster", "--host", "127.0.0.1",
             "--port", str(held.getsockname()[1]), "--workers", "2"],
            capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
        )
    assert done.returncode == 2 and "already in use" in done.stderr, done.stderr
    assert not list(tmp_path.glob("kgwe-metrics-*"))


# `kgwe serve` over a YAML directory talks to no API server: its modules name the kubernetes client's classes
# only where a cluster is read or asked (policies/kernel/api_errors.py), so a directory server does not pay
# the client's import (a quarter to half a CPU-second of each start; the suite starts about fifty).
SERVE_MODULES = r"""
import json, sys

import webhook.assembly, webhook.controllers.runner, webhook.server.app, webhook.server.api_routes
import webhook.server.serving, webhook.server.read_auth, webhook.server.token_review, webhook.server.read_access
webhook.assembly.wing_controllers  # the wings' controllers, as serve builds them
import webhook.gangs.controller, webhook.quotas.controller, webhook.dra.garbage

print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & {"kubernetes", "kubernetes_validate", "urllib3"})))
"""


def test_a_directory_server_imports_no_kubernetes_client() -> None:
    done = subprocess.run([sys.executable, "-c", SERVE_MODULES], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, check=True)
    assert json.loads(done.stdout) == [], done.stdout


# With RUST_BACKTRACE set (developers' shells, CI images) Rust's std captured a backtrace for every error value
# regorus made, and its parser makes and drops errors while it parses: 15 % of a review's CPU. The policy
# engines' package turns library backtraces off unless the user asked for them (RUST_LIB_BACKTRACE); the
# captured text shows in an error's message, so the message says whether one was taken.
BACKTRACES = r"""
import json, os

import policies.engines.rego  # loads the engines' package, as every engine module does
import regorus

try:
    regorus.Engine().add_policy("bad.rego", "package x\nallow if { input.x == }\n")
except Exception as exc:
    print(json.dumps([os.environ.get("RUST_LIB_BACKTRACE"), "Stack backtrace" in str(exc)]))
"""


def test_regorus_errors_capture_no_backtrace_unless_asked() -> None:
    def run(**env: str) -> list:
        base = {k: v for k, v in os.environ.items() if k not in ("RUST_BACKTRACE", "RUST_LIB_BACKTRACE")}
        done = subprocess.run([sys.executable, "-c", BACKTRACES], capture_output=True, text=True, cwd=ROOT,
                              env={**base, **env}, timeout=60, check=True)
        found: list = json.loads(done.stdout)
        return found

    assert run(RUST_BACKTRACE="1") == ["0", False]
    assert run() == [None, False]
    assert run(RUST_BACKTRACE="1", RUST_LIB_BACKTRACE="1") == ["1", True]
