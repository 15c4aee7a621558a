"""`kgwe serve`: TLS material, the runtime, the app and uvicorn, in one process or several.

Several workers each accept on their own listening socket (SO_REUSEPORT, bound by the parent; one shared
socket where the system has no SO_REUSEPORT); each worker builds its own runtime
after the fork (threads and watches do not survive a fork) and serves with its own reloading
SSLContext, so certificate renewals reach every worker.
"""

from __future__ import annotations

import gc
import importlib
import logging
import os
import signal
import socket
import ssl
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from webhook.server.listener import ServeError, connection_limits, listening_sockets, uvicorn_server
from webhook.server.own_certificate import record_expiry, self_signed_pair, trust_notice

# The app, the engines and the certificate tools are imported by the functions that use them: the parent of
# several workers re-executes itself before it binds (multiproc_metrics.py), and a busy port is told before
# any of them loads.
if TYPE_CHECKING:
    from fastapi import FastAPI

    from certs.reloader import ReloadingSSLContext
    from webhook.assembly import Assembly
    from webhook.config import Config
    from webhook.controllers.runner import Controllers
    from webhook.gangs.ledger import GangStore
    from webhook.runtime import Runtime
    from webhook.vap.sync import AdmissionPolicySync

log = logging.getLogger(__name__)

# A worker that dies this soon after starting will die again: stop instead of restarting it forever.
CRASH_LOOP_SECONDS = 5.0


@dataclass
class ServeOptions:
    config: Config
    config_file: Path | None = None
    cluster_dir: Path | None = None
    host: str = "0.0.0.0"
    port: int = 8443
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    ui: bool = True
    workers: int = 1
    cert_poll_seconds: float = 10.0
    config_poll_seconds: float = 2.0
    cluster_poll_seconds: float = 2.0
    log_level: str = "info"
    extra_dns_names: list[str] = field(default_factory=list)


def assemble_runtime(options: ServeOptions) -> Assembly:
    """The runtime fed by its cluster source: a watched YAML directory, or the API (webhook/assembly.py)."""
    from webhook import assembly

    if options.cluster_dir is not None:
        return assembly.from_directory(options.config, options.cluster_dir, watch=True,
                                       poll_seconds=options.cluster_poll_seconds)
    from webhook.cluster.kube_json import load_kube_client

    return assembly.from_api(options.config, load_kube_client(None), serving=True)


def run_worker(
    options: ServeOptions, cert_file: Path, key_file: Path, sockets: list[socket.socket] | None = None
) -> None:
    """One worker: runtime, controllers, background audit and policy sync, reloading TLS context, the app and
    uvicorn; until told to stop.

    Everything is built on the thread that serves: native policy engines are bound to their thread.
    """
    from webhook.cluster.collector_pause import collector_paused
    from webhook.server.heap import bound_arenas
    bound_arenas()  # before the worker's threads start: each would get a malloc arena of its own (heap.py)
    # What start-up imports and builds survives it: the collector's 200-odd passes over it while it grows (0.1-0.15
    # CPU-s) found nothing to free, so it waits for settle_heap's one full collection (docs/performance.md).
    with collector_paused():
        app, tls, assembly, controllers = _build_worker(options, cert_file, key_file)
        settle_heap()
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    try:
        uvicorn_server(
            app, options.host, options.port, tls, options.log_level, limits=connection_limits(options.config)
        ).run(sockets=sockets)
    finally:
        controllers.stop()  # every task of the supervisor (stopped already with the server, unless it never ran)
        assembly.stop_source()


