"""render_review against the API server's rules for AdmissionReview responses (REFERENCE B 4.3)."""

from __future__ import annotations

import base64
import re

import orjson
import pytest
from effort import tries
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.admission.outcome import Outcome
from webhook.admission.response import (
    AUDIT_KEY_MAX_CHARS,
    WARNING_MAX_CHARS,
    WARNINGS_MAX_TOTAL_CHARS,
    render_review,
    repair_audit_key,
    sanitize_warnings,
)

PATCH = [{"op": "add", "path": "/metadata/labels/a~1b", "value": "x"}]
QUALIFIED_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def test_echoes_uid_api_version_and_kind() -> None:
    review = render_review("uid-1", "admission.k8s.io/v1", Outcome(), mutating=True)
    assert review == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "uid-1", "allowed": True},
    }


def test_mutating_patch_is_base64_json_patch_with_patch_type() -> None:
    response = render_review("u", "admission.k8s.io/v1", Outcome(patch=PATCH), mutating=True)["response"]
    assert response["patchType"] == "JSONPatch"
    assert orjson.loads(base64.b64decode(response["patch"])) == PATCH


def test_validating_endpoint_never_returns_a_patch() -> None:
    response = render_review("u", "admission.k8s.io/v1", Outcome(patch=PATCH), mutating=False)["response"]
    assert "patch" not in response and "patchType" not in response


def test_empty_patch_is_omitted_together_with_patch_type() -> None:
    response = render_review("u", "admission.k8s.io/v1", Outcome(patch=[]), mutating=True)["response"]
    assert "patch" not in response and "patchType" not in response


def test_denial_has_status_with_code_at_least_400_and_no_patch() -> None:
    outcome = Outcome(allowed=False, code=200, message="no H100 left", patch=PATCH)
    response = render_review("u", "admission.k8s.io/v1", outcome, mutating=True)["response"]
    assert response["allowed"] is False
    assert response["status"] == {"code": 403, "message": "no H100 left", "reason": "Forbidden"}
    assert "patch" not in response


def test_denial_keeps_explicit_code_and_reason() -> None:
    outcome = Outcome.deny("quota exceeded", code=422, reason="Invalid")
    status = render_review("u", "admission.k8s.io/v1", outcome, mutating=False)["response"]["status"]
    assert status == {"code": 422, "message": "quota exceeded", "reason": "Invalid"}


def test_allowed_response_carries_no_status() -> None:
    response = render_review("u", "admission.k8s.io/v1", Outcome(message="fine"), mutating=False)["response"]
    assert "status" not in response


def test_warnings_are_shortened_with_ellipsis_deduplicated_and_single_line() -> None:
    long = "x" * 300
    warnings = sanitize_warnings([long, long, "a\nb", "a b", ""])
    assert len(warnings) == 2
    assert len(warnings[0]) == WARNING_MAX_CHARS and warnings[0].endswith("…")
    assert warnings[1] == "a b"


def test_warnings_total_stays_within_limit_and_says_how_many_were_left_out() -> None:
    warnings = sanitize_warnings([f"warning {i:03d} " + "y" * 100 for i in range(100)])
    assert sum(len(w) for w in warnings) <= WARNINGS_MAX_TOTAL_CHARS
    assert all(len(w) <= WARNING_MAX_CHARS for w in warnings)
    assert warnings[-1].endswith("more warning(s) omitted")
    kept = len(warnings) - 1
    assert warnings[-1].startswith(f"{100 - kept} ")


def test_warnings_on_denial_are_kept() -> None:
    outcome = Outcome(allowed=False, message="m", warnings=["careful"])
    assert render_review("u", "admission.k8s.io/v1", outcome, mutating=False)["response"]["warnings"] == ["careful"]


def test_valid_audit_keys_pass_untouched() -> None:
    outcome = Outcome(audit_annotations={"policy.deny-h100": "v", "A_b.c-9": "w"})
    annotations = render_review("u", "admission.k8s.io/v1", outcome, mutating=True)["response"]["auditAnnotations"]
    assert annotations == {"policy.deny-h100": "v", "A_b.c-9": "w"}


