"""Regressions of stop 24.

Kernel failures on bool, empty or 0-d tensors name the input and what helps (they gave
NumPy's text); ``Softmax`` of an empty tensor is empty; a ``RecurrentNetworkGradient`` over
zero steps raised ``IndexError``.

``densify``'s ``SparseToDense`` took its first dimension from the forward blob, read after
the forward net: a later op that overwrote the blob with another shape (``Concat([W, W]) ->
W``) gave a dense gradient of the wrong shape with a 200. It now takes the shape from one
of the blob's dense gradients, which is shaped like the blob at the version differentiated.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from api_schemas import caffe2_pb2
from app.main import create_app
from app.settings import Settings
from core.api import gradient_for_net
from core.errors import NetgradError, VersionMismatchError
from core.executor.executor import execute
from core.registry import make_arg, make_op
from core.types import GradientSlice
from core.verify import materialize_inputs
from core.verify.checker import InputSpec, VerifyOptions, verify_net
from tests.core.control.rnn_cases import simple_feeds, simple_rnn


def _overwritten_table(extra_dense: bool) -> tuple[caffe2_pb2.NetDef, list[str]]:
    net = caffe2_pb2.NetDef(name="t")
    net.op.extend([make_op("Gather", ["W", "I"], ["G"]), make_op("Scale", ["W"], ["S"])])
    ys = ["G", "S"]
    if extra_dense:
        net.op.append(make_op("Tanh", ["W"], ["R"]))
        ys.append("R")
    cat = make_op("Concat", ["W", "W"], ["W", "info"])
    cat.arg.append(make_arg("axis", 0))
    net.op.append(cat)
    return net, ys


@pytest.mark.parametrize("extra_dense", [False, True])
def test_densify_takes_the_shape_from_a_dense_gradient(extra_dense: bool) -> None:
    net, ys = _overwritten_table(extra_dense)
    res = gradient_for_net(net, dict.fromkeys(ys), densify=True)
    s2d = [op for op in res.grad_ops if op.type == "SparseToDense"]
    assert len(s2d) == 1 and s2d[0].input[2] != "W"
    written = {o for op in res.grad_ops[: list(res.grad_ops).index(s2d[0])] for o in op.output}
    assert s2d[0].input[2] in written  # the shape source exists when SparseToDense runs
    rng = np.random.default_rng(20261202)
    opts = VerifyOptions(inputs=[InputSpec.from_array("W", rng.normal(size=(4, 3))),
                                 InputSpec.from_array("I", np.array([0, 2, 2]))],
                         mode="full", check=["W"])
    result = verify_net(net, ys, opts, densify=True)
    assert result.report.passed, result.report
    assert [b.blob for b in result.report.blobs] == ["W"]


def _gather_scale_gather() -> caffe2_pb2.NetDef:
    """``E`` read by a Gather, scaled in place, read by a Gather again."""
    net = caffe2_pb2.NetDef(name="t")
    net.op.extend([make_op("Gather", ["E", "I0"], ["Y0"]),
                   make_op("Scale", ["E"], ["E"], [make_arg("scale", 0.5)]),
                   make_op("Gather", ["E", "I1"], ["Y1"]),
                   make_op("Tanh", ["Y1"], ["T1"])])
    return net


def test_a_sparse_output_gradient_into_a_dense_maker_says_what_helps() -> None:
    with pytest.raises(NetgradError) as err:
        gradient_for_net(_gather_scale_gather(), {"Y0": None, "T1": None})
    p = err.value.problems[0]
    assert (p.code, p.op_index, p.op_type, p.blobs) == ("sparse_output_gradient", 1, "Scale",
                                                         ("E",))
    assert '"densify": true' in p.message and "EnsureDense(E)" in p.message


def test_densify_makes_a_sparse_output_gradient_dense_for_a_dense_maker() -> None:
    net = _gather_scale_gather()
    res = gradient_for_net(net, {"Y0": None, "T1": None}, densify=True)
    s2d = [op for op in res.grad_ops if op.type == "SparseToDense"]
    assert [list(op.input)[2] for op in s2d][0] == "E"  # E at Scale's output version
    assert sum(d.code == "densified_gradient" for d in res.diagnostics) == 2
    rng = np.random.default_rng(20261203)
    opts = VerifyOptions(inputs=[InputSpec.from_array("E", rng.normal(size=(4, 3))),
                                 InputSpec.from_array("I0", np.array([1, 1, 3])),
                                 InputSpec.from_array("I1", np.array([0, 1]))],
                         mode="full", check=["E"])
    result = verify_net(net, ["Y0", "T1"], opts, densify=True)
    assert result.report.passed, result.report


def test_densify_refuses_a_dense_maker_whose_output_was_overwritten() -> None:
    net = _gather_scale_gather()
    cat = make_op("Concat", ["E", "E"], ["E", "info"], [make_arg("axis", 0)])
    net.op.append(cat)  # E (Scale's output, SparseToDense's shape source) overwritten
    with pytest.raises(VersionMismatchError) as err:
        gradient_for_net(net, {"Y0": None, "T1": None}, densify=True)
    assert err.value.problems[0].op_type == "Scale"


# --- kernel failures say what helps, not Python's text ----------------------------------------
def _run_one(op: caffe2_pb2.OperatorDef, feeds: dict[str, np.ndarray]) -> str:
    net = caffe2_pb2.NetDef(name="t")
    net.op.append(op)
    with pytest.raises(NetgradError) as err:
        execute(net, feeds)
    p = err.value.problems[0]
    assert (p.op_index, p.op_type) == (0, op.type)
    return err.value.message


@pytest.mark.parametrize(("op", "feeds", "says"), [
    (make_op("ReduceBackMax", ["X"], ["Y"]), {"X": np.array([[True, False]])},
     "input 0 ('X') is bool, and ReduceBackMax takes numbers: Cast it first"),
    (make_op("SoftmaxFp16", ["X"], ["Y"]), {"X": np.array([[True]])},
     "input 0 ('X') is bool"),
    (make_op("GatherPadding", ["X", "L"], ["P"]),
     {"X": np.float64(1.0), "L": np.array([1], dtype=np.int32)},
     "input 0 ('X') is a scalar (0-d), and GatherPadding needs at least one dimension"),
])
def test_kernel_failures_name_the_input_and_what_helps(
        op: caffe2_pb2.OperatorDef, feeds: dict[str, np.ndarray], says: str) -> None:
    message = _run_one(op, feeds)
    assert says in message
    assert "Error:" not in message  # no Python exception text


def test_softmax_of_an_empty_tensor_is_empty() -> None:
    net = caffe2_pb2.NetDef(name="t")
    net.op.append(make_op("Softmax", ["X"], ["Y"]))
    out = execute(net, {"X": np.zeros((3, 0))})
    assert out["Y"].shape == (3, 0)


@pytest.mark.parametrize("loss_on", ["all", "last"])
def test_rnn_gradient_of_an_empty_sequence(loss_on: str) -> None:
    """T = 0 steps: it raised IndexError inside RecurrentNetworkGradient (a 422 with Python
    text); now the parameter and input gradients are zero and h0's comes from h_t_last."""
    feeds = materialize_inputs(simple_feeds(t=4))
    feeds["x"] = feeds["x"][:0]
    opts = VerifyOptions(inputs=[InputSpec.from_array(k, v) for k, v in feeds.items()],
                         mode="full")
    result = verify_net(simple_rnn(loss_on=loss_on), ["loss"], opts)
    assert result.report.passed, result.report
    assert [b.blob for b in result.report.blobs] == ["x", "h0", "W", "b"]