def _build_worker(
    options: ServeOptions, cert_file: Path, key_file: Path
) -> tuple[FastAPI, ReloadingSSLContext, Assembly, Controllers]:
    """What run_worker serves: the app, its TLS context, the runtime's assembly and the controllers."""
    from certs.reloader import ReloadingSSLContext
    from webhook.audit.auditor import Auditor
    from webhook.audit.pods import ApiPodReader
    from webhook.audit.writers import KubeReportWriter, MemoryReportWriter, ReportWriter
    from webhook.controllers.runner import build_controllers
    from webhook.policy_sync import PolicySync
    from webhook.server.api_routes import api_router, server_inventory
    from webhook.server.app import BackgroundTask, create_app
    from webhook.server.callers import CallerAuthenticator
    from webhook.server.config_watch import ConfigWatcher
    from webhook.server.explain_routes import explain_router
    from webhook.server.gang_routes import gangs_router
    from webhook.server.mig_routes import mig_router
    from webhook.server.read_auth import ReadAuth
    from webhook.server.status_sync import ProfileStatusSync, custom_status_patcher, gpu_policy_condition_writer
    from webhook.server.usage_routes import usage_router
    from webhook.server.worker_logs import worker_started
    from webhook.server.workloads_routes import workloads_router
    from webhook.usage.refresher import UsageRefresher
    from webhook.usage.service import UsageService

    client_ca_file = options.config.authentication.client_ca_file
    try:
        tls = ReloadingSSLContext(
            cert_file, key_file, options.cert_poll_seconds, on_load=record_expiry, client_ca_file=client_ca_file
        )
    except (OSError, ValueError, ssl.SSLError) as exc:
        # Only the client CA is read eagerly like this; a bad serving pair shows as `not tls.loaded`.
        raise ServeError(f"cannot load the client CA {client_ca_file} (authentication.clientCAFile): {exc}") from exc
    if not tls.loaded:
        raise ServeError(f"cannot load the serving certificate {cert_file}: {tls.last_error}")
    assembly = assemble_runtime(options)
    runtime = assembly.runtime
    # Gang records live in the API only (the GangLedger), written by the leader's gang controller; a cluster
    # directory keeps none (its gang view plans them from its pods).
    gang_store = gang_ledger(assembly.api_client) if assembly.api_client is not None else None
    # The read API's inventory, kept warm while the app serves; the profiles' statuses are read from it.
    inventory = server_inventory(runtime)
    # Every worker runs the controllers; the Lease lets one of them act at a time. Their first passes, each over
    # every pod, wait for the inventory's light pass (the nodes' view /readyz waits for; itself bounded after the
    # model loaded): beside it they took 16 of its 17 s of wall time at 10,000 nodes (issue 36).
    controllers = build_controllers(
        runtime.store, options.config, assembly.api_client, gang_store=gang_store, budgets=runtime.budgets.states,
        rates=runtime.budgets.service.rates,
        first_passes_after=lambda: runtime.store.loaded and not inventory.first_views_pending())
    for task in assembly.source_tasks:  # running already; supervised so that they are reported and stopped too
        controllers.supervisor.add(task)

    def follow_config(config: Config) -> None:
        controllers.follow_config(config)
        if config.authentication != options.config.authentication or config.server != options.config.server:
            # Both are fixed when the listener and its TLS context are built.
            log.warning("configuration sections authentication and server changed: they take effect at the next "
                        "restart; serving with the ones read at start")

    runtime.on_config_change.append(follow_config)
    writer: ReportWriter
    if assembly.api_client is not None:
        from kubernetes import client as k8s

        writer = KubeReportWriter(k8s.CustomObjectsApi(assembly.api_client))
    else:
        writer = MemoryReportWriter()
    api_client = assembly.api_client
    # Existing pods against the policies, PolicyReports. The model keeps pods slimmed, so in a cluster the auditor
    # reads each pod whole (securityContext, env) before judging it. Its first pass waits as the controllers' do.
    auditor = Auditor(runtime, writer, is_leader=controllers.acting,
                      read_pod=ApiPodReader(api_client) if api_client is not None else None)
    controllers.first.after(auditor.task.wake)
    background: list[BackgroundTask] = [
        tls,
        # GPUPolicy objects and policy directories, recompiled on change; in a cluster, Ready conditions.
        PolicySync(runtime, write_status=gpu_policy_condition_writer(api_client) if api_client else None).task,
        auditor.task,
    ]
    if api_client is not None and options.config.policies.generate_admission_policies:
        background.append(admission_policy_sync(runtime, api_client, controllers.elector.is_leader).task)
    if api_client is not None:
        status_sync = ProfileStatusSync(  # HardwareProfile.status.available, from the full inventory
            runtime, custom_status_patcher(api_client, "hardwareprofiles"), controllers.acting, cache=inventory)
        controllers.first.after(status_sync.task.wake)
        background.append(status_sync.task)
    # What GPUs do, for admission, policies and the node view: refreshed from Prometheus off the request path
    # by every worker (it only reads), and the same reads answer /api/v1/recommendations (docs/usage.md).
    usage_service = UsageService(lambda: runtime.config, runtime.store.snapshot)
    runtime.usage = UsageRefresher(usage_service, lambda: runtime.config, runtime.store.snapshot)
    background.append(runtime.usage.task())
    if options.config_file is not None:
        background.append(ConfigWatcher(options.config_file, runtime.set_config, options.config_poll_seconds).task)
    # Who may call the admission endpoints is fixed for the process's life, like the TLS context's client CA.
    callers = CallerAuthenticator(options.config.authentication)
    # In a cluster, reading the API and /metrics takes a Kubernetes identity (SPEC 13); outside, nobody to ask.
    read_auth = ReadAuth.for_cluster(api_client) if api_client is not None else None
    app = create_app(
        runtime, ui=options.ui, extra_routers=[
            api_router(runtime, inventory, keep_warm=True), gangs_router(runtime, gang_store), explain_router(runtime),
            workloads_router(runtime), usage_router(runtime, usage_service), mig_router(runtime),
        ],
        certificate=tls,
        # One supervisor for every background task of this worker, started and stopped with the server.
        background=background, authenticator=callers, supervisor=controllers.supervisor, read_auth=read_auth,
        unready=lambda: [*(controllers.readiness.problems() if controllers.readiness is not None else ()),
                         *inventory.unready()],
    )
    if api_client is not None:  # Events on pods about KGWE's decisions (why), off the request path
        from webhook.gangs.controller import kube_pod_writer
        from webhook.server.pod_events import DecisionEvents

        runtime.decision_events = DecisionEvents(kube_pod_writer(api_client).event)
        controllers.supervisor.add(runtime.decision_events.task)
    worker_started()
    return app, tls, assembly, controllers


