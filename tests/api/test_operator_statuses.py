"""Typo versus unsupported op over HTTP, and ``GET /v1/operators?status=`` (issue 8, item 1)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.api.helpers import assert_problem


def _net(op_type: str) -> dict[str, object]:
    return {
        "net": {"op": [{"type": op_type, "input": ["X"], "output": ["Y"]}]},
        "ys": ["Y"],
    }


def test_typo_is_422_suggesting_the_nearest_names(client: TestClient) -> None:
    body = assert_problem(client.post("/v1/gradients/net", json=_net("Rleu")), 422)
    (err,) = body["errors"]
    assert err["code"] == "unknown_operator"
    assert (err["op_index"], err["op_type"], err["path"]) == (0, "Rleu", "op[0]:Rleu")
    assert "Did you mean Relu" in err["message"]
    assert "GET /v1/operators" in err["message"]


def test_caffe2_op_netgrad_lacks_is_422_saying_so(client: TestClient) -> None:
    lacking = client.get("/v1/operators", params={"status": "not_implemented_in_netgrad"})
    assert lacking.status_code == 200
    names = [o["type"] for o in lacking.json()["operators"]]
    assert names, "no Caffe2 op is left without a maker: pick another test"
    body = assert_problem(client.post("/v1/gradients/net", json=_net(names[0])), 422)
    (err,) = body["errors"]
    assert err["code"] == "not_implemented_in_netgrad"
    assert "a Caffe2 operator netgrad does not differentiate yet" in err["message"]


def test_operators_filter_by_status_and_report_kernels(client: TestClient) -> None:
    everything = client.get("/v1/operators").json()["operators"]
    assert len(everything) >= 550
    by = {o["type"]: o for o in everything}
    for status in sorted({o["gradient"] for o in everything}):
        got = client.get("/v1/operators", params={"status": status}).json()["operators"]
        assert [o["type"] for o in got] == sorted(t for t, o in by.items()
                                                   if o["gradient"] == status)
    assert by["TensorProtosDBInput"]["gradient"] == "no_gradient"
    assert by["Relu"]["has_kernel"] is True
    assert by["TensorProtosDBInput"]["has_kernel"] is False
    assert by["While"]["has_kernel"] is True  # executor-native


def test_operators_unknown_status_is_400(client: TestClient) -> None:
    body = assert_problem(client.get("/v1/operators", params={"status": "maybe"}), 400)
    assert "not_implemented_in_netgrad" in body["detail"]
