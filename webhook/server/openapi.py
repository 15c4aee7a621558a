"""The OpenAPI description of the routes the HTTP shell serves as plain Starlette routes.

FastAPI documents only its own routes; the admission endpoints and probes are plain routes (see app.py
for why), so their description is written here and merged into the app's generated document. It is
the contract that schemathesis checks the server against (tests/fuzz).
"""

from __future__ import annotations

import copy
from typing import Any

JSON = "application/json"

_STATUS: dict[str, Any] = {
    "type": "object",
    "required": ["kind", "apiVersion", "status", "message", "code"],
    "properties": {
        "kind": {"type": "string", "enum": ["Status"]},
        "apiVersion": {"type": "string"},
        "status": {"type": "string", "enum": ["Failure"]},
        "message": {"type": "string", "minLength": 1},
        "reason": {"type": "string"},
        "code": {"type": "integer"},
    },
}
# What the server checks, and no more: every other field is read leniently (a wrong type counts as absent), as
# the API server may add fields and older ones may send fewer.
_REVIEW_REQUEST: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "request"],
    "properties": {
        "apiVersion": {"type": "string", "enum": ["admission.k8s.io/v1"]},
        "kind": {"type": "string", "enum": ["AdmissionReview"]},
        "request": {
            "type": "object",
            "required": ["uid", "kind", "operation"],
            # A CREATE or UPDATE names its object (a review without one is a 400, never an answer).
            "if": {"required": ["operation"], "properties": {"operation": {"enum": ["CREATE", "UPDATE"]}}},
            "then": {"required": ["object"], "properties": {"object": {"not": {"type": "null"}}}},
            "properties": {
                "uid": {"type": "string", "minLength": 1},
                "kind": {"type": "object", "required": ["kind"],
                         "properties": {"kind": {"type": "string", "minLength": 1}},
                         "description": "group, version and kind of the object; only Pods are judged"},
                "resource": {"description": "group, version and resource"},
                "subResource": {"description": "a pod's `ephemeralcontainers` and `status` (UPDATE) are judged like "
                                               "the pod; other subresources pass unchanged"},
                "operation": {"type": "string", "enum": ["CREATE", "UPDATE", "DELETE", "CONNECT"],
                              "description": "CREATE and UPDATE are judged; others pass unchanged"},
                "namespace": {"description": "the object's namespace"},
                "name": {"description": "the object's name"},
                "userInfo": {"description": "username, uid, groups and extra of the requester"},
                "object": {"description": "the Pod (required for CREATE and UPDATE); anything but an object passes "
                                          "unchanged"},
                "oldObject": {"description": "the Pod before an UPDATE"},
                "dryRun": {"description": "true: judged in full, nothing recorded"},
            },
        },
    },
}
_REVIEW_RESPONSE: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "response"],
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string", "enum": ["AdmissionReview"]},
        "response": {
            "type": "object",
            "required": ["uid", "allowed"],
            "properties": {
                "uid": {"type": "string"},
                "allowed": {"type": "boolean"},
                "status": {"type": "object", "properties": {"code": {"type": "integer"},
                                                            "message": {"type": "string"},
                                                            "reason": {"type": "string"}}},
                "patch": {"type": "string", "contentEncoding": "base64"},
                "patchType": {"type": "string", "enum": ["JSONPatch"]},
                "warnings": {"type": "array", "items": {"type": "string"}},
                "auditAnnotations": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
    },
}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": schema}}}


def _admission(summary: str) -> dict[str, Any]:
    return {"post": {
        "summary": summary,
        "operationId": summary.split()[0].lower(),
        "parameters": [{"name": "timeout", "in": "query", "required": False, "schema": {"type": "string"},
                        "description": "the API server's webhook timeout as a Go duration (`10s`)"}],
        "requestBody": {"required": True, "content": {JSON: {"schema": {"$ref": "#/components/schemas/"
                                                                                "AdmissionReviewRequest"}}}},
        "responses": {
            "200": _json({"$ref": "#/components/schemas/AdmissionReviewResponse"}, "the admission decision"),
            "400": _json({"$ref": "#/components/schemas/Status"}, "not an AdmissionReview KGWE can answer"),
            "413": _json({"$ref": "#/components/schemas/Status"}, "larger than limits.maxRequestBytes"),
        },
    }}


def _probe(summary: str, codes: tuple[str, ...]) -> dict[str, Any]:
    return {"get": {"summary": summary, "operationId": summary.split()[0].lower(), "responses": {
        code: _json({"type": "object", "properties": {"status": {"type": "string"}}}, summary) for code in codes
    }}}


SHELL_PATHS: dict[str, Any] = {
    "/mutate": _admission("Mutate a pod (mutating admission webhook)"),
    "/validate": _admission("Validate a pod (validating admission webhook)"),
    "/healthz": _probe("Healthz: the process serves", ("200",)),
    "/readyz": _probe("Readyz: cluster model and certificate loaded", ("200", "503")),
    "/metrics": {"get": {"summary": "Prometheus metrics", "operationId": "metrics", "responses": {
        "200": {"description": "text exposition format", "content": {"text/plain": {"schema": {"type": "string"}}}},
    }}},
}
SHELL_SCHEMAS: dict[str, Any] = {
    "AdmissionReviewRequest": _REVIEW_REQUEST,
    "AdmissionReviewResponse": _REVIEW_RESPONSE,
    "Status": _STATUS,
}


def add_shell_routes(document: dict[str, Any]) -> dict[str, Any]:
    """`document` (FastAPI's generated OpenAPI) with the shell's plain routes described; changed in place."""
    paths = document.setdefault("paths", {})
    for path, operations in SHELL_PATHS.items():
        paths.setdefault(path, copy.deepcopy(operations))
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in SHELL_SCHEMAS.items():
        schemas.setdefault(name, copy.deepcopy(schema))
    return document
