"""Stop 30: a byte that is not UTF-8 in a JSON body names its op, as in a binary body.

Before, a JSON body's ``invalid_utf8`` problem gave the field path only (``op_index`` and
``op_type`` null), while the same byte in a binary body named the op's index and type.
"""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from app.api import bodypaths
from app.main import create_app
from app.settings import Settings
from tests.api.helpers import assert_problem

JSON = {"content-type": "application/json"}


@pytest.mark.parametrize(("route", "body", "path", "op_index", "op_type"), [
    ("/v1/gradients/net",
     b'{"net": {"op": [{"type": "Relu", "input": ["x"], "output": ["y"]},'
     b' {"type": "Tanh", "input": ["y"], "output": ["z\xff"]}]}, "ys": ["z"]}',
     "net.op[1].output[0]", 1, "Tanh"),
    ("/v1/gradients/net",  # in a sub-net: the innermost op, by its index in its own net
     b'{"net": {"op": [{"type": "Do", "arg": [{"name": "net", "n": {"op": [{"type": "Relu",'
     b' "input": ["x"], "output": ["y"]}, {"type": "Sigmoid", "input": ["\xc3("]}]}}]}]},'
     b' "ys": ["y"]}',
     "net.op[0].arg[0].n.op[1].input[0]", 1, "Sigmoid"),
    ("/v1/gradients/op",  # the single op of an OpGradientRequest is op 0
     b'{"op": {"type": "Relu", "input": ["x\xfe"], "output": ["y"]}, "g_output": ["gy"]}',
     "op.input[0]", 0, "Relu"),
    ("/v1/gradients/op",  # the type given after the byte (stop 31: read ahead for it)
     b'{"op": {"input": ["x\xfe"], "type": "Relu", "output": ["y"]}, "g_output": ["gy"]}',
     "op.input[0]", 0, "Relu"),
    ("/v1/gradients/net",  # the byte in the type itself
     b'{"net": {"op": [{"type": "Re\xfflu"}]}, "ys": ["y"]}', "net.op[0].type", 0, None),
    ("/v1/gradients/net",  # not in an op: no op named
     b'{"net": {"name": "n\xff", "op": []}, "ys": ["y"]}', "net.name", None, None),
])
def test_a_bad_byte_names_its_op(client: TestClient, route: str, body: bytes, path: str,
                                 op_index: int | None, op_type: str | None) -> None:
    problem = assert_problem(client.post(route, content=body, headers=JSON), 400)
    (err,) = problem["errors"]
    assert (err["code"], err["path"], err["op_index"], err["op_type"]) == (
        "invalid_utf8", path, op_index, op_type), problem


def test_json_place_keeps_only_the_path_and_types() -> None:
    path, skeleton = bodypaths.json_place(
        '{"net": {"name": "a", "op": [{"type": "A"}, {"type": "B", "input": ["x", "')
    assert path == "net.op[1].input[1]"
    assert skeleton == {"net": {"op": [None, {"type": "B", "input": [None, None]}]}}
    assert bodypaths.json_place('["x') == (None, None)


def test_a_large_body_served_in_the_isolation_process_is_counted() -> None:
    """A body over ``large_body_bytes`` is generated in the isolation process; its op counts
    reach the server's metrics (they were lost: ``op_count`` null, no ``forward_ops``)."""
    from tests.ops.test_metrics import delta, scrape

    n = 3000  # (over 128 KiB: not served inline, app.api.deps.INLINE_BYTES)
    ops = [{"type": "Relu" if k % 2 else "Tanh", "input": [f"b{k}"], "output": [f"b{k + 1}"]}
           for k in range(n)]
    body = json.dumps({"net": {"op": ops}, "ys": [f"b{n}"]}).encode()
    settings = Settings(workers=0, large_body_bytes=4 * 1024, isolate_large_bodies=True)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        before = scrape(c.get)
        r = c.post("/v1/gradients/net", content=body, headers=JSON)
        assert r.status_code == 200, r.text
        after = scrape(c.get)
    route = "/v1/gradients/net"
    assert delta(before, after, "netgrad_forward_ops_total", route=route) == n
    assert delta(before, after, "netgrad_gradient_ops_total", route=route) == len(
        r.json()["grad_ops"])


PAD = b'"' + b"p" * 5000 + b'"'  # (the bad byte's path is looked for: not past MAX_SCAN_CHARS)


