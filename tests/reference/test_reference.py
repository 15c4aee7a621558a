"""docs/reference.md is exactly what the code says today."""

from __future__ import annotations

from webhook import reference


def test_committed_reference_matches_the_code() -> None:
    committed = reference.PAGE.read_text(encoding="utf-8")
    assert committed == reference.render(), "docs/reference.md is stale: run python -m webhook.reference --write"


def test_reference_names_what_a_user_looks_up() -> None:
    page = reference.render()
    for needle in ("`kgwe.io/accelerator`", "`kgwe.io/decision`", "`kgwe.io/gang`", "`nvidia-h100-80gb`",
                   "`quotas.overQuota` |", "`limits.onError`", "`gpuTaintKeys`"):
        assert needle in page
    assert "kgwe.io/v1alpha1" not in page and "kgwe.io/quantity" not in page


def test_check_mode_reports_a_stale_page(tmp_path, monkeypatch) -> None:
    stale = tmp_path / "reference.md"
    stale.write_text("old\n", encoding="utf-8")
    monkeypatch.setattr(reference, "PAGE", stale)
    monkeypatch.setattr(reference, "ROOT", tmp_path)
    assert reference.main(["--check"]) == 1
    assert reference.main(["--write"]) == 0
    assert reference.main(["--check"]) == 0
