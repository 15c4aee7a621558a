"""Hot reload of the configuration file: a changed file is parsed and applied; a bad one is logged and ignored."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from policies.kernel.background import Task
from webhook.config import Config, ConfigError, parse_config

log = logging.getLogger(__name__)


class ConfigWatcher:
    """The file polled every `poll_seconds` by its `config-watch` task (`task`, a background task)."""

    def __init__(self, path: str | os.PathLike[str], apply: Callable[[Config], None], poll_seconds: float = 2.0):
        self.path = Path(path)
        self.apply = apply
        self.poll_seconds = poll_seconds
        self._seen = self._fingerprint()
        self.task = Task("config-watch", self.check, interval=poll_seconds)

    def _fingerprint(self) -> tuple[int, int, int] | None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size, stat.st_ino

    def check(self) -> bool:
        """Apply the file if it changed and is valid; True when a new configuration was applied."""
        fingerprint = self._fingerprint()
        if fingerprint is None or fingerprint == self._seen:
            return False
        self._seen = fingerprint
        try:
            config = parse_config(self.path.read_text(encoding="utf-8"), str(self.path))
        except (OSError, ConfigError) as exc:
            log.error("configuration not reloaded, keeping the last good one: %s", exc)
            return False
        try:
            self.apply(config)
        except Exception:
            log.exception("applying the configuration from %s failed, keeping the last good one", self.path)
            return False
        log.info("configuration reloaded from %s (mode %s)", self.path, config.mode)
        return True