def gang_ledger(api_client: Any) -> GangStore:
    """The store of gang records: the GangLedger object `kgwe-gangs` (webhook/gangs/ledger.py)."""
    from webhook.cluster.kube_json import KubeJson
    from webhook.gangs.ledger import KubeGangStore

    return KubeGangStore(KubeJson(api_client))


def admission_policy_sync(runtime: Runtime, api_client: Any, is_leader: Callable[[], bool]) -> AdmissionPolicySync:
    """CEL GPUPolicies as the API server's ValidatingAdmissionPolicies (docs/policies.md), never for the
    namespaces KGWE never judges, nor for a policy that does not compile now."""
    from webhook.cluster.kube_json import KubeJson
    from webhook.controllers.leader import pod_namespace
    from webhook.vap.sync import AdmissionPolicySync

    def refused() -> set[str]:
        statuses = runtime.policies.status() if runtime.policies is not None else []
        return {s.source.removeprefix("GPUPolicy/") for s in statuses if s.error and s.source.startswith("GPUPolicy/")}

    excluded = [*runtime.config.excluded_namespaces, pod_namespace()]
    return AdmissionPolicySync(runtime.store, KubeJson(api_client), excluded_namespaces=excluded, refused=refused,
                               is_leader=is_leader)


# Young-generation collections every this many container allocations (CPython's default is 700): one
# admission allocates a few thousand short-lived dicts and lists, which die young either way.
GC_YOUNG_THRESHOLD = 10_000


