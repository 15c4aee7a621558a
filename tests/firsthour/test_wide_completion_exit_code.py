"""Issue 35, the rest of item 8: `-o wide` on every table command (the table with more columns), `kgwe completion
bash|zsh` generated from the parsers, and one `--exit-code` for review, explain and audit."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from cluster_dirs import EXAMPLE_CLUSTER, EXAMPLE_CONFIG, ROOT, copy_example_cluster, edit_manifests

from webhook.cli import main
from webhook.reports.commands import run

OFFLINE = ["--cluster", str(EXAMPLE_CLUSTER), "--config", str(EXAMPLE_CONFIG)]
ALLOWED = ROOT / "examples" / "pods" / "01-single-type.yaml"
REFUSED = ROOT / "examples" / "pods" / "20-refused-missing-type.yaml"


@pytest.fixture(autouse=True)
def _state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGWE_STATE_DIR", str(tmp_path / "state"))


def _header(text: str) -> list[str]:
    return text.splitlines()[0].split()


@pytest.mark.parametrize(("command", "more"), [
    ("nodes", ["PRODUCT", "MEMORY/GPU", "CLIQUE", "TAINTS"]),
    ("profiles", ["UNIT", "DESCRIPTION"]),
    ("audit", ["RULE", "TENANT"]),
    ("costs", ["UNPRICED"]),
])
def test_wide_is_the_table_with_more_columns(capsys: pytest.CaptureFixture[str], command: str,
                                             more: list[str]) -> None:
    assert run(command, OFFLINE) == 0
    table = _header(capsys.readouterr().out)
    assert run(command, [*OFFLINE, "-o", "wide"]) == 0
    wide = _header(capsys.readouterr().out)
    assert wide[: len(table) - 1] == table[: len(table) - 1]  # the same columns first (audit keeps MESSAGE last)
    assert set(more) <= set(wide) and not set(more) & set(table)


def test_gangs_and_recommend_accept_wide(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("gangs", [*OFFLINE, "-o", "wide"]) == 0
    assert main(["recommend", "--help"]) == 0  # recommend needs Prometheus: its help lists the choice
    assert "wide" in capsys.readouterr().out


def _completions(script: str, *words: str) -> list[str]:
    shell = (f'{script}\nCOMP_WORDS=({" ".join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}; '
             '_kgwe; printf "%s\\n" "${COMPREPLY[@]}"')
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=30, cwd=ROOT, check=True)
    return done.stdout.split()


def test_bash_completion_completes_commands_flags_and_choices(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "bash"]) == 0
    script = capsys.readouterr().out
    assert {"review", "recommend"} <= set(_completions(script, "kgwe", "re"))
    assert _completions(script, "kgwe", "nodes", "-o", "") == ["table", "wide", "json", "yaml"]
    assert set(_completions(script, "kgwe", "explain", "--ex")) == {"--exit-code"}
    assert "patch-ca-bundle" in _completions(script, "kgwe", "certs", "")
    assert _completions(script, "kgwe", "--log-level", "debug", "compl") == ["completion"]
    assert _completions(script, "kgwe", "completion", "") == ["bash", "zsh"]
    assert "examples/pods/01-single-type.yaml" in _completions(script, "kgwe", "review", "examples/pods/01-s")


def test_zsh_completion_is_generated_and_parses(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["completion", "zsh"]) == 0
    script = capsys.readouterr().out
    assert script.startswith("#compdef kgwe") and "compdef _kgwe kgwe" in script
    assert "'explain:why KGWE places" in script and "--exit-code" in script
    zsh = shutil.which("zsh")
    if zsh is None:
        pytest.skip("zsh is not installed: the script's syntax is not checked")
    (tmp_path / "_kgwe").write_text(script)
    subprocess.run([zsh, "-n", str(tmp_path / "_kgwe")], check=True, timeout=30)


def test_exit_code_means_the_same_for_review_explain_and_audit(capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:
    for command in (["review"], ["explain"]):
        assert main([*command, str(ALLOWED), *OFFLINE, "--exit-code"]) == 0
        assert main([*command, str(REFUSED), *OFFLINE, "--exit-code"]) == 1
        assert main([*command, str(REFUSED), *OFFLINE]) == 0  # without it a refusal is an answer
    # The example cluster has one failing finding, the workload it shows refused (chat-h200 asks for H200s).
    assert run("audit", [*OFFLINE, "--exit-code"]) == 1
    assert run("audit", OFFLINE) == 0
    # Without that workload its findings are warnings: nothing fails, so 0 with the flag too.
    cluster = copy_example_cluster(tmp_path / "cluster")
    edit_manifests(cluster / "workloads.yaml",
                   lambda docs: docs.remove(next(d for d in docs if d["metadata"]["name"] == "chat-h200")))
    assert run("audit", ["--cluster", str(cluster), "--config", str(EXAMPLE_CONFIG), "--exit-code"]) == 0
    from webhook.cli import build_parser
    from webhook.explain_cli import EXIT_CODE_HELP

    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for command in ("review", "explain"):
        flag = next(a for a in commands[command]._actions if "--exit-code" in a.option_strings)
        assert flag.help == EXIT_CODE_HELP