@pytest.mark.parametrize(("route", "body", "path", "op_index", "op_type"), [
    ("/v1/gradients/net",  # after the op list: the list, no op of it
     b'{"net": {"name": ' + PAD + b', "op": [{"type": "Relu"}, {"type": "Tanh"}] \xff},'
     b' "ys": ["y"]}', "net.op", None, None),
    ("/v1/gradients/net",  # where the list should start
     b'{"net": {"name": ' + PAD + b', "op": \xff}, "ys": ["y"]}', "net.op", None, None),
    ("/v1/verify",
     b'{"net": {"name": ' + PAD + b', "op": []}, "grad_ops": [{"type": "A"}] \xff}',
     "grad_ops", None, None),
    ("/v1/gradients/net",  # a sub-net's op list: the op that holds the sub-net
     b'{"net": {"op": [{"type": "Do", "arg": [{"name": "net", "n": {"op": [{"type": "Relu"}]'
     b' \xff}}]}]}, "ys": ["y"]}', "net.op[0].arg[0].n.op", 0, "Do"),
])
def test_a_list_of_ops_named_whole_is_no_op_of_it(
    client: TestClient, route: str, body: bytes, path: str, op_index: int | None,
    op_type: str | None
) -> None:
    problem = assert_problem(client.post(route, content=body, headers=JSON), 400)
    (err,) = problem["errors"]
    assert (err["path"], err["op_index"], err["op_type"]) == (path, op_index, op_type), problem


def test_an_op_list_that_is_no_list_names_no_op(client: TestClient) -> None:
    problem = assert_problem(client.post("/v1/gradients/net", json={"net": {"op": 5},
                                                                     "ys": ["y"]}), 400)
    assert [(e["path"], e["op_index"]) for e in problem["errors"]] == [("net.op", None)]


def test_a_byte_just_after_an_op_names_that_op_with_its_type(client: TestClient) -> None:
    body = (b'{"net": {"name": ' + PAD + b', "op": [{"type": "Relu"} \xff, {"type": "X"}]},'
            b' "ys": ["y"]}')
    problem = assert_problem(client.post("/v1/gradients/net", content=body, headers=JSON), 400)
    (err,) = problem["errors"]
    assert (err["path"], err["op_index"], err["op_type"]) == ("net.op[0]", 0, "Relu"), problem
    after_comma = body.replace(b'} \xff, {"type": "X"}', b'}, \xff{"type": "X"}')
    problem = assert_problem(client.post("/v1/gradients/net", content=after_comma,
                                         headers=JSON), 400)
    (err,) = problem["errors"]
    assert (err["path"], err["op_index"], err["op_type"]) == ("net.op[1]", 1, None), problem


def test_a_large_body_that_asks_for_verification_is_counted() -> None:
    """With ``verify`` the isolation process hands the work back to the server (it needs the
    execution workers); that run lost the request's context: no forward-op count, no
    request ID in its log lines (adversarial review)."""
    from tests.ops.test_metrics import delta, scrape

    n = 300
    pad = "p" * 400  # (blob names long enough for a body over 128 KiB: not served inline)
    ops = [{"type": "Tanh", "input": [f"b{k}{pad}"], "output": [f"b{k + 1}{pad}"]}
           for k in range(n)]
    body = json.dumps({"net": {"op": ops}, "ys": [f"b{n}{pad}"], "verify": {
        "inputs": [{"blob": f"b0{pad}", "random": {"shape": [2], "dtype": "float64"}}],
        "mode": "fast"}}).encode()
    assert len(body) > 128 * 1024
    settings = Settings(workers=1, large_body_bytes=4 * 1024, isolate_large_bodies=True)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        before = scrape(c.get)
        r = c.post("/v1/gradients/net", content=body, headers=JSON)
        assert r.status_code == 200, r.text
        assert r.json()["verify_report"]["passed"] is True
        after = scrape(c.get)
    assert delta(before, after, "netgrad_forward_ops_total", route="/v1/gradients/net") == n


def test_the_isolation_pool_preloads_the_module_of_the_work_it_serves() -> None:
    from app.api import isolation
    from app.api.routes import gradients

    assert gradients._gradient_of_net.__module__ == isolation.ISOLATED_ROUTES
    assert gradients._gradient_of_op.__module__ == isolation.ISOLATED_ROUTES
