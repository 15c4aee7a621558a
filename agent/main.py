"""`kgwe agent`: the node agent's command line."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import threading
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from agent.defaults import METRICS_PORT as DEFAULT_PORT
from agent.defaults import POD_RESOURCES_SOCKET as DEFAULT_SOCKET

# NVML, gRPC, the topology document and the API client are imported when the agent runs: `kgwe agent --help`
# reads the parser alone (docs/performance.md, "The command line's start-up").
if TYPE_CHECKING:
    from agent.usage_metrics import UsageCollector

NO_NVML_MESSAGE = "kgwe agent: NVML is not available on this node ({reason}): no NVIDIA GPUs to report, exiting."


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number (0 turns /metrics off), not {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kgwe agent",
        description="Discover this node's GPUs through NVML and publish the kgwe.io topology labels and annotation; "
        "serve what the GPUs do on /metrics, as NVIDIA's DCGM exporter names it.",
    )
    parser.add_argument(
        "--node-name", default=os.environ.get("NODE_NAME", ""),
        help="the Node to publish on (default: $NODE_NAME, set from the downward API)",
    )
    parser.add_argument("--interval", type=_seconds, default=60.0, help="seconds between scans (default 60)")
    parser.add_argument(
        "--heartbeat-interval", type=_seconds, default=120.0,
        help="seconds between heartbeat writes when nothing changed; keep well under the webhook's "
        "topologyStalenessSeconds (default 120)",
    )
    parser.add_argument("--once", action="store_true", help="scan and publish once, then exit")
    parser.add_argument("--dry-run", action="store_true", help="print the topology document; write nothing")
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster, then ~/.kube)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    usage = parser.add_argument_group(
        "usage metrics", "GPU usage on the agent's own /metrics, named as NVIDIA's DCGM exporter names it "
        "(docs/usage.md): for clusters where no DCGM exporter runs")
    usage.add_argument("--metrics-port", type=_port, default=DEFAULT_PORT,
                       help=f"port of /metrics (default {DEFAULT_PORT}, the DCGM exporter's; 0: no /metrics)")
    usage.add_argument("--metrics-address", default="0.0.0.0",
                       help="address /metrics listens on (default 0.0.0.0; :: for IPv6)")
    usage.add_argument("--pod-resources-socket", default=DEFAULT_SOCKET,
                       help=f"the kubelet's PodResources socket, to label GPUs with the pods holding them "
                       f"(default {DEFAULT_SOCKET}; empty: no pod labels)")
    usage.add_argument("--pod-resources-timeout", type=_seconds, default=5.0,
                       help="seconds one PodResources call may take (default 5)")
    usage.add_argument("--utilisation-window", type=_seconds, default=30.0,
                       help="seconds a process's newest SM utilisation sample counts as current (default 30)")
    usage.add_argument("--print-metrics", action="store_true",
                       help="print the usage metrics once (text exposition format) and exit; writes nothing")
    return parser


def _core_v1(kubeconfig: str | None) -> Any:
    from kubernetes import client, config

    # An own ApiClient rather than the library's process-wide default configuration.
    if kubeconfig:
        return client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
    try:
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return client.CoreV1Api(client.ApiClient(configuration))
    except config.ConfigException:
        return client.CoreV1Api(config.new_client_from_config())


def _dry_run(node_name: str) -> int:
    from agent.document import build_document
    from agent.loop import utc_now
    from agent.nvml_discovery import scan

    doc = build_document(scan(), node_name=node_name, now=utc_now())
    print(json.dumps(doc.model_dump(mode="json", by_alias=True, exclude_none=True), indent=2))
    return 0


def _collector(args: argparse.Namespace, stack: ExitStack, api_client: Any | None) -> UsageCollector:
    from agent.dra_devices import DraDevices, slices_from_api
    from agent.podresources import PodResourcesClient
    from agent.usage_metrics import UsageCollector
    from agent.usage_nvml import UsageReader

    reader = UsageReader(window=args.utilisation_window)
    reader.open()
    stack.callback(reader.close)
    pods = None
    if args.pod_resources_socket:
        pods = PodResourcesClient(args.pod_resources_socket, timeout=args.pod_resources_timeout)
        stack.callback(pods.close)
    dra = DraDevices(slices_from_api(api_client, args.node_name)) if api_client is not None else None
    return UsageCollector(reader, pods, dra, hostname=args.node_name or socket.gethostname())


def _print_metrics(args: argparse.Namespace) -> int:
    from prometheus_client import generate_latest

    from agent.usage_metrics import registry_for

    with ExitStack() as stack:
        collector = _collector(args, stack, None)
        sys.stdout.write(generate_latest(registry_for(collector)).decode())
    return 0


def _serve(args: argparse.Namespace, stop: threading.Event | None = None) -> int:
    """Publish (and serve /metrics) until `stop` is set, or SIGTERM/SIGINT when run in the main thread."""
    from agent.loop import run_loop
    from agent.nvml_discovery import scan
    from agent.publisher import NodePublisher
    from agent.usage_metrics import MetricsServer

    if not args.node_name:
        print("kgwe agent: no node name: pass --node-name or set NODE_NAME (downward API spec.nodeName)",
              file=sys.stderr)
        return 2
    # Fail before touching the API when the node has no GPUs at all.
    scan()
    core_v1 = _core_v1(args.kubeconfig)
    publisher = NodePublisher(core_v1, args.node_name, args.heartbeat_interval)
    stop = stop or threading.Event()
    if not args.once and threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
    with ExitStack() as stack:
        if args.metrics_port and not args.once:
            collector = _collector(args, stack, getattr(core_v1, "api_client", None))
            try:
                server = MetricsServer(collector, args.metrics_port, args.metrics_address)
            except OSError as err:
                print(f"kgwe agent: cannot serve /metrics on {args.metrics_address}:{args.metrics_port}: {err}",
                      file=sys.stderr)
                return 1
            stack.callback(server.close)
            logging.getLogger("kgwe.agent").info(
                "usage metrics on http://%s:%d/metrics", args.metrics_address, server.port)
        return run_loop(publisher, scan, interval=args.interval, stop=stop, once=args.once)


def run(argv: list[str], stop: threading.Event | None = None) -> int:
    """`kgwe agent ARGV`; a long-running agent ends when `stop` is set (tests), or on SIGTERM/SIGINT."""
    args = build_parser().parse_args(argv)  # `--help` ends here, before NVML is imported
    import pynvml

    from agent.nvml_discovery import NvmlUnavailable

    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.print_metrics:
            return _print_metrics(args)
        return _dry_run(args.node_name) if args.dry_run else _serve(args, stop)
    except NvmlUnavailable as err:
        print(NO_NVML_MESSAGE.format(reason=err), file=sys.stderr)
        return 0
    except pynvml.NVMLError as err:
        print(f"kgwe agent: NVML failed: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
