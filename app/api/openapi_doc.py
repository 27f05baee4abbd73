"""The finishing pass over the generated OpenAPI document: what makes it readable.

:func:`finish` runs once on the document FastAPI builds from the routes:

* **operationIds** are stable and readable (:data:`OPERATION_IDS`), whatever the Python
  function names; a route added without an entry gets its function name in lowerCamelCase;
* **every status code** an operation can answer is documented, 500 and 503 (with
  ``Retry-After``) included, each with its problem document;
* **response examples are real answers**, recorded from the service by
  ``python -m app.api.record_examples`` into ``app/api/openapi_examples.json``; a test
  (``tests/api/test_openapi_examples.py``) replays every request and checks the answer is
  still byte for byte the recorded one;
* **binary media types** (``application/protobuf``) are not offered as request or response
  types: Swagger UI's "Try it out" can neither build nor show a binary protobuf body, so
  offering them there fails silently. The route descriptions say how binary works;
* **Markdown** is safe for ReDoc: a ``<word>`` outside a code span (``urn:...:<code>``) is
  escaped, so it shows instead of vanishing as an unknown HTML tag.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

#: Path and method -> operationId.
OPERATION_IDS: dict[tuple[str, str], str] = {
    ("/v1/gradients/op", "post"): "gradientsOp",
    ("/v1/gradients/net", "post"): "gradientsNet",
    ("/v1/verify", "post"): "verify",
    ("/v1/run", "post"): "run",
    ("/v1/operators", "get"): "listOperators",
    ("/healthz", "get"): "health",
}

EXAMPLES_FILE = Path(__file__).with_name("openapi_examples.json")
BINARY_TYPES = ("application/protobuf", "application/x-protobuf")
PROBLEM = "application/problem+json"

BINARY_NOTE = (
    "\n\n**Binary protobuf.** The same request travels as the binary `netgrad.v1` message "
    "(`Content-Type: application/protobuf` or `application/x-protobuf`) and `Accept: "
    "application/protobuf` asks for a binary answer; a `.pbtxt` body (the request message in "
    "text format) is accepted as `text/x-protobuf`, and `Accept: text/x-protobuf` asks for "
    "the answer in text format. These are not offered in \"Try it out\", "
    "which cannot build or show binary bodies: use the Python client `netgrad-client`, the "
    "`netgrad` CLI with `--url`, or curl `--data-binary @request.pb`."
)

GET_BINARY_NOTE = (
    "\n\n**Binary protobuf.** `Accept: application/protobuf` (or `application/x-protobuf`) "
    "asks for the answer as its binary `netgrad.v1` message, and `Accept: text/x-protobuf` "
    "in protobuf text format. \"Try it out\" offers JSON and text format only (it cannot show "
    "binary answers)."
)

_EXTRA_STATUS = {
    500: "Internal error (a bug): the request was not served; nothing is left half done.",
    503: "No execution worker is available (NETGRAD_WORKERS=0, every worker busy past the "
         "queue timeout, or the service is overloaded): retry after `Retry-After` seconds.",
}
_RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before retrying, when known.",
                                "schema": {"type": "integer"}}}


@cache
def recorded_examples() -> dict[str, Any]:
    """``operationId -> status -> name -> {"request": ..., "response": ...}`` as recorded."""
    if not EXAMPLES_FILE.exists():
        return {}
    data: dict[str, Any] = json.loads(EXAMPLES_FILE.read_text(encoding="utf-8"))
    return data


_TAG = re.compile(r"<([A-Za-z_][A-Za-z0-9_]*)>")
_CODE = re.compile(r"(`+)(.+?)\1", re.S)


def escape_markdown(text: str) -> str:
    """``text`` with every ``<word>`` outside a code span written ``&lt;word&gt;``."""
    out, pos = [], 0
    for m in _CODE.finditer(text):
        out.append(_TAG.sub(r"&lt;\1&gt;", text[pos:m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(_TAG.sub(r"&lt;\1&gt;", text[pos:]))
    return "".join(out)


def _escape_all(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("description", "summary") and isinstance(value, str):
                node[key] = escape_markdown(value)
            elif key not in ("example", "examples"):
                _escape_all(value)
    elif isinstance(node, list):
        for value in node:
            _escape_all(value)


#: Detail of the 500 answer (:func:`app.errors.install_handlers`' last-resort handler).
INTERNAL_DETAIL = "internal error; the request was not served"


def internal_error_example() -> Any:
    """The 500 problem document exactly as the last-resort handler writes it (a bug cannot be
    recorded on demand; ``tests/api/test_openapi_examples.py`` provokes one and compares)."""
    from asgi_correlation_id import correlation_id

    from app.errors import problem_response

    # The schema is built during the first request for it: a fixed request ID instead of
    # that request's, so every process serves the same bytes.
    token = correlation_id.set(EXAMPLE_REQUEST_ID)
    try:
        response = problem_response(500, "internal_error", INTERNAL_DETAIL, [])
    finally:
        correlation_id.reset(token)
    return json.loads(bytes(response.body))


#: The request ID of the generated 500 example (any 32 hex digits would do).
EXAMPLE_REQUEST_ID = "0123456789abcdef0123456789abcdef"


#: Operations that run no verification/run job and admit no body: never a 429.
NO_JOBS = frozenset({"listOperators"})


def _problem(description: str) -> dict[str, Any]:
    return {"description": description,
            "content": {PROBLEM: {"schema": {"$ref": "#/components/schemas/Problem"}}}}


def _finish_operation(op: dict[str, Any], op_id: str) -> None:
    op["operationId"] = op_id
    body = op.get("requestBody")
    if body is not None:
        content = body.get("content", {})
        if any(t in content for t in BINARY_TYPES):
            op["description"] = (op.get("description") or "") + BINARY_NOTE
        for t in BINARY_TYPES:
            content.pop(t, None)
    responses = op.setdefault("responses", {})
    answers_binary = any(t in resp.get("content", {}) for resp in responses.values()
                         for t in BINARY_TYPES)
    if body is None and answers_binary:
        op["description"] = (op.get("description") or "") + GET_BINARY_NOTE
    for resp in responses.values():
        for t in BINARY_TYPES:
            resp.get("content", {}).pop(t, None)
    for status, text in _EXTRA_STATUS.items():
        responses.setdefault(str(status), _problem(text))
    if op_id in NO_JOBS:  # the per-key job limit (app.auth) cannot refuse it
        responses.pop("429", None)
    responses["503"]["headers"] = dict(_RETRY_AFTER)
    recorded = dict(recorded_examples().get(op_id, {}))
    recorded.setdefault("500", {"Internal error": {"response": internal_error_example()}})
    for status, named in recorded.items():
        resp = responses.get(status)
        if resp is None:
            continue
        for media, spec in resp.get("content", {}).items():
            if media in ("application/json", PROBLEM):
                spec["examples"] = {
                    name: {"summary": name, "value": ex["response"]}
                    for name, ex in named.items()
                }


def camel_operation_id(op: dict[str, Any], path: str, method: str) -> str:
    """A readable id for a route not in :data:`OPERATION_IDS`: FastAPI's generated one
    (function name + path + method, ``create_job_v1_jobs_post``) cut to the function name, in
    lowerCamelCase (``createJob``); stable while the function keeps its name."""
    generated = str(op.get("operationId", ""))
    suffix = re.sub(r"\W", "_", path) + "_" + method
    name = generated[: -len(suffix)] if generated.endswith(suffix) else generated
    head, *rest = [w for w in name.split("_") if w] or ["operation"]
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def finish(schema: dict[str, Any]) -> dict[str, Any]:
    """Apply the finishing pass (see the module docstring) to ``schema`` in place."""
    for path, item in schema.get("paths", {}).items():
        for method, op in item.items():
            op_id = OPERATION_IDS.get((path, method)) or camel_operation_id(op, path, method)
            _finish_operation(op, op_id)
    _escape_all(schema)
    return schema
