"""The agent's cycle (scan, read the node, build the document, publish) and the loop that repeats it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pynvml
import urllib3
from kubernetes.client.exceptions import OpenApiException

from agent.document import build_document
from agent.nvml_discovery import NodeScan
from agent.publisher import NodePublisher
from policies.vocabulary.backoff import Backoff

log = logging.getLogger("kgwe.agent")

# Failures worth retrying: the API server (HTTP errors, connection trouble) and NVML as a whole (per-GPU
# failures never get here, they are reported in the document).
RETRYABLE: tuple[type[BaseException], ...] = (OpenApiException, urllib3.exceptions.HTTPError, OSError, pynvml.NVMLError)


def utc_now() -> datetime:
    return datetime.now(UTC)


def run_cycle(
    publisher: NodePublisher, scanner: Callable[[], NodeScan], clock: Callable[[], datetime] = utc_now
) -> dict[str, Any] | None:
    """One pass; returns the patch sent, or None when the node was already up to date."""
    scan = scanner()
    current = publisher.read()
    now = clock()
    doc = build_document(scan, node_name=publisher.node_name, now=now, node_labels=current.labels)
    return publisher.publish(doc, current, now)


def run_loop(
    publisher: NodePublisher,
    scanner: Callable[[], NodeScan],
    *,
    interval: float,
    stop: threading.Event,
    backoff: Backoff | None = None,
    once: bool = False,
    clock: Callable[[], datetime] = utc_now,
) -> int:
    """Repeat the cycle every `interval` seconds until `stop` is set; after a failure wait the backoff instead.

    NvmlUnavailable is not caught: NVML vanishing (driver unloaded) ends the agent like NVML never being there.
    Returns the exit status: 0, or 1 when `once` and the single cycle failed.
    """
    retry = backoff or Backoff()
    while not stop.is_set():
        try:
            patch = run_cycle(publisher, scanner, clock)
        except RETRYABLE as err:
            delay = retry.next_delay()
            log.warning("publishing the topology of %s failed (%s); retry in %.1fs", publisher.node_name, err, delay)
            if once:
                return 1
        else:
            retry.reset()
            delay = interval
            if patch is None:
                log.debug("node %s up to date", publisher.node_name)
            else:
                changed = sorted({*patch["metadata"].get("labels", {}), *patch["metadata"]["annotations"]})
                log.info("patched node %s: %s", publisher.node_name, ", ".join(changed))
        if once:
            return 0
        stop.wait(delay)
    return 0
