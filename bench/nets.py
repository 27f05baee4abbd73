"""Synthetic NetDefs for the benchmarks: an FC+Relu MLP and nested control flow."""

from __future__ import annotations

from api_schemas import caffe2_pb2
from core.control.lowering import add_if_op, add_while_op
from core.registry import make_arg, make_op

NetDef = caffe2_pb2.NetDef


def mlp(n_layers: int) -> NetDef:
    """``n_layers`` of ``FC`` + in-place ``Relu``, then ``Softmax`` and ``AveragedLoss``."""
    net = NetDef()
    net.name = f"mlp{n_layers}"
    x = "data"
    for i in range(n_layers):
        y = f"fc{i}"
        net.op.append(make_op("FC", [x, f"fc{i}_w", f"fc{i}_b"], [y]))
        net.op.append(make_op("Relu", [y], [y]))
        x = y
    net.op.append(make_op("Softmax", [x], ["prob"]))
    net.op.append(make_op("AveragedLoss", ["prob"], ["loss"]))
    return net


def nested_control(depth: int) -> NetDef:
    """``depth`` levels of alternating If / While / Do around ``y = Scale(x)``.

    Each level is lowered the way Caffe2's ``add_if_op`` / ``add_while_op`` do it, so an If
    level is an If with a Do-wrapped branch, a While level a While whose body is a Do with
    ``copy_external_blobs``, and a Do level a bare Do.
    """
    body = NetDef()
    body.name = "body0"
    body.op.append(make_op("Scale", ["x"], ["y"], [make_arg("scale", 2.0)]))
    scope = ["x", "y", "c"]
    for level in range(depth):
        outer = NetDef()
        outer.name = f"level{level}"
        kind = level % 3
        if kind == 0:
            add_if_op(outer, "c", scope, body, None)
        elif kind == 1:
            add_while_op(outer, "c", scope, body, None)
        else:
            ws = f"level{level}/ws"
            outer.op.append(make_op("CreateScope", [], [ws]))
            outer.op.append(
                make_op(
                    "Do",
                    ["x", ws],
                    ["y", ws],
                    [
                        make_arg("net", body),
                        make_arg("inner_blobs", ["x", "y"]),
                        make_arg("outer_blobs_idx", [0, 1]),
                    ],
                )
            )
        body = outer
    return body