# --- adversarial review, stop 24 --------------------------------------------------------------
def _dense_check(net: caffe2_pb2.NetDef, ys: list[str], feeds: dict[str, np.ndarray],
                 check: list[str], densify: bool = False) -> None:
    opts = VerifyOptions(inputs=[InputSpec.from_array(k, v) for k, v in feeds.items()],
                         mode="full", check=check)
    result = verify_net(net, ys, opts, densify=densify)
    assert result.report.passed, result.report
    assert sorted(b.blob for b in result.report.blobs) == sorted(check)


def test_two_sparse_readers_and_a_dense_one_keep_their_own_values() -> None:
    """Both SparseLengthsSum gradients wrote ``E_grad_values``; with densify the first
    SparseToDense read the second reader's values (a 200 with dE wrong by 3.2)."""
    net = caffe2_pb2.NetDef(name="t")
    net.op.extend([make_op("SparseLengthsSum", ["E", "I1", "L1"], ["A"]),
                   make_op("SparseLengthsSum", ["E", "I2", "L2"], ["B"]),
                   make_op("Tanh", ["E"], ["T"])])
    res = gradient_for_net(net, {"A": None, "B": None, "T": None}, densify=True)
    s2d = [op for op in res.grad_ops if op.type == "SparseToDense"]
    assert len({op.input[1] for op in s2d}) == 2  # each reads its own values
    rng = np.random.default_rng(20261204)
    _dense_check(net, ["A", "B", "T"],
                 {"E": rng.normal(size=(4, 3)), "I1": np.array([0, 2, 2]),
                  "L1": np.array([1, 2], np.int32), "I2": np.array([1, 3, 3]),
                  "L2": np.array([3], np.int32)}, ["E"], densify=True)


