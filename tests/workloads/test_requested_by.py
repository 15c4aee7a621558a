"""Who asked (issue 13, item 7): a workload's creator is charged and RBAC-checked for its pods; the signed
`kgwe.io/requested-by` cannot be forged, copied to a bare pod, moved to another namespace or kept by users."""

from __future__ import annotations

import copy
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
from workload_support import (
    CLUSTER,
    CONFIG,
    KEY,
    REPLICASET_CONTROLLER,
    Server,
    pod_from_template,
    real_runtime,
    review,
)

from webhook.admission.request import UserInfo, decode_review
from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.review import answer, create_review, decoded_patch
from webhook.workloads.identity import Requester, Signer, as_caller, with_requester
from webhook.workloads.kind import workloads_of

H100 = {"kgwe.io/accelerator": "nvidia-h100-80gb"}


def deployment(namespace: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "big", "namespace": namespace, "annotations": dict(H100)},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "big"}}, "template": {
            "metadata": {"labels": {"app": "big"}},
            "spec": {"containers": [{"name": "m", "image": "cuda", "resources": {
                "limits": {"nvidia.com/gpu": gpus, "memory": "8Gi"}}}]}}},
    }


def notes(obj: dict[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def test_bobs_deployment_is_charged_to_bobs_tenant(server: Server) -> None:
    # bob is in ml-researchers: his pods in `default` are ml-research's, whoever creates them.
    validated, mutated, _ = server.admit(review(deployment("default", 8), user="bob"))
    assert validated["allowed"]
    template = mutated["spec"]["template"]
    assert notes(template)["kgwe.io/tenant"] == "ml-research"
    signed = orjson.loads(notes(template)["kgwe.io/requested-by"])
    assert (signed["user"], signed["ns"]) == ("bob", "default")
    assert "ml-researchers" in signed["groups"]
    results = []
    for index in range(3):  # ml-research has 16 H100s
        pod = pod_from_template(template, "default", f"big-{index}")
        body = review(pod, user=REPLICASET_CONTROLLER, groups=("system:serviceaccounts",))
        assert "patch" not in server.ask("/mutate", body)
        results.append(server.ask("/validate", body))
    # Each pod is admitted behind the quota gate its template carries: ml-research's controller releases them
    # against ml-research's quota (docs/quotas.md), whoever created them.
    assert [r["allowed"] for r in results] == [True, True, True]
    assert {"name": "kgwe.io/quota"} in template["spec"]["schedulingGates"]


def test_a_copied_requested_by_on_a_bare_pod_does_nothing(server: Server) -> None:
    _, mutated, _ = server.admit(review(deployment("default", 8), user="bob"))
    stolen = notes(mutated["spec"]["template"])["kgwe.io/requested-by"]
    pod = pod_from_template(mutated["spec"]["template"], "default", "mallory")
    # mallory creates the pod herself, with bob's annotation copied: it is removed and she is her own tenant.
    _validated, final, patch = server.admit(review(pod, user="mallory", groups=()))
    assert "kgwe.io/requested-by" not in notes(final)
    assert notes(final)["kgwe.io/tenant"] == "default"
    assert "via" not in orjson.loads(notes(final)["kgwe.io/decision"])
    assert any(op["path"] == "/metadata/annotations/kgwe.io~1requested-by" for op in patch)
    # With the mutating webhook skipped, the validating webhook refuses the pod that carries it.
    answer = server.ask("/validate", review(pod, user="mallory", groups=()))
    assert not answer["allowed"] and "kgwe.io/requested-by is written by KGWE" in answer["status"]["message"]
    # A controller-made pod whose annotation was signed for another namespace is judged as the controller.
    moved = copy.deepcopy(pod)
    moved["metadata"]["namespace"] = "team-a"
    body = review(moved, user=REPLICASET_CONTROLLER, groups=("system:serviceaccounts",))
    answer = server.ask("/mutate", body)
    assert "patch" in answer  # the annotation is removed, the tenant recomputed
    assert not server.ask("/validate", body)["allowed"]
    assert stolen


def test_a_forged_signature_or_an_edited_user_is_not_honoured(server: Server) -> None:
    _, mutated, _ = server.admit(review(deployment("default", 8), user="bob"))
    template = mutated["spec"]["template"]
    forged = Signer(b"not-the-webhook-key-at-all-000000").sign(UserInfo("bob", groups=["ml-researchers"]), "default")
    edited = orjson.loads(notes(template)["kgwe.io/requested-by"])
    edited["groups"] = ["ml-researchers", "system:masters"]
    for value in (forged, orjson.dumps(edited).decode(), "x" * 100_000, "[]"):
        pod = pod_from_template(template, "default", "p")
        pod["metadata"]["annotations"]["kgwe.io/requested-by"] = value
        body = review(pod, user=REPLICASET_CONTROLLER, groups=("system:serviceaccounts",))
        mutated_pod = server.ask("/mutate", body)
        assert "patch" in mutated_pod
        assert not server.ask("/validate", body)["allowed"]


def test_a_user_setting_requested_by_on_a_workload_gets_it_overwritten(server: Server) -> None:
    genuine = Signer(KEY).sign(UserInfo("bob", groups=["ml-researchers"]), "default")
    workload = deployment("default", 1)
    workload["spec"]["template"]["metadata"]["annotations"] = {"kgwe.io/requested-by": genuine}
    _validated, mutated, _ = server.admit(review(workload, user="mallory", groups=()))
    signed = orjson.loads(notes(mutated["spec"]["template"])["kgwe.io/requested-by"])
    assert signed["user"] == "mallory"
    assert notes(mutated["spec"]["template"])["kgwe.io/tenant"] == "default"
    # Mutation skipped: refused.
    answer = server.ask("/validate", review(workload, user="mallory", groups=()))
    assert not answer["allowed"] and "kgwe.io/requested-by" in answer["status"]["message"]


def test_an_update_that_leaves_the_template_alone_keeps_the_creator(server: Server) -> None:
    _, mutated, _ = server.admit(review(deployment("default", 1), user="bob"))
    scaled = copy.deepcopy(mutated)
    scaled["spec"]["replicas"] = 4
    answer, _, patch = server.admit(review(scaled, user="alice", groups=("team-a",), operation="UPDATE", old=mutated))
    assert answer["allowed"] and patch == []  # no re-attribution, no rollout
    changed = copy.deepcopy(mutated)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "cuda:13"
    _, final, _ = server.admit(review(changed, user="alice", groups=("team-a",), operation="UPDATE", old=mutated))
    assert orjson.loads(notes(final["spec"]["template"])["kgwe.io/requested-by"])["user"] == "alice"


def test_policies_judge_a_template_and_its_pods_for_the_same_person(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster"
    shutil.copytree(CLUSTER, cluster)
    (cluster / "policy.yaml").write_text("""
apiVersion: kgwe.io/v1alpha1
kind: GPUPolicy
metadata: {name: researchers-only-in-default}
spec:
  enforcementAction: Deny
  match: {namespaces: [default]}
  validations:
  - expression: "'ml-researchers' in request.userInfo.groups"
    message: only researchers run GPU work in default
""")
    runtime = build_runtime(load_config(CONFIG), cluster)
    workloads_of(runtime.admission).identity = workloads_of(real_runtime().admission).identity
    workload = deployment("default", 1)
    body = review(workload, user="bob")
    patch = decoded_patch(answer(runtime.admission, body, True, 10.0))
    mutated = jsonpatch.apply_patch(body["request"]["object"], patch)
    assert answer(runtime.admission, review(mutated, user="bob"), False, 10.0)["allowed"]
    refused = answer(runtime.admission, review(workload, user="mallory", groups=()), False, 10.0)
    assert "only researchers run GPU work in default" in refused["status"]["message"]
    # The ReplicaSet controller is no researcher, but the pod it makes is bob's.
    pod = pod_from_template(mutated["spec"]["template"], "default", "big-1")
    controller = review(pod, user=REPLICASET_CONTROLLER, groups=("system:serviceaccounts",))
    assert "patch" not in answer(runtime.admission, controller, True, 10.0)
    assert answer(runtime.admission, controller, False, 10.0)["allowed"]
    bare = create_review(pod | {"metadata": {**pod["metadata"], "annotations": {}}}, REPLICASET_CONTROLLER, [])
    assert not answer(runtime.admission, bare, False, 10.0)["allowed"]


def test_the_creator_making_a_pod_from_his_own_template_changes_nothing(server: Server) -> None:
    _, mutated, _ = server.admit(review(deployment("default", 2), user="bob"))
    pod = pod_from_template(mutated["spec"]["template"], "default", "by-hand")
    answer = server.ask("/mutate", review(pod, user="bob"))
    assert "patch" not in answer
    assert server.ask("/validate", review(pod, user="bob"))["allowed"]
    # bob with other groups is another requester: re-attributed, and the annotation goes.
    assert "patch" in server.ask("/mutate", review(pod, user="bob", groups=("team-a",)))


TRAINING_OPERATOR = "system:serviceaccount:kubeflow:training-operator"
KUBERAY = "system:serviceaccount:ray-system:kuberay-operator"


def owned_by(obj: dict[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"]["ownerReferences"] = [{"apiVersion": api_version, "kind": kind, "name": "owner",
                                           "uid": "6b1f0c2e-0000-4000-8000-000000000001", "controller": True}]
    return obj


def signer_of(template: dict[str, Any]) -> str:
    return str(orjson.loads(notes(template)["kgwe.io/requested-by"])["user"])


def test_a_signature_copied_into_a_kind_kgwe_does_not_admit_is_not_honoured(server: Server) -> None:
    # mallory copies bob's signed template (readable by anyone in `default`) into a TFJob: the training
    # operator, a configured controller, creates its pods. TFJobs never pass workload admission, so their
    # pods are the operator's, not bob's (they used to be charged and RBAC-checked as bob).
    _, mutated, _ = server.admit(review(deployment("default", 8), user="bob"))
    template = mutated["spec"]["template"]
    pod = pod_from_template(template, "default", "tf-worker-0")
    tfjob_pod = review(owned_by(pod, "kubeflow.org/v1", "TFJob"), user=TRAINING_OPERATOR,
                       groups=("system:serviceaccounts",))
    _validated, final, patch = server.admit(tfjob_pod)
    assert "kgwe.io/requested-by" not in notes(final) and notes(final)["kgwe.io/tenant"] != "ml-research"
    assert patch
    assert not server.ask("/validate", tfjob_pod)["allowed"]  # mutation skipped: refused
    # The same pod under a PyTorchJob, whose templates KGWE admits, is bob's.
    pytorch_pod = review(owned_by(pod, "kubeflow.org/v1", "PyTorchJob"), user=TRAINING_OPERATOR,
                         groups=("system:serviceaccounts",))
    assert "patch" not in server.ask("/mutate", pytorch_pod)
    assert server.ask("/validate", pytorch_pod)["allowed"]


def _bobs_template(server: Server) -> dict[str, Any]:
    """A pod template KGWE admitted and signed for bob (a copy, to put where an operator would)."""
    _, mutated, _ = server.admit(review(deployment("default", 1), user="bob"))
    return copy.deepcopy(mutated["spec"]["template"])


RAY_HEAD = {"rayStartParams": {}, "template": {"spec": {"containers": [
    {"name": "ray-head", "image": "rayproject/ray:2.38.0", "resources": {"limits": {"cpu": "2"}}}]}}}


def test_a_raycluster_kuberay_writes_for_a_rayservice_is_judged_not_passed(server: Server) -> None:
    # A RayService is no kind of the table: KubeRay copies its template, bob's signature included, into a
    # RayCluster it owns. That RayCluster is admitted as KubeRay's, not passed unchanged as bob's.
    cluster = {
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "serve-raycluster-x7k2", "namespace": "default"},
        "spec": {"headGroupSpec": copy.deepcopy(RAY_HEAD),
                 "workerGroupSpecs": [{"groupName": "gpu", "replicas": 1, "rayStartParams": {},
                                       "template": _bobs_template(server)}]},
    }
    body = review(owned_by(cluster, "ray.io/v1", "RayService"), user=KUBERAY, groups=("system:serviceaccounts",))
    _validated, final, patch = server.admit(body)
    assert patch
    assert signer_of(final["spec"]["workerGroupSpecs"][0]["template"]) == KUBERAY
    assert not server.ask("/validate", body)["allowed"]
    # Owned by a RayJob, whose templates KGWE admits, the same RayCluster passes unchanged.
    by_rayjob = review(owned_by(cluster, "ray.io/v1", "RayJob"), user=KUBERAY, groups=("system:serviceaccounts",))
    assert "patch" not in server.ask("/mutate", by_rayjob)
    assert server.ask("/validate", by_rayjob)["allowed"]


def test_a_rayjob_submitter_template_is_admitted_like_the_others(server: Server) -> None:
    # KubeRay makes the submitter Job from `submitterPodTemplate`; a signature copied there was kept.
    job = {
        "apiVersion": "ray.io/v1", "kind": "RayJob",
        "metadata": {"name": "infer", "namespace": "default"},
        "spec": {"entrypoint": "python /app/run.py", "rayClusterSpec": {"headGroupSpec": copy.deepcopy(RAY_HEAD)},
                 "submitterPodTemplate": _bobs_template(server)},
    }
    body = review(job, user="mallory", groups=())
    _validated, final, _patch = server.admit(body)
    assert signer_of(final["spec"]["submitterPodTemplate"]) == "mallory"
    answer = server.ask("/validate", body)
    assert not answer["allowed"] and "spec.submitterPodTemplate: " in answer["status"]["message"]


def test_a_pod_is_resolved_for_its_requester_and_marked_made_from_its_owners_template() -> None:
    # The requester hook as admission calls it, on decoded reviews: who the pod is judged for, the annotation it
    # must carry, and whether an admitted owner's template made it (SPEC section 7), owner by owner.
    runtime = real_runtime()
    workloads = workloads_of(runtime.admission)
    bob = UserInfo("bob", "", ["ml-researchers", "system:authenticated"], {})
    signed = Signer(KEY).sign(bob, "default")
    template = {"metadata": {"annotations": {"kgwe.io/requested-by": signed}},
                "spec": {"containers": [{"name": "m", "image": "cuda"}]}}
    pod = pod_from_template(template, "default", "p-0")
    bare = pod_from_template({"spec": template["spec"]}, "default", "p-1")
    cases = [
        (pod, "bob", ("ml-researchers",), ("bob", signed, "template", False)),
        (owned_by(pod, "apps/v1", "ReplicaSet"), REPLICASET_CONTROLLER, ("system:serviceaccounts",),
         ("bob", signed, "template", True)),
        (owned_by(pod, "v1", "Pod"), REPLICASET_CONTROLLER, ("system:serviceaccounts",),
         ("bob", signed, "template", True)),
        (owned_by(pod, "kubeflow.org/v1", "TFJob"), TRAINING_OPERATOR, ("system:serviceaccounts",),
         (TRAINING_OPERATOR, None, "", False)),
        (owned_by(bare, "apps/v1", "ReplicaSet"), "bob", ("ml-researchers",), ("bob", None, "", True)),
        (bare, "bob", ("ml-researchers",), ("bob", None, "", False)),
    ]
    for obj, user, groups, expected in cases:
        request = decode_review(orjson.dumps(review(obj, user=user, groups=groups)))
        before = (request.user.username, request.requested_by, request.via, request.made_from_template)
        resolved = workloads.resolved(request)
        got = (resolved.user.username, resolved.requested_by, resolved.via, resolved.made_from_template)
        assert got == expected, obj["metadata"].get("ownerReferences")
        assert (request.user.username, request.requested_by, request.via, request.made_from_template) == before
        assert resolved.pod.raw is request.object
        assert (resolved is request) == (got == before)


def test_a_pod_without_a_signature_is_resolved_for_its_caller_whatever_the_request_recorded() -> None:
    # The pod carries no `kgwe.io/requested-by`: the caller asks. A request that recorded another requester, `via`
    # or `made_from_template` (as a hook before may have) is set back to the caller's; one that recorded nothing is
    # handed back itself. Resolving twice is resolving once.
    workloads = workloads_of(real_runtime().admission)
    bare = pod_from_template({"spec": {"containers": [{"name": "m", "image": "cuda"}]}}, "default", "p-1")
    for obj in (bare, owned_by(bare, "apps/v1", "ReplicaSet"), owned_by(bare, "kubeflow.org/v1", "TFJob")):
        plain = decode_review(orjson.dumps(review(obj, user="bob", groups=("ml-researchers",))))
        once = workloads.resolved(plain)
        assert workloads.resolved(once) is once
        made = once.made_from_template
        assert (once is plain) == (made == plain.made_from_template)
        for recorded in ({"requested_by": "someone"}, {"via": "template"}, {"made_from_template": not made}):
            resolved = workloads.resolved(replace(plain, **recorded))  # type: ignore[arg-type]
            got = (resolved.user, resolved.requested_by, resolved.via, resolved.made_from_template)
            assert got == (plain.user, None, "", made or bool(recorded.get("made_from_template")))

def test_a_pod_judged_for_its_caller_is_the_request_with_requester_gives() -> None:
    # `as_caller` (the hook's path for a pod without a signed annotation) against `with_requester` of the caller's
    # own Requester, on requests already resolved one way or another: the same fields, the request itself exactly
    # when nothing changes.
    bare = pod_from_template({"spec": {"containers": [{"name": "m", "image": "cuda"}]}}, "default", "p-0")
    for requested_by, via, made in [(None, "", False), (None, "", True), ("x", "", False), (None, "template", False),
                                    ("x", "template", True)]:
        for made_now in (False, True):
            request = replace(decode_review(orjson.dumps(review(bare, user="bob", groups=("g",)))),
                              requested_by=requested_by, via=via, made_from_template=made)
            expected = with_requester(request, Requester(request.user, None, "", False), made_now)
            got = as_caller(request, made_now)
            assert got == expected and (got is request) == (expected is request)
            assert got.user is request.user and got.pod.raw is request.object
