"""Every command in README.md and docs/*.md runs as written (issue 35), so the docs cannot drift again.

Each ```sh block is read; a command (continuation lines joined) that starts with `kgwe `, `.venv/bin/kgwe `,
`curl ` or `python3 dev.py` is collected. `kgwe` commands run in-process through `webhook.cli.main` from the
repository root, against the example cluster the docs name, and must exit 0, or the status the doc says
(`# exits N` at the end of its line). Skipped, each for a reason the test reports:

- `python3 dev.py ...`: it installs a virtual environment and serves (tests/firsthour/test_dev_setup.py);
- `curl ...`: it asks a running server (tests/firsthour/test_serve_first_run.py starts one);
- the marker `needs: cluster`, `needs: prometheus` or `needs: your-files` in a comment at the end of the
  line: the command reads a cluster's API (no `--cluster DIR`), a Prometheus that is not here, or the
  reader's own files. A command of a cluster-reading kind
  without `--cluster`, or with `--prometheus`, that carries no marker fails: mark it, so the reader knows too;
- `kgwe serve` and `kgwe agent`, which run until stopped.
Placeholders (`...`, `app.yaml`) and shell syntax beyond `< FILE` and a trailing `| ...` are not run; a
command with them must carry a marker (`# needs: your-files`) or be rewritten to run.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from cluster_dirs import ROOT

from webhook.cli import main

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = re.compile(r"^(kgwe |\.venv/bin/kgwe |curl |python3 dev\.py)")
MARKER = re.compile(r"#.*\bneeds:\s*([a-z-]+)")
EXITS = re.compile(r"#.*\bexits (\d+)\b")
# Commands that read a cluster: without --cluster DIR they need a cluster's API.
CLUSTER_READERS = {"review", "explain", "nodes", "profiles", "audit", "costs", "gangs", "recommend"}


@dataclass(frozen=True)
class Documented:
    doc: str
    line: int
    text: str  # as written, comments included

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.text}"


def documented_commands() -> list[Documented]:
    found: list[Documented] = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in re.finditer(r"^```sh\n(.*?)^```", text, re.S | re.M):
            first_line = text[: block.start()].count("\n") + 2
            pending, start = "", 0
            for offset, raw in enumerate(block.group(1).splitlines()):
                line = raw.strip()
                start = start if pending else first_line + offset
                pending = f"{pending} {line}" if pending else line
                if pending.endswith("\\"):
                    pending = pending[:-1].rstrip()
                    continue
                if RUNNABLE.match(pending):
                    found.append(Documented(str(doc.relative_to(ROOT)), start, pending))
                pending = ""
    return found


def _skip_reason(command: Documented, argv: list[str]) -> str | None:
    text = command.text
    if text.startswith("python3 dev.py"):
        return "dev.py installs and serves (tests/firsthour/test_dev_setup.py)"
    if text.startswith("curl "):
        return "asks a running server (tests/firsthour/test_serve_first_run.py)"
    marked = MARKER.search(text)
    if marked:
        return f"marked: needs {marked.group(1)}"
    if argv and argv[0] in ("serve", "agent"):
        return f"kgwe {argv[0]} runs until stopped"
    return None


def _argv(command: Documented) -> tuple[list[str], Path | None]:
    """The kgwe arguments and the file given as standard input (`< FILE`); a trailing `| ...` is dropped."""
    words = shlex.split(command.text.split(" | ")[0], comments=True)
    stdin: Path | None = None
    if "<" in words:
        at = words.index("<")
        stdin, words = ROOT / words[at + 1], words[:at] + words[at + 2:]
    return words[1:], stdin


COMMANDS = documented_commands()


def test_the_docs_have_commands_to_run() -> None:
    assert len([c for c in COMMANDS if "kgwe " in c.text]) >= 10


@pytest.mark.parametrize("command", COMMANDS, ids=[f"{c.doc}:{c.line}" for c in COMMANDS])
def test_documented_command_runs_as_written(command: Documented, monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    argv, stdin = _argv(command)
    reason = _skip_reason(command, argv)
    if reason is not None:
        pytest.skip(reason)
    if argv[0] in CLUSTER_READERS:
        assert "--cluster" in argv, f"{command}\nreads a cluster's API: give --cluster DIR or mark it needs: cluster"
        assert "--prometheus" not in argv, f"{command}\nreads Prometheus: mark it `# needs: prometheus`"
    assert "..." not in argv, f"{command}\nhas a placeholder: mark it or write a command that runs"
    # In a scratch directory that sees the repository's examples: a command that writes (`certs --out-dir`)
    # writes there, not into the checkout.
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KGWE_STATE_DIR", str(tmp_path / "state"))
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin.read_text(encoding="utf-8")))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
            status = int(exc.code or 0)
    exits = EXITS.search(command.text)
    expected = int(exits.group(1)) if exits else 0
    assert status == expected, f"{command}\nexit status {status}, documented {expected}\n{err.getvalue()[-2000:]}"
    assert out.getvalue().strip(), f"{command}\nprinted nothing"