def test_a_later_input_position_without_gradient_keeps_the_earlier_one() -> None:
    """SparseToDense(I, V, V): V's gradient comes from position 1 only; the None of
    position 2 replaced it, and X got no gradient (a 200)."""
    net = caffe2_pb2.NetDef(name="t")
    net.op.extend([make_op("Tanh", ["X"], ["V"]), make_op("SparseToDense", ["I", "V", "V"], ["D"])])
    res = gradient_for_net(net, {"D": None})
    assert res.grad_map["X"] == "X_grad" and res.grad_map["V"] == "V_grad"
    rng = np.random.default_rng(20261205)
    _dense_check(net, ["D"], {"X": rng.normal(size=(3, 2)), "I": np.array([2, 0, 2])}, ["X"])


def test_a_sparse_seed_named_like_the_dense_gradient_of_its_blob_is_refused() -> None:
    """``ys = {F: GradientSlice(si, F_grad)}``: TanhGradient wrote F_grad over the seed's
    values before SparseToDense read them (a 200, dE wrong by 3.2)."""
    net = caffe2_pb2.NetDef(name="t")
    net.op.extend([make_op("Scale", ["E"], ["F"]), make_op("Tanh", ["F"], ["T"])])
    for seed in (GradientSlice("si", "F_grad"), GradientSlice("F_grad", "sv"),
                 GradientSlice("si", "E_grad_values")):
        with pytest.raises(NetgradError) as err:
            gradient_for_net(net, {"F": seed, "T": "gT"}, densify=True)
        p = err.value.problems[0]
        assert p.code == "seed_name_collision" and "F_seed_values" in p.message
    res = gradient_for_net(net, {"F": GradientSlice("F_seed_indices", "F_seed_values"),
                                 "T": "gT"}, densify=True)
    assert res.grad_map["E"] == "E_grad"
    dense = gradient_for_net(net, {"F": "F_grad", "T": "gT"})  # a dense one is still fine
    assert dense.grad_map["E"] == "E_grad"


