"""Signatures of the issue-8c gradient makers (Caffe2's gradient-op types, inputs, outputs,
arguments) and their refusals, beyond what the numeric table checks."""

from __future__ import annotations

import numpy as np
import pytest

from api_schemas import caffe2_pb2
from core.api import gradient_for_net
from core.errors import GradientError, NetgradError
from core.ops import load_all
from core.registry import get_gradient_for_op, make_arg, make_op
from core.verify import InputSpec, VerifyOptions, verify_net

load_all()


def _args(op: caffe2_pb2.OperatorDef) -> dict[str, object]:
    out: dict[str, object] = {}
    for a in op.arg:
        out[a.name] = a.f if a.HasField("f") else a.i if a.HasField("i") else a.s
    return out


@pytest.mark.parametrize(
    ("ta", "tb", "da", "db"),
    [
        (0, 0, (["dY", "B"], {"trans_b": 1}), (["A", "dY"], {"trans_a": 1})),
        (0, 1, (["dY", "B"], {}), (["dY", "A"], {"trans_a": 1})),
        (1, 0, (["B", "dY"], {"trans_b": 1}), (["A", "dY"], {})),
        (
            1,
            1,
            (["B", "dY"], {"trans_a": 1, "trans_b": 1}),
            (["dY", "A"], {"trans_a": 1, "trans_b": 1}),
        ),
    ],
)
def test_batch_matmul_gradient_table(ta: int, tb: int, da: tuple, db: tuple) -> None:
    op = make_op(
        "BatchMatMul", ["A", "B"], ["Y"], [make_arg("trans_a", ta), make_arg("trans_b", tb)]
    )
    ops, g = get_gradient_for_op(op, ["dY"])
    assert [o.type for o in ops] == ["BatchMatMul", "BatchMatMul"]
    assert (list(ops[0].input), _args(ops[0]), list(ops[0].output)) == (da[0], da[1], ["A_grad"])
    assert (list(ops[1].input), _args(ops[1]), list(ops[1].output)) == (db[0], db[1], ["B_grad"])
    assert g == ["A_grad", "B_grad"]


def test_batch_matmul_broadcast_has_no_gradient() -> None:
    op = make_op("BatchMatMul", ["A", "B"], ["Y"], [make_arg("broadcast", 1)])
    with pytest.raises(GradientError, match="broadcast=1"):
        get_gradient_for_op(op, ["dY"])


def test_layer_norm_signatures() -> None:
    plain = make_op("LayerNorm", ["X"], ["Y", "m", "s"], [make_arg("axis", 2)])
    ops, g = get_gradient_for_op(plain, ["dY", None, None])
    assert ops[0].type == "LayerNormGradient"
    assert list(ops[0].input) == ["dY", "Y", "m", "s", "X"]
    assert list(ops[0].output) == ["X_grad"] and _args(ops[0]) == {"axis": 2}
    affine = make_op(
        "LayerNorm", ["X", "g", "b"], ["Y", "m", "s"], [make_arg("elementwise_affine", 1)]
    )
    ops, g = get_gradient_for_op(affine, ["dY", None, None])
    assert list(ops[0].input) == ["dY", "Y", "m", "s", "X", "g"]
    assert g == ["X_grad", "g_grad", "b_grad"]


def test_norm_makers_read_what_caffe2_reads() -> None:
    gn = make_op("GroupNorm", ["X", "g", "b"], ["Y", "mu", "rsig"], [make_arg("group", 2)])
    ops, _ = get_gradient_for_op(gn, ["dY", None, None])
    assert (ops[0].type, list(ops[0].input)) == (
        "GroupNormGradient",
        ["dY", "X", "g", "b", "mu", "rsig"],
    )
    inst = make_op("InstanceNorm", ["X", "s", "b"], ["Y", "mean"])
    ops, g = get_gradient_for_op(inst, ["dY", None])
    assert list(ops[0].input) == ["X", "s", "b", "dY", "mean"]
    assert g == ["X_grad", "s_grad", "b_grad"]
    rms = make_op("RMSNorm", ["X", "g", "b"], ["Y", "rrms"])
    ops, _ = get_gradient_for_op(rms, ["dY", None])
    assert list(ops[0].input) == ["dY", "X", "g", "rrms"]
    frozen = make_op("AffineChannel", ["X", "s", "b"], ["X"])
    ops, g = get_gradient_for_op(frozen, ["dX"])
    assert list(ops[0].input) == ["dX", "s"] and g == ["X_grad", None, None]


def test_group_norm_without_statistics_is_refused() -> None:
    op = make_op("GroupNorm", ["X", "g", "b"], ["Y"])
    with pytest.raises(GradientError, match="mean and rstd"):
        get_gradient_for_op(op, ["dY"])


def test_spatial_softmax_with_loss_gradient_drops_scale() -> None:
    op = make_op(
        "SpatialSoftmaxWithLoss",
        ["X", "T", "w"],
        ["P", "loss"],
        [make_arg("scale", 2.0), make_arg("order", "NCHW")],
    )
    ops, g = get_gradient_for_op(op, [None, "dloss"])
    assert ops[0].type == "SpatialSoftmaxWithLossGradient"
    assert list(ops[0].input) == ["X", "T", "w", "P", "dloss"]
    assert "scale" not in _args(ops[0]) and _args(ops[0])["order"] == b"NCHW"
    with pytest.raises(GradientError, match="probabilities"):
        get_gradient_for_op(op, ["dP", "dloss"])


def test_learnable_in_place_affine_channel_is_never_a_silent_wrong_gradient() -> None:
    """Caffe2 would read the overwritten X for dscale; netgrad refuses or recomputes."""
    net = caffe2_pb2.NetDef()
    net.op.append(make_op("Tanh", ["data"], ["X"]))
    net.op.append(make_op("AffineChannel", ["X", "s", "b"], ["X"], [make_arg("is_learnable", 1)]))
    net.op.append(make_op("AveragedLoss", ["X"], ["loss"]))
    with pytest.raises(NetgradError):
        gradient_for_net(net, ["loss"])
    rng = np.random.default_rng(3)
    opts = VerifyOptions(
        inputs=[
            InputSpec.from_array("data", rng.standard_normal((2, 3, 2))),
            InputSpec.from_array("s", rng.standard_normal(3)),
            InputSpec.from_array("b", rng.standard_normal(3)),
        ],
        mode="full",
    )
    result = verify_net(net, ["loss"], opts, recompute=True)
    assert result.report.passed, result.report
