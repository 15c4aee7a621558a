"""The kernel's record store against the fake API server (real HTTP, a Lease's create and replace with the
resourceVersion checked): created at version "", replaced only at the version read, a lost race a `Conflict`
with nothing written, any other failure `Unavailable` with its status, and every call bounded."""

from __future__ import annotations

from typing import Any

import pytest
from kube_fake_apiserver import FakeApiServer
from kubernetes import client as k8s_client

from policies.kernel.records import (
    DEFAULT_TIMEOUT,
    Codec,
    Conflict,
    ObjectPlace,
    RecordStore,
    Unavailable,
)
from webhook.cluster.kube_json import KubeJson

COLLECTION = "/apis/coordination.k8s.io/v1/namespaces/kgwe-system/leases"
PLACE = ObjectPlace(COLLECTION, "record", "coordination.k8s.io/v1", "Lease", "kgwe-system")


def _holder(obj: dict[str, Any] | None) -> str | None:
    return ((obj or {}).get("spec") or {}).get("holderIdentity")


def _with_holder(holder: str | None, obj: dict[str, Any]) -> dict[str, Any]:
    obj["spec"] = {"holderIdentity": holder}
    return obj


CODEC: Codec[str | None] = Codec(_holder, _with_holder)


def _store(api: Any) -> RecordStore[str | None]:
    return RecordStore(api, PLACE, CODEC)


def _stored(apiserver: FakeApiServer) -> dict[str, Any]:
    return apiserver.leases["kgwe-system/record"]


def test_an_absent_record_is_created_at_version_empty_once(apiserver: FakeApiServer, api_client: Any) -> None:
    store = _store(KubeJson(api_client))
    assert (store.read().value, store.read().version) == (None, "")
    version = store.write("a", "")
    assert version and version == _stored(apiserver)["metadata"]["resourceVersion"]
    assert _stored(apiserver)["kind"] == "Lease" and _stored(apiserver)["spec"] == {"holderIdentity": "a"}
    # A second writer that also read it absent loses: AlreadyExists is a Conflict, and nothing changed.
    with pytest.raises(Conflict):
        _store(KubeJson(api_client)).write("b", "")
    found = store.read()
    assert (found.value, found.version) == ("a", version)


def test_a_stale_version_is_a_conflict_and_writes_nothing(apiserver: FakeApiServer, api_client: Any) -> None:
    ours, theirs = _store(KubeJson(api_client)), _store(KubeJson(api_client))
    first = ours.write("a", "")
    read = theirs.read()
    second = ours.write("b", first)
    assert second != first
    with pytest.raises(Conflict):
        theirs.write("c", read.version)
    assert _holder(_stored(apiserver)) == "b"
    # Read again, then the write lands, on top of the object read.
    again = theirs.read()
    assert theirs.write("c", again.version) != second and _holder(_stored(apiserver)) == "c"


def test_what_the_record_does_not_own_survives_a_write(apiserver: FakeApiServer, api_client: Any) -> None:
    store = _store(KubeJson(api_client))
    store.write("a", "")
    _stored(apiserver)["metadata"]["labels"] = {"team": "ml"}
    _stored(apiserver)["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    store.write("b", store.read().version)
    assert _stored(apiserver)["metadata"]["labels"] == {"team": "ml"}
    assert "managedFields" not in _stored(apiserver)["metadata"]  # left to the API server, which keeps its own


def test_a_record_deleted_since_it_was_read_is_a_conflict(apiserver: FakeApiServer, api_client: Any) -> None:
    store = _store(KubeJson(api_client))
    version = store.write("a", "")
    del apiserver.leases["kgwe-system/record"]
    with pytest.raises(Conflict):
        store.write("b", version)  # 404 on the replace: read again (and create it)
    assert store.read().version == ""


def test_other_failures_are_unavailable_with_their_status(apiserver: FakeApiServer, api_client: Any) -> None:
    store = _store(KubeJson(api_client))
    version = store.write("a", "")
    apiserver.fail_next(f"{COLLECTION}/record", 503, times=2)
    with pytest.raises(Unavailable) as failed:
        store.read()
    assert failed.value.status == 503 and "Lease kgwe-system/record: reading failed: HTTP 503" in str(failed.value)
    with pytest.raises(Unavailable) as failed:
        store.write("b", version)
    assert failed.value.status == 503 and _holder(_stored(apiserver)) == "a"
    apiserver.close()
    configuration = k8s_client.Configuration()
    configuration.host, configuration.retries = apiserver.url, False
    with k8s_client.ApiClient(configuration) as closed, pytest.raises(Unavailable) as failed:
        _store(KubeJson(closed)).read()
    assert failed.value.status is None  # no answer at all


class _Recording:
    """The raw JSON client, with the timeout of each request noted."""

    def __init__(self, api: KubeJson) -> None:
        self.api, self.timeouts = api, []

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        self.timeouts.append(kwargs.get("timeout"))
        return self.api.request(method, path, **kwargs)


def test_every_call_is_bounded(apiserver: FakeApiServer, api_client: Any) -> None:
    recording = _Recording(KubeJson(api_client))
    store = _store(recording)
    store.write("a", store.read().version)
    store.read(timeout=2.5)
    assert recording.timeouts == [DEFAULT_TIMEOUT, DEFAULT_TIMEOUT, 2.5]