# How long a thread that holds the GIL keeps it while another waits (CPython's default is 5 ms). The event
# loop gives the GIL up at every socket read and write, and each time takes it back only after a background
# thread (a watch decoding a list, the inventory's or the quota controller's pass) has had its interval. At
# 3,000 nodes, the same tree one run after the other (bench/bench_scale.py): p99 /mutate 49 -> 19 ms,
# /validate 42 -> 20 ms, create -> stored 91 -> 31 ms; at 10 nodes 16 -> 13, 21 -> 12 and 37 -> 27 ms.
SWITCH_INTERVAL_SECONDS = 0.0005


def settle_heap() -> None:
    """Before serving: what startup built (modules, the cluster model, compiled policies) leaves the
    garbage collector's view, so that no collection during a request walks it again.

    A full collection walks every tracked object: with a large cluster model that is milliseconds, taken
    from whichever request triggered it (the p99). `gc.freeze` after one collection moves the survivors to
    a generation that is never collected; what is built later (a rebuilt snapshot) is collected as usual.
    """
    gc.collect()
    gc.freeze()
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


def serve(options: ServeOptions) -> int:
    from webhook.server import multiproc_metrics
    from webhook.server.callers import CallerAuthenticator

    if options.workers > 1:
        multiproc_metrics.ensure_multiprocess_mode()  # may re-execute this process (multiproc_metrics.py)
    sockets = listening_sockets(options.host, options.port, options.workers)
    if options.tls_cert_file is not None and options.tls_key_file is not None:
        cert_file, key_file = options.tls_cert_file, options.tls_key_file
    else:
        cert_file, key_file, ca_file = self_signed_pair(options.host, options.extra_dns_names)
        print(trust_notice(ca_file, options.host, options.port), flush=True)
    # Once, by the process the operator started, before any worker answers a request.
    CallerAuthenticator(options.config.authentication).announce()
    if options.workers <= 1:
        try:
            run_worker(options, cert_file, key_file, sockets)
        finally:
            for sock in sockets:
                sock.close()
        return 0
    return _serve_workers(options, cert_file, key_file, sockets)


# The heaviest of run_worker's imports (the app, the engines, the controllers).
WORKER_MODULES = ("webhook.assembly", "webhook.server.app", "webhook.server.api_routes", "webhook.controllers.runner",
                  "webhook.audit.auditor", "webhook.usage.service", "certs.reloader")


def _serve_workers(options: ServeOptions, cert_file: Path, key_file: Path, sockets: list[socket.socket]) -> int:
    from webhook.server import multiproc_metrics
    from webhook.server.worker_logs import quiet_secondary_worker

    # What every worker imports, imported once before the forks: the workers share it, not import it each.
    for module in WORKER_MODULES:
        importlib.import_module(module)
    children: dict[int, tuple[int, float]] = {}
    stopping = False
    failed = False

    def start(index: int) -> None:
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                level = quiet_secondary_worker(index, options.log_level)  # each line once, not once per worker
                run_worker(replace(options, log_level=level), cert_file, key_file, [sockets[index % len(sockets)]])
            except BaseException:
                log.exception("worker %d failed", index)
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        children[pid] = (index, time.monotonic())

    def stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for pid in children:
            os.kill(pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for index in range(options.workers):
        start(index)
    log.info("serving on %s:%d with %d workers", options.host, options.port, options.workers)
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        index, started = children.pop(pid, (-1, 0.0))
        multiproc_metrics.worker_exited(pid)
        if stopping or index < 0:
            continue
        if time.monotonic() - started < CRASH_LOOP_SECONDS:
            log.error("worker %d (pid %d) failed right after starting (status %d); stopping", index, pid, status)
            stop(signal.SIGTERM, None)
            failed = True
            continue
        log.warning("worker %d (pid %d) exited with status %d; starting a new one", index, pid, status)
        start(index)
    for sock in sockets:
        sock.close()
    multiproc_metrics.cleanup()
    return 1 if failed else 0
