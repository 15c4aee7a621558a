"""What README.md and docs/ show a command printing against the example cluster is what it prints (issue 35).

A sample is a fenced block without a language whose lines start with `$ kgwe ` (or `$ .venv/bin/kgwe `): each
such command, up to the next `$ ` line or the block's end, is followed by what it prints. Checked are the
commands that read an example directory (`--cluster examples/...`) and show output; a command alone (a list of
invocations) or against the reader's own cluster is left out. In the output, a line `...` stands for the rest
(everything from there on is left out); a trailing `| head -N` or `| tail -N` on the command is applied, as
the shell would. Commands run in-process from the repository root, as tests/firsthour/test_documented_commands.py
runs those of the sh blocks.
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
COMMAND = re.compile(r"^\$ (?:\.venv/bin/)?kgwe (.*)$")
PIPE = re.compile(r"\s*\|\s*(head|tail) -(\d+)\s*$")


@dataclass(frozen=True)
class Sample:
    doc: str
    line: int
    command: str  # the arguments after `kgwe`, a pipe to head or tail included
    output: tuple[str, ...]


def _plain_blocks(text: str) -> list[tuple[int, list[str]]]:
    """(line number of the block's first line, its lines) for each fenced block without a language."""
    blocks: list[tuple[int, list[str]]] = []
    fence: tuple[str, int, list[str]] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if fence is None:
            if line.startswith("```"):
                fence = (line[3:].strip(), number + 1, [])
        elif line.strip() == "```":
            if not fence[0]:
                blocks.append((fence[1], fence[2]))
            fence = None
        else:
            fence[2].append(line)
    return blocks


def documented_samples() -> list[Sample]:
    found: list[Sample] = []
    for doc in DOCS:
        for first, lines in _plain_blocks(doc.read_text(encoding="utf-8")):
            starts = [i for i, line in enumerate(lines) if line.startswith("$ ")]
            for at, end in zip(starts, [*starts[1:], len(lines)][: len(starts)], strict=True):
                matched = COMMAND.match(lines[at])
                output = tuple(lines[at + 1:end])
                if matched and output and "--cluster examples/" in matched.group(1):
                    found.append(Sample(str(doc.relative_to(ROOT)), first + at, matched.group(1), output))
    return found


SAMPLES = documented_samples()


def test_the_docs_show_outputs_of_the_example_cluster() -> None:
    assert {s.doc for s in SAMPLES} >= {"docs/explain.md", "docs/costs.md"}


@pytest.mark.parametrize("sample", SAMPLES, ids=[f"{s.doc}:{s.line}" for s in SAMPLES])
def test_a_documented_output_is_what_the_command_prints(sample: Sample, monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    command, lines = sample.command, None
    piped = PIPE.search(command)
    if piped:
        command, lines = command[: piped.start()], (piped.group(1), int(piped.group(2)))
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("KGWE_STATE_DIR", str(tmp_path / "state"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(shlex.split(command)) == 0, sample
    printed = [line.rstrip() for line in out.getvalue().rstrip("\n").splitlines()]
    if lines is not None:
        printed = printed[: lines[1]] if lines[0] == "head" else printed[-lines[1]:]
    shown = [line.rstrip() for line in sample.output]
    if "..." in shown:
        shown = shown[: shown.index("...")]
        printed = printed[: len(shown)]
    assert printed == shown, f"{sample.doc}:{sample.line}: kgwe {sample.command}"