def test_audit_keys_with_slash_or_too_long_are_repaired_to_qualified_names() -> None:
    outcome = Outcome(audit_annotations={"kgwe.io/decision": "1", "k" * 80: "2", "-lead": "3"})
    annotations = render_review("u", "admission.k8s.io/v1", outcome, mutating=True)["response"]["auditAnnotations"]
    assert annotations["kgwe.io-decision"] == "1"
    assert annotations["k" * AUDIT_KEY_MAX_CHARS] == "2"
    assert annotations["lead"] == "3"
    assert all(QUALIFIED_PART.match(k) and len(k) <= AUDIT_KEY_MAX_CHARS for k in annotations)


def test_audit_keys_that_cannot_be_repaired_or_collide_are_dropped() -> None:
    outcome = Outcome(audit_annotations={"///": "x", "a/b": "1", "a-b": "2"})
    annotations = render_review("u", "admission.k8s.io/v1", outcome, mutating=True)["response"]["auditAnnotations"]
    assert annotations == {"a-b": "1"}
    assert repair_audit_key("///") is None


def test_audit_values_are_strings() -> None:
    outcome = Outcome(audit_annotations={"n": 3})  # type: ignore[dict-item]
    assert render_review("u", "admission.k8s.io/v1", outcome, True)["response"]["auditAnnotations"] == {"n": "3"}


@settings(max_examples=tries(200, 2000), deadline=None)
@given(st.lists(st.one_of(
    st.lists(st.sampled_from(["a", "é", " ", "\t", "\n", "\x00", "\x7f", "\x85", "\u00a0", "\u200b", "\u2028", "\u3000",
                              "…", "x" * 40]), max_size=8).map("".join),
    st.text(max_size=130),
), max_size=6))
def test_a_warning_kgwe_wrote_clean_is_kept_as_cleaning_would_keep_it(warnings: list[str]) -> None:
    # sanitize_warnings passes a warning that cleaning would give back unchanged without cleaning it: the answer is
    # the rule's (control characters and runs of whitespace become one space, then <= 120 characters, no repeats).
    expected: list[str] = []
    for warning in warnings:
        text = " ".join(re.sub(r"[\x00-\x1f\x7f]+", " ", warning).split())
        text = text if len(text) <= WARNING_MAX_CHARS else text[: WARNING_MAX_CHARS - 1].rstrip() + "…"
        if text and text not in expected:
            expected.append(text)
    assert sanitize_warnings(warnings) == expected


@settings(max_examples=tries(100, 1000), deadline=None)
@given(st.lists(st.one_of(st.sampled_from(["same warning", "KGWE: a  warning\n", "x" * 200]), st.text(max_size=130)),
                max_size=6))
def test_render_review_answers_each_list_of_warnings_as_sanitize_warnings_does(warnings: list[str]) -> None:
    # render_review remembers what it answered for a list (replicas get the same warnings): the second answer is
    # the first, and both are the rule's; the caller's list is never changed or shared.
    for _ in range(2):
        outcome = Outcome(warnings=list(warnings))
        rendered = render_review("u", "admission.k8s.io/v1", outcome, mutating=False)["response"].get("warnings", [])
        assert rendered == sanitize_warnings(warnings)
        rendered.append("changed by the caller")
        assert outcome.warnings == warnings


def test_a_list_of_warnings_left_short_is_logged_every_time(caplog: pytest.LogCaptureFixture) -> None:
    warnings = [f"warning {i:03d} " + "y" * 100 for i in range(100)]
    for _ in range(2):
        caplog.clear()
        rendered = render_review("u", "admission.k8s.io/v1", Outcome(warnings=list(warnings)), False)["response"]
        assert rendered["warnings"][-1].endswith("more warning(s) omitted")
        assert any("left out" in record.getMessage() for record in caplog.records)
