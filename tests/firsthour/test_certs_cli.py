"""`kgwe certs`: the chart's namespace by default, names kept on re-runs, one line without a cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509

from certs.commands import names_in_use, run


def _dns_names(out: Path) -> set[str]:
    leaf = x509.load_pem_x509_certificate((out / "tls.crt").read_bytes())
    return set(leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName))


def test_generate_defaults_to_the_charts_service_and_namespace(tmp_path: Path) -> None:
    assert run(["generate", "--out-dir", str(tmp_path)]) == 0
    assert "kgwe-webhook.kgwe-system.svc" in _dns_names(tmp_path)
    assert names_in_use(tmp_path) == ("kgwe-webhook", "kgwe-system")


def test_rotate_ca_keeps_the_names_of_the_certificate_it_replaces(tmp_path: Path) -> None:
    assert run(["generate", "--out-dir", str(tmp_path), "--service", "hook", "--namespace", "gpu"]) == 0
    before = (tmp_path / "ca.crt").read_bytes()
    assert run(["generate", "--out-dir", str(tmp_path), "--rotate-ca"]) == 0
    assert (tmp_path / "ca.crt").read_bytes() != before  # rotated
    names = _dns_names(tmp_path)
    assert "hook.gpu.svc" in names
    assert not any("kgwe-system" in n or n.endswith(".kgwe.svc") for n in names)


def test_an_explicit_namespace_still_wins(tmp_path: Path) -> None:
    assert run(["generate", "--out-dir", str(tmp_path), "--namespace", "gpu"]) == 0
    assert run(["generate", "--out-dir", str(tmp_path), "--namespace", "other"]) == 0
    assert "kgwe-webhook.other.svc" in _dns_names(tmp_path)


def test_ensure_without_a_cluster_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    code = run(["ensure", "--namespace", "n", "--service", "s", "--secret", "t", "--mutating-config", "m"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "cannot reach a Kubernetes cluster" in err and "--kubeconfig" in err


def test_ensure_with_a_missing_kubeconfig_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.yaml"
    code = run(["ensure", "--namespace", "n", "--service", "s", "--secret", "t", "--mutating-config", "m",
                "--kubeconfig", str(missing)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and str(missing) in err
