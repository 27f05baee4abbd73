"""Record the OpenAPI response examples: real answers of the service to real requests.

Usage (from the repository root)::

    python -m app.api.record_examples          # rewrite app/api/openapi_examples.json

Each entry of :data:`CASES` is sent to an in-process app (one execution worker; none for
the 503 cases) and its answer is stored under ``operationId -> status -> name`` with the
request. ``app.api.openapi_doc`` shows them as the examples of each response, and
``tests/api/test_openapi_examples.py`` replays every case and compares the answers, so an
example can never drift from what the service says. The operator list is stored cut to its
first entries (the whole list is long and grows with every op).
"""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import dataclass, field
from typing import Any

from app.api import docs
from app.api.openapi_doc import EXAMPLES_FILE

#: Entries kept of the operator list example.
OPERATORS_KEPT = 3


@dataclass(frozen=True)
class Case:
    """One recorded exchange.

    Attributes:
        op_id: operationId of the route.
        status: expected HTTP status.
        name: example name (shown in /docs and ReDoc).
        method, path: the route.
        body: JSON body (``None`` for GET); ``raw`` with ``content_type`` sends bytes instead.
        workers: execution workers of the app that answers.
        headers: extra request headers.
        max_body_bytes: body limit of the app that answers (default: the service default).
    """

    op_id: str
    status: int
    name: str
    method: str
    path: str
    body: Any = None
    raw: str | None = None
    content_type: str = "application/json"
    workers: int = 1
    headers: dict[str, str] = field(default_factory=dict)
    max_body_bytes: int | None = None

    @property
    def app_key(self) -> tuple[int, int | None]:
        """Which app answers: (execution workers, body limit or ``None`` for the default)."""
        return self.workers, self.max_body_bytes


def _edited(base: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    req = copy.deepcopy(base)
    node: Any = req
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return req


_NO_INPUTS = {"net": docs.MLP_NET, "ys": ["prob"]}
_TYPO = _edited(docs.NET_REQUEST, ["net", "op", 1, "type"], "Reluu")
_RUN_NO_INPUTS = {"net": docs.MLP_NET, "fetch": ["prob"]}
_MISSPELT = {"op": docs.DO_OP, "gOutputs": docs.DO_REQUEST["g_output"]}

_POSTS = (("gradientsOp", "/v1/gradients/op", docs.DO_REQUEST),
          ("gradientsNet", "/v1/gradients/net", docs.NET_REQUEST),
          ("verify", "/v1/verify", docs.VERIFY_REQUEST),
          ("run", "/v1/run", docs.RUN_REQUEST))

CASES: tuple[Case, ...] = (
    Case("gradientsOp", 200, "Do op (Add inside Do)", "POST", "/v1/gradients/op",
         docs.DO_REQUEST),
    Case("gradientsOp", 400, "Misspelt field", "POST", "/v1/gradients/op", _MISSPELT),
    Case("gradientsOp", 415, "Wrong Content-Type", "POST", "/v1/gradients/op",
         raw=json.dumps(docs.DO_REQUEST), content_type="text/plain"),
    Case("gradientsNet", 200, "FC + Relu + Softmax", "POST", "/v1/gradients/net",
         docs.NET_REQUEST),
    Case("gradientsNet", 400, "ys names a blob no op writes", "POST", "/v1/gradients/net",
         {"net": docs.MLP_NET, "ys": ["probs"]}),
    Case("gradientsNet", 422, "Unknown op type", "POST", "/v1/gradients/net", _TYPO),
    Case("verify", 200, "FC + Relu + Softmax", "POST", "/v1/verify", docs.VERIFY_REQUEST),
    Case("verify", 400, "Missing inputs", "POST", "/v1/verify", _NO_INPUTS),
    Case("verify", 503, "No execution worker", "POST", "/v1/verify", docs.VERIFY_REQUEST,
         workers=0),
    Case("run", 200, "If tutorial", "POST", "/v1/run", docs.RUN_REQUEST),
    Case("run", 400, "Missing inputs", "POST", "/v1/run", _RUN_NO_INPUTS),
    Case("run", 503, "No execution worker", "POST", "/v1/run", docs.RUN_REQUEST, workers=0),
    *(Case(op_id, 406, "Accept allows neither JSON nor protobuf", "POST", path, body,
           headers={"Accept": "text/html"}) for op_id, path, body in _POSTS),
    *(Case(op_id, 413, "Body above NETGRAD_MAX_BODY_BYTES (here 256)", "POST", path, body,
           max_body_bytes=256) for op_id, path, body in _POSTS),
    Case("listOperators", 200, f"First {OPERATORS_KEPT} operators", "GET", "/v1/operators"),
    Case("listOperators", 400, "Unknown status", "GET", "/v1/operators?status=differentiable"),
    Case("health", 200, "One execution worker", "GET", "/healthz"),
)


def answer(case: Case, client: Any) -> Any:
    """The JSON answer of ``client`` (a TestClient) to ``case``, cut as stored.

    Raises:
        RuntimeError: the status is not the expected one.
    """
    headers = {"Content-Type": case.content_type, **case.headers}
    if case.method == "GET":
        r = client.get(case.path)
    elif case.raw is not None:
        r = client.post(case.path, content=case.raw.encode(), headers=headers)
    else:
        r = client.post(case.path, content=json.dumps(case.body).encode(), headers=headers)
    if r.status_code != case.status:
        raise RuntimeError(f"{case.op_id} {case.name}: expected {case.status}, "
                           f"got {r.status_code}: {r.text[:500]}")
    doc = r.json()
    if case.op_id == "listOperators" and case.status == 200:
        doc["operators"] = doc["operators"][:OPERATORS_KEPT]
    return doc


def app_for(case: Case) -> Any:
    """A fresh app configured as ``case`` needs."""
    from app.main import create_app
    from app.settings import Settings

    settings = Settings(workers=case.workers)
    if case.max_body_bytes is not None:
        settings = settings.model_copy(update={"max_body_bytes": case.max_body_bytes})
    return create_app(settings)


def record() -> dict[str, Any]:
    """Run every case; ``operationId -> status -> name -> {"request", "response"}``."""
    from fastapi.testclient import TestClient

    out: dict[str, Any] = {}
    clients: dict[tuple[int, int | None], Any] = {}
    try:
        for case in CASES:
            if case.app_key not in clients:
                clients[case.app_key] = TestClient(app_for(case)).__enter__()
            doc = answer(case, clients[case.app_key])
            entry = {"request": case.body if case.raw is None else case.raw, "response": doc}
            out.setdefault(case.op_id, {}).setdefault(str(case.status), {})[case.name] = entry
    finally:
        for c in clients.values():
            c.__exit__(None, None, None)
    return out


def main() -> int:
    """Write :data:`app.api.openapi_doc.EXAMPLES_FILE`."""
    data = record()
    EXAMPLES_FILE.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n",
                             encoding="utf-8")
    print(f"wrote {EXAMPLES_FILE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