def test_gather_with_wrap_indices_is_refused() -> None:
    """Its gradient named the raw (negative) indices: SparseToDense failed on them (an
    unrunnable 200) and a plain slice named no row."""
    for extra in ([], [make_arg("dense_gradient", 1)]):
        net = caffe2_pb2.NetDef(name="t")
        net.op.append(make_op("Gather", ["E", "I"], ["G"], [make_arg("wrap_indices", 1), *extra]))
        with pytest.raises(NetgradError) as err:
            gradient_for_net(net, {"G": None})
        p = err.value.problems[0]
        assert (p.code, p.op_index, p.op_type) == ("gather_wrap_indices", 0, "Gather")
        assert "non-negative" in p.message


def test_the_checker_refuses_a_slice_naming_no_row() -> None:
    """NumPy's add.at wrapped a negative slice index, so the checker passed a slice that no
    Caffe2 consumer applies."""
    from core.executor.workspace import Workspace
    from core.verify.checker import _analytic

    ws = Workspace()
    ws.set("I", np.array([-1, 0]))
    ws.set("V", np.ones((2, 3)))
    x = np.zeros((4, 3))
    with pytest.raises(NetgradError) as err:
        _analytic(ws, "E", GradientSlice("I", "V"), x)
    assert "names rows [-1, 0], outside [0, 4)" in err.value.message
    ws.set("I", np.array([3, 0]))
    assert _analytic(ws, "E", GradientSlice("I", "V"), x)[[0, 3]].sum() == 6.0


def test_recompute_is_advised_only_when_it_works() -> None:
    """An in-place chain on an RNN output: the advice to send recompute=true led to a second
    refusal (the RNN's gradient reads its output by name); it now says so at once."""
    net = simple_rnn(loss_on="all")
    net.op.insert(1, make_op("Scale", ["h/h_t_all"], ["h/h_t_all"]))
    net.op.insert(1, make_op("Tanh", ["h/h_t_all"], ["h/h_t_all"]))
    with pytest.raises(VersionMismatchError) as err:
        gradient_for_net(net, ["loss"])
    msg = err.value.problems[0].message
    assert "send recompute=true" not in msg
    assert "recompute=true does not help here: RecurrentNetworkGradient reads" in msg
    assert "To fix it, write the result of op[2]:Scale to a new blob" in msg
    # where recompute works, the advice stays
    plain = caffe2_pb2.NetDef(name="t")
    plain.op.extend([make_op("Tanh", ["x"], ["y"]), make_op("Scale", ["y"], ["y"])])
    with pytest.raises(VersionMismatchError) as err:
        gradient_for_net(plain, ["y"])
    assert "send recompute=true" in err.value.problems[0].message
    assert gradient_for_net(plain, ["y"], recompute=True).grad_map["x"] == "x_grad"


# --- decode problems name the op they sit in -------------------------------------------------
@pytest.fixture(scope="module")
def gen_client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(workers=0))) as client:
        yield client


