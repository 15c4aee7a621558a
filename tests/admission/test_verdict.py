"""The verdict `/validate` answers from a pod's problems (webhook/admission/validate.py `_verdict`): a refusal is
`Outcome.deny` of the joined messages, 422 `Invalid` when every problem is bad input and 403 `Forbidden`
otherwise, carrying the warnings, audit annotations and object; an admission carries them too. Real requests
(`create_review` JSON, decoded) over the example cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from webhook.admission.outcome import Outcome
from webhook.admission.request import decode_review
from webhook.admission.seams import PendingVerdict
from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.review import create_review, review_pod

ROOT = Path(__file__).resolve().parents[2]


def gpu_pod(namespace: str, annotations: dict[str, str], gpus: Any = 1) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": namespace, "annotations": annotations},
        "spec": {"containers": [{"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
    }


def test_each_verdict_is_the_outcome_its_problems_make() -> None:
    runtime = build_runtime(load_config(ROOT / "examples" / "config.yaml"), ROOT / "examples" / "cluster")
    admission = runtime.admission
    placed = review_pod(admission, gpu_pod("team-a", {"kgwe.io/accelerator": "nvidia-h100-80gb"}), "alice").object
    cases = [
        placed,  # admitted
        gpu_pod("team-a", {"kgwe.io/accelerator": "nvidia-h100-80gb"}, gpus="two"),  # bad input alone: 422
        gpu_pod("team-a", {"kgwe.io/accelerator": "nvidia-h100-80gb"}),  # not placed by /mutate: 403
    ]
    seen = set()
    for pod in cases:
        request = decode_review(orjson.dumps(create_review(pod, "alice", [])))
        pending = admission.prepare_verdict(request, None)
        assert isinstance(pending, PendingVerdict)
        for gate in pending.gates:
            if not pending.problems:
                pending.problems.extend(gate.run(None))
        outcome = admission.validate(request)
        problems = pending.problems
        if not problems:
            expected = Outcome(warnings=pending.warnings, audit_annotations=pending.audit, object=request.object)
            seen.add("allowed")
        else:
            message = "; ".join(dict.fromkeys(m for _r, m in problems))
            invalid = all(reason == "invalid" for reason, _m in problems)
            expected = Outcome.deny(message, code=422 if invalid else 403, reason="Invalid" if invalid else "Forbidden")
            expected.warnings, expected.audit_annotations, expected.object = (
                pending.warnings, pending.audit, request.object)
            seen.add("invalid" if invalid else "forbidden")
        assert outcome == expected
        assert outcome.object is request.object
    assert seen == {"allowed", "invalid", "forbidden"}
