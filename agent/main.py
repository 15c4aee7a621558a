"""`kgwe agent`: the node agent's command line."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from typing import Any

# NVML, the topology document and the API client are imported when the agent runs: `kgwe agent --help` reads
# the parser alone (docs/performance.md, "The command line's start-up").

NO_NVML_MESSAGE = "kgwe agent: NVML is not available on this node ({reason}): no NVIDIA GPUs to report, exiting."


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kgwe agent",
        description="Discover this node's GPUs through NVML and publish the kgwe.io topology labels and annotation.",
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


def _serve(args: argparse.Namespace) -> int:
    from agent.loop import run_loop
    from agent.nvml_discovery import scan
    from agent.publisher import NodePublisher

    if not args.node_name:
        print("kgwe agent: no node name: pass --node-name or set NODE_NAME (downward API spec.nodeName)",
              file=sys.stderr)
        return 2
    # Fail before touching the API when the node has no GPUs at all.
    scan()
    publisher = NodePublisher(_core_v1(args.kubeconfig), args.node_name, args.heartbeat_interval)
    stop = threading.Event()
    if not args.once and threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
    return run_loop(publisher, scan, interval=args.interval, stop=stop, once=args.once)


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)  # `--help` ends here, before NVML is imported
    import pynvml

    from agent.nvml_discovery import NvmlUnavailable

    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return _dry_run(args.node_name) if args.dry_run else _serve(args)
    except NvmlUnavailable as err:
        print(NO_NVML_MESSAGE.format(reason=err), file=sys.stderr)
        return 0
    except pynvml.NVMLError as err:
        print(f"kgwe agent: NVML failed: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
