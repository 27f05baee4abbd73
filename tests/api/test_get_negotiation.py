"""The ``GET`` routes answer in the encoding ``Accept`` asks for, as the ``POST`` routes do.

``/v1/operators`` and the probes (``/healthz``, ``/livez``, ``/readyz``) answered JSON
whatever ``Accept`` said: a client asking for binary protobuf got JSON it could not
parse. Now they answer ``netgrad.v1.OperatorList`` / ``netgrad.v1.Health`` in binary
protobuf or text format when asked, with ``Vary: Accept``. ``/v1/operators`` refuses an
``Accept`` that allows none of the API's encodings with a 406; a probe answers JSON then
(a probe must not fail on its headers).
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from google.protobuf import text_format

from api_schemas import netgrad_pb2

PROBES = ["/healthz", "/livez", "/readyz"]


def test_operators_in_binary_protobuf_list_what_json_lists(client: TestClient) -> None:
    as_json = client.get("/v1/operators").json()["operators"]
    r = client.get("/v1/operators", headers={"accept": "application/x-protobuf"})
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/x-protobuf"
    assert r.headers["vary"] == "Accept"
    msg = netgrad_pb2.OperatorList.FromString(r.content)
    assert [o.type for o in msg.operators] == [o["type"] for o in as_json]
    assert [o.gradient for o in msg.operators] == [o["gradient"] for o in as_json]


def test_operators_in_text_format_with_a_status_filter(client: TestClient) -> None:
    r = client.get("/v1/operators?status=gradient",
                   headers={"accept": "text/x-protobuf"})
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/x-protobuf; charset=utf-8"
    msg = text_format.Parse(r.text, netgrad_pb2.OperatorList())
    assert msg.operators and {o.gradient for o in msg.operators} == {"gradient"}


def test_operators_refuse_an_accept_they_cannot_answer(client: TestClient) -> None:
    r = client.get("/v1/operators", headers={"accept": "text/html"})
    assert r.status_code == 406
    assert r.headers["content-type"] == "application/problem+json"
    assert "application/x-protobuf" in r.json()["detail"]


@pytest.mark.parametrize("path", PROBES)
def test_probes_answer_in_the_asked_encoding(client: TestClient, path: str) -> None:
    r = client.get(path, headers={"accept": "application/protobuf"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/protobuf"
    assert netgrad_pb2.Health.FromString(r.content).status in ("ok", "ready")
    t = client.get(path, headers={"accept": "text/x-pbtxt"})
    assert text_format.Parse(t.text, netgrad_pb2.Health()).version


@pytest.mark.parametrize("path", PROBES)
def test_probes_fall_back_to_json_for_any_other_accept(client: TestClient, path: str) -> None:
    for accept in ("text/plain", "", "*/*", "application/json"):
        r = client.get(path, headers={"accept": accept})
        assert r.status_code == 200, (accept, r.text)
        assert r.headers["content-type"] == "application/json"
        assert r.json()["status"] in ("ok", "ready")


def test_openapi_offers_the_encodings_on_get_routes(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path in ["/v1/operators", "/healthz", "/livez", "/readyz", "/v1/jobs/{job_id}"]:
        get = paths[path]["get"]
        # (binary types are said in the description: "Try it out" cannot show them)
        assert {"application/json", "text/x-protobuf"} <= set(get["responses"]["200"][
            "content"]), path
        assert "Accept: application/protobuf" in get["description"], path
    assert "406" in paths["/v1/operators"]["get"]["responses"]
    assert "406" not in paths["/healthz"]["get"]["responses"]
    assert "415" not in paths["/v1/operators"]["get"]["responses"]