def _errors(client: TestClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    r = client.post("/v1/gradients/net", json=body)
    assert r.status_code == 400, r.text
    errors: list[dict[str, Any]] = r.json()["errors"]
    return errors


def test_a_json_decode_problem_names_its_op_index_and_type(gen_client: TestClient) -> None:
    relu = {"type": "Relu", "input": ["x"], "outptu": ["y"]}
    (one,) = _errors(gen_client, {"net": {"op": [relu]}, "ys": ["y"]})
    assert (one["op_index"], one["op_type"], one["path"]) == (0, "Relu", "net.op[0].outptu")
    scale = {"type": "Scale", "input": ["y"], "output": ["z"],
             "arg": [{"name": "scale", "f": "abc"}]}
    ok_relu = {"type": "Relu", "input": ["x"], "output": ["y"]}
    (typed,) = _errors(gen_client, {"net": {"op": [ok_relu, scale]}, "ys": ["z"]})
    assert (typed["op_index"], typed["op_type"]) == (1, "Scale")
    inner = {"type": "Do", "input": ["x", "W"], "output": ["y", "W"],
             "arg": [{"name": "net", "n": {"op": [ok_relu, relu]}}]}
    (nested,) = _errors(gen_client, {"net": {"op": [inner]}, "ys": ["y"]})
    assert (nested["op_index"], nested["op_type"]) == (1, "Relu")  # the innermost op
    assert nested["path"] == "net.op[0].arg[0].n.op[1].outptu"


def test_a_text_format_unknown_field_gets_a_did_you_mean(gen_client: TestClient) -> None:
    body = 'net { op { type: "Relu" input: "x" outptu: "y" } } ys { blob: "y" }'
    r = gen_client.post("/v1/gradients/net", content=body,
                        headers={"content-type": "text/x-protobuf"})
    assert r.status_code == 400
    assert "did you mean 'output'?" in r.json()["detail"]


# --- adversarial review 2, stop 24: densify before a pass-through maker -----------------------
@pytest.mark.parametrize("tanh_first", [False, True])
def test_densify_before_a_pass_through_sum(tanh_first: bool) -> None:
    """Sum(X, X) -> Y; Gather(Y) gave half of dX, and Sum(A, B) with B read again gave A
    B's gradient (or a blob no op wrote): the densified slice was an op output of Sum's own
    gradient, which its pass-through maker handed to every input."""
    twice = caffe2_pb2.NetDef(name="t")
    twice.op.extend([make_op("Sum", ["X", "X"], ["Y"]), make_op("Gather", ["Y", "I"], ["Z"])])
    rng = np.random.default_rng(20261206)
    _dense_check(twice, ["Z"], {"X": rng.normal(size=(4, 3)), "I": np.array([0, 2, 2])},
                 ["X"], densify=True)
    shared = caffe2_pb2.NetDef(name="t")
    ops = [make_op("Sum", ["A", "B"], ["S"]), make_op("Gather", ["S", "I"], ["Z"])]
    tanh = make_op("Tanh", ["B"], ["Q"])
    shared.op.extend([tanh, *ops] if tanh_first else [*ops, tanh])
    _dense_check(shared, ["Z", "Q"], {"A": rng.normal(size=(4, 3)), "B": rng.normal(size=(4, 3)),
                                      "I": np.array([0, 2, 2])}, ["A", "B"], densify=True)


@pytest.mark.parametrize("kind", ["Do", "If"])
def test_densify_makes_a_slice_into_a_control_op_dense(kind: str) -> None:
    """A Gather of a Do/If output: the slice was refused at the control op even with
    densify (review 2, stop 24), although the README said densify makes such a slice dense."""
    from core.control.lowering import add_do_op, add_if_op

    net = caffe2_pb2.NetDef(name="t")
    body = caffe2_pb2.NetDef(name="b")
    body.op.append(make_op("Tanh", ["X"], ["Y"]))
    if kind == "Do":
        add_do_op(net, ["X", "Y"], body)
    else:
        add_if_op(net, "c", ["c", "X", "Y"], body)
    net.op.append(make_op("Gather", ["Y", "I"], ["Z"]))
    with pytest.raises(NetgradError) as err:
        gradient_for_net(net, ["Z"])
    assert err.value.problems[0].code == "sparse_through_control_op"
    assert '"densify": true' in err.value.problems[0].message
    feeds = {"X": np.random.default_rng(20261207).normal(size=(4, 3)), "I": np.array([0, 2, 2])}
    if kind == "If":
        feeds["c"] = np.array(True)
    _dense_check(net, ["Z"], feeds, ["X"], densify=True)


# --- adversarial review 3, stop 24 --------------------------------------------------------------
def test_a_cancelled_queued_job_frees_its_request() -> None:
    """The thread pool's work item held the request of a cancelled queued job until a
    thread reached it: submit + cancel grew memory past the byte budget."""
    import sys
    import threading

    from core.executor.jobstore import LocalJobs

    release = threading.Event()

    def work(kind: str, request: bytes, *rest: Any) -> tuple[str, bytes]:
        release.wait(10)
        return "done", b""

    store = LocalJobs(None, work, None, ttl_s=60.0, threads=1,  # type: ignore[arg-type]
                      max_bytes=10_000)
    try:
        store.submit("run", b"busy")  # holds the only thread
        body = bytes(5000)
        alone = sys.getrefcount(body)
        rec = store.submit("run", body)
        assert sys.getrefcount(body) > alone  # the store holds it while queued
        cancelled = store.cancel(rec.id)
        assert cancelled is not None and cancelled.status == "cancelled"
        assert sys.getrefcount(body) == alone  # freed at once, not when a thread gets to it
        assert store._records.bytes == 4  # the busy job's request only
    finally:
        release.set()
        store.close()


@pytest.mark.parametrize(("op", "says"), [
    ("Relu", "net.op[0]: expected a JSON object (OperatorDef), got a string"),
    ([1, 2], "net.op[0]: expected a JSON object (OperatorDef), got an array"),
])
def test_a_value_that_is_not_an_object_is_named_for_what_it_is(
        gen_client: TestClient, op: Any, says: str) -> None:
    """json_format read a string where an op belongs letter by letter ("net.op[0].R:
    unknown field"), and an array of numbers as "got a number"."""
    (p,) = _errors(gen_client, {"net": {"op": [op]}, "ys": ["y"]})
    assert p["message"] == says and p["op_index"] == 0 and p["path"] == "net.op[0]"


def test_a_text_field_of_the_wrong_type_names_its_op(gen_client: TestClient) -> None:
    ops = [{"type": "Relu", "input": ["x"], "output": ["y"]},
           {"type": "Scale", "input": ["y"], "output": ["z"], "arg": [{"name": "a", "s": 5}]}]
    (p,) = _errors(gen_client, {"net": {"op": ops}, "ys": ["z"]})
    assert (p["op_index"], p["op_type"]) == (1, "Scale")
    assert p["message"].endswith("got a number")


def test_a_makers_own_partial_named_like_a_forward_blob_is_not_rebound() -> None:
    """Long fuzz, seed 20261213: ``Sqrt(p3) -> p3_grad`` (a forward blob named like p3's
    gradient), then ``p3_grad`` scaled in place. SqrtGradient's Div read its own partial
    ``p3_grad`` and the forward output of that name; recompute rebound both to the
    recomputed output, a 200 with p3's gradient 1.0 against -0.23. Now the partial is the
    maker's, and writing over the forward blob is a gradient_name_collision."""
    from tests.fuzz.property import check_outcome

    net = caffe2_pb2.NetDef(name="fuzz")
    net.op.extend([make_op("Scale", ["p1"], ["p1"], [make_arg("scale", 0.5)]),
                   make_op("Sum", ["p1", "p1"], ["p1_grad"]),
                   make_op("Sqrt", ["p3"], ["p3_grad"]),
                   make_op("Scale", ["p3_grad"], ["p3_grad"], [make_arg("scale", 0.5)]),
                   make_op("Sum", ["p3_grad", "p3_grad"], ["v5"]),
                   make_op("Scale", ["v5"], ["v6"], [make_arg("scale", -0.5)])])
    inputs = [InputSpec.from_array("p1", np.zeros((2, 2))),
              InputSpec.from_array("p3", np.full((2, 2), 0.5))]
    for recompute in (True, False):
        with pytest.raises(NetgradError) as err:
            gradient_for_net(net, ["v6"], recompute=recompute)
        assert err.value.problems[0].code == "gradient_name_collision"
        assert check_outcome(net, ["v6"], inputs, recompute) == "4xx"


def test_a_net_body_on_the_op_route_points_to_the_net_route(gen_client: TestClient) -> None:
    """It suggested the nested field ``op.arg.nets`` for ``net`` (final check, stop 24)."""
    r = gen_client.post("/v1/gradients/op", json={"net": {"op": []}, "ys": ["y"]})
    assert r.status_code == 400
    assert "POST /v1/gradients/net" in r.json()["detail"]
    assert "op.arg.nets" not in r.text
