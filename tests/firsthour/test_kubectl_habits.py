"""kubectl habits on the command line: `-` reads standard input, `-o yaml` wherever `-o json` is, `--exit-code`
on `kgwe review` (1 when refused, as `git diff --exit-code`), and help that says which flags are required."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from cluster_dirs import EXAMPLE_CLUSTER, EXAMPLE_CONFIG, ROOT

from webhook.cli import build_parser, main
from webhook.reports.commands import run

OFFLINE = ["--cluster", str(EXAMPLE_CLUSTER), "--config", str(EXAMPLE_CONFIG)]
ALLOWED = ROOT / "examples" / "pods" / "01-single-type.yaml"
REFUSED = ROOT / "examples" / "pods" / "20-refused-missing-type.yaml"


def _review(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    status = main(["review", *argv, *OFFLINE])
    return status, capsys.readouterr().out


def test_review_reads_the_pod_from_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    status, from_file = _review(capsys, str(REFUSED), "-o", "json")
    monkeypatch.setattr("sys.stdin", io.StringIO(REFUSED.read_text()))
    status_stdin, from_stdin = _review(capsys, "-", "-o", "json")
    assert status == status_stdin == 0
    file_answer, stdin_answer = json.loads(from_file), json.loads(from_stdin)
    assert stdin_answer["allowed"] is False
    assert stdin_answer["message"] == file_answer["message"]


def test_review_exit_code_says_whether_it_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert _review(capsys, str(ALLOWED), "--exit-code")[0] == 0
    assert _review(capsys, str(REFUSED), "--exit-code")[0] == 1
    assert _review(capsys, str(REFUSED))[0] == 0  # without it a refusal is an answer, not a failure
    assert _review(capsys, str(REFUSED), "--exit-code", "--explain")[0] == 1


def test_review_and_explain_speak_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    _status, as_json = _review(capsys, str(REFUSED), "-o", "json")
    _status, as_yaml = _review(capsys, str(REFUSED), "-o", "yaml")
    assert yaml.safe_load(as_yaml) == json.loads(as_json)
    assert main(["explain", str(REFUSED), *OFFLINE, "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["refusals"]


@pytest.mark.parametrize("command", ["nodes", "profiles", "costs", "gangs"])
def test_every_report_speaks_yaml(capsys: pytest.CaptureFixture[str], command: str, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGWE_STATE_DIR", str(tmp_path))
    assert run(command, [*OFFLINE, "-o", "json"]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert run(command, [*OFFLINE, "-o", "yaml"]) == 0
    as_yaml = yaml.safe_load(capsys.readouterr().out)
    as_json.pop("generatedAt", None), as_yaml.pop("generatedAt", None)
    assert as_yaml == as_json


def test_cluster_help_does_not_call_a_required_flag_optional() -> None:
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    review_cluster = next(a for a in commands["review"]._actions if "--cluster" in a.option_strings)
    assert review_cluster.required and "required" in review_cluster.help
    assert "default" not in review_cluster.help and "without it" not in review_cluster.help
    explain_cluster = next(a for a in commands["explain"]._actions if "--cluster" in a.option_strings)
    assert not explain_cluster.required and "without it" in explain_cluster.help


def test_a_reader_that_stops_reading_gets_no_traceback() -> None:
    import os
    import subprocess
    import sys

    # Many documents: more output than a pipe holds (150 answers of 936 bytes, twice a 64 KiB pipe), so the writer
    # meets the closed pipe.
    shell = (f"for i in $(seq 150); do cat {REFUSED}; echo ---; done | "
             f"{sys.executable} -c 'import sys; from webhook.cli import main; sys.exit(main(sys.argv[1:]))' "
             f"review - --cluster {EXAMPLE_CLUSTER} -o yaml | head -1")
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.stdout.strip() == "- allowed: false"
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
