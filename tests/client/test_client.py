"""Issue 12: netgrad-client against a live server: every endpoint, binary and JSON, async,
typed errors, and a model-zoo net with an init_net."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest

from api_schemas import caffe2_pb2 as server_caffe2_pb2
from app.api import docs
from app.ui.examples import SQUEEZENET_VERIFY, random_init_net, weight_shapes
from core.proto import codec
from tests.api.live_server import free_port, live_server
from tests.client.conftest import CLIENT_SRC  # (puts the client on sys.path)

from netgrad import errors  # noqa: E402  isort: skip
from netgrad.client import AsyncClient, Client, random_input, tensor_input  # noqa: E402  isort: skip
from netgrad.proto import caffe2_pb2, netgrad_pb2  # noqa: E402  isort: skip

ENCODINGS = ["protobuf", "json"]


def _grad_map(entries: Any) -> dict[str, str]:
    return {e.blob: e.gradient.dense for e in entries}


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_gradients_op_do(server_url: str, encoding: Any) -> None:
    with Client(server_url, encoding=encoding) as c:
        res = c.gradients_op(docs.DO_OP, ["outer_Z_grad", None])
    assert isinstance(res, netgrad_pb2.OpGradientResponse)
    assert [g.WhichOneof("kind") for g in res.g_input] == ["dense", "dense", None]
    assert [g.dense for g in res.g_input[:2]] == ["outer_X_grad", "outer_Y_grad"]
    assert res.grad_ops[0].type == "Do"


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_gradients_net_with_messages_of_either_module(server_url: str, encoding: Any) -> None:
    net = codec.from_json_obj(docs.MLP_NET, server_caffe2_pb2.NetDef)  # the server's class
    with Client(server_url, encoding=encoding) as c:
        res = c.gradients_net(net, ["prob"], return_net=True)
        again = c.gradients_net(docs.MLP_NET, {"prob": None})
    assert _grad_map(res.grad_map)["fc_w"] == "fc_w_grad"
    assert len(res.net.op) == len(net.op) + len(res.grad_ops)
    assert res.grad_ops == again.grad_ops


def test_both_encodings_give_equal_messages(server_url: str) -> None:
    with Client(server_url) as pb, Client(server_url, encoding="json") as js:
        assert pb.gradients_net(docs.IF_TUTORIAL_NET, ["z"]) == \
            js.gradients_net(docs.IF_TUTORIAL_NET, ["z"])
        assert pb.run(docs.IF_TUTORIAL_NET, ["z", "y_grad"], ys=["z"],
                      inputs=[tensor_input("x", [], [0.5], "float32")]) == \
            js.run(docs.IF_TUTORIAL_NET, ["z", "y_grad"], ys=["z"],
                   inputs=[tensor_input("x", [], [0.5], "float32")])


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_verify_and_run(server_url: str, encoding: Any) -> None:
    inputs = [random_input("data", [2, 4], seed=1), random_input("fc_w", [3, 4], seed=2),
              tensor_input("fc_b", [3], [0.1, -0.2, 0.3])]
    with Client(server_url, encoding=encoding) as c:
        rep = c.verify(docs.MLP_NET, ["prob"], inputs=inputs, mode="full", atol=1e-6, rtol=1e-4)
        out = c.run(docs.IF_TUTORIAL_NET, ["z", "y_grad"], ys=["z"],
                    inputs=[tensor_input("x", [], [0.5], "float32")])
    assert rep.report.passed and {b.blob for b in rep.report.blobs} == {"data", "fc_w", "fc_b"}
    values = {o.blob: list(o.tensor.data) for o in out.outputs}
    assert values == {"z": [16.0], "y_grad": [8.0]}


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_operators_and_health(server_url: str, encoding: Any) -> None:
    with Client(server_url, encoding=encoding) as c:
        ops = c.operators()
        health = c.health()
    by = {o.type: o for o in ops.operators}
    assert by["Do"].gradient == "gradient" and by["Conv"].has_kernel
    assert health.status == "ok" and health.workers == 1


def test_async_client_every_endpoint(server_url: str) -> None:
    async def main() -> list[Any]:
        async with AsyncClient(server_url) as c:
            return list(await asyncio.gather(
                c.gradients_op(docs.DO_OP, ["outer_Z_grad", None]),
                c.gradients_net(docs.MLP_NET, ["prob"]),
                c.verify(docs.MLP_NET, ["prob"], inputs=[
                    random_input("data", [2, 4]), random_input("fc_w", [3, 4]),
                    random_input("fc_b", [3])]),
                c.run(docs.MLP_NET, ["prob"], inputs=[
                    random_input("data", [2, 4]), random_input("fc_w", [3, 4]),
                    random_input("fc_b", [3])]),
                c.operators(), c.health()))

    op, net, ver, run, ops, health = asyncio.run(main())
    with Client(server_url) as c:
        assert op == c.gradients_op(docs.DO_OP, ["outer_Z_grad", None])
        assert net == c.gradients_net(docs.MLP_NET, ["prob"])
    assert ver.report.passed and list(run.outputs[0].tensor.shape) == [2, 3]
    assert ops.operators and health.status == "ok"


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_missing_inputs_is_a_typed_400_with_every_blob(server_url: str, encoding: Any) -> None:
    with Client(server_url, encoding=encoding) as c, \
            pytest.raises(errors.BadRequestError) as info:
        c.verify(docs.MLP_NET, ["prob"])
    err = info.value
    assert err.status == 400 and err.code == "invalid_request"
    assert [e.blobs for e in err.errors] == [("data",), ("fc_w",), ("fc_b",)]
    assert all(e.code == "missing_input" and e.path == "op[0]:FC" for e in err.errors)


def test_unknown_op_type_is_a_typed_422(server_url: str) -> None:
    net = copy.deepcopy(docs.MLP_NET)
    net["op"][1]["type"] = "Reluu"
    with Client(server_url) as c, pytest.raises(errors.UnprocessableError) as info:
        c.gradients_net(net, ["prob"])
    (item,) = info.value.errors
    assert item.op_index == 1 and item.op_type == "Reluu" and "Did you mean Relu" in \
        item.message


def test_no_worker_is_a_typed_503_and_no_server_a_transport_error() -> None:
    with live_server({"NETGRAD_WORKERS": "0"}) as url, Client(url) as c, \
            pytest.raises(errors.ServiceUnavailableError) as info:
        c.run(docs.MLP_NET, ["prob"])
    assert info.value.status == 503 and info.value.errors[0].code == "run_unavailable"
    with Client(f"http://127.0.0.1:{free_port()}", timeout=5) as c, \
            pytest.raises(errors.TransportError):
        c.health()


def test_bad_arguments_are_refused_before_sending() -> None:
    with Client("http://127.0.0.1:9") as c:
        with pytest.raises(TypeError):
            c.gradients_net(docs.MLP_NET, "prob")
        with pytest.raises(TypeError):
            c.gradients_net(42, ["prob"])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Client(encoding="xml")  # type: ignore[arg-type]


def test_squeezenet_with_init_net_through_the_client(server_url: str,
                                                     shared_dir: Path) -> None:
    data = (shared_dir / "realnets" / "caffe2_test_assets__squeeze_predict_net.pb").read_bytes()
    net = caffe2_pb2.NetDef.FromString(data)
    init = random_init_net(weight_shapes(codec.from_binary(data, server_caffe2_pb2.NetDef)))
    sq = SQUEEZENET_VERIFY
    with Client(server_url) as c:
        res = c.verify(net, sq["ys"], init_net=init,
                       inputs=[random_input("data", sq["data_shape"], seed=11)],
                       mode="fast", check=sq["check"], passes=sq["passes"], atol=sq["atol"],
                       rtol=sq["rtol"])
    assert [b.blob for b in res.report.blobs] == sq["check"]
    assert res.report.passed


_DEEP_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
from netgrad.client import Client
net = json.loads(sys.argv[3])
with Client(sys.argv[2], encoding="protobuf") as c:
    res = c.gradients_net(net, ["Z"])
depth, ops = 0, list(res.grad_ops)
while ops:  # follow the gradient Do's sub-net down
    depth += 1
    nets = [a.n for o in ops for a in o.arg if a.HasField("n")]
    ops = [o for n in nets for o in n.op]
print(depth)
"""


def test_a_deep_binary_answer_decodes_without_the_servers_upb_setting(server_url: str) -> None:
    # A client process that never imports netgrad's server code keeps upb's limit of 100
    # nested messages (about 33 sub-net levels); the server answers up to 128 levels. The
    # client asks again for JSON (walkthrough, stop 21: DecodeError at 40 levels).
    import json
    import subprocess
    import sys

    from tests.api.helpers import nested_do_net

    levels = 40
    run = subprocess.run(
        [sys.executable, "-c", _DEEP_SCRIPT, str(CLIENT_SRC), server_url,
         json.dumps(nested_do_net(levels))],
        capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert int(run.stdout.strip()) == levels + 1  # the gradient Do levels, Add's innermost
