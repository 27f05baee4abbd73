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


def floor_walk(net: NetDef, y: str) -> list[caffe2_pb2.OperatorDef]:
    """The least a backward pass in Python can do: the floor that netgrad's pass is timed against.

    One reverse walk over ``net.op``. Each op whose first output has a gradient gets one
    ``<type>Gradient`` OperatorDef. It reads the op's inputs and that output gradient, and
    writes ``<input>_grad`` for every input. One dict maps blob -> gradient name.

    It keeps no SSA versions, checks nothing, never accumulates and asks no maker, so its
    answer is **not** a correct gradient. It only measures what reading the forward names
    out of protobuf, building one protobuf op per forward op and one dictionary cost in
    CPython on this machine. The issue 10 growth target is judged beside it: see
    ``bench/README.md`` §5f.

    Args:
        net: forward NetDef, e.g. :func:`mlp`.
        y: the blob whose gradient seeds the walk (``"loss"`` for :func:`mlp`).

    Returns:
        The gradient OperatorDefs, last forward op's first.
    """
    grad = {y: y + "_grad"}
    out = []
    for op in reversed(net.op[:]):
        ins = op.input[:]
        g = grad.get(op.output[0]) if len(op.output) else None
        if g is None:
            continue
        gop = caffe2_pb2.OperatorDef()
        gop.type = op.type + "Gradient"
        gop.input.extend(ins)
        gop.input.append(g)
        g_in = [name + "_grad" for name in ins]
        gop.output.extend(g_in)
        gop.is_gradient_op = True
        for name, gi in zip(ins, g_in, strict=True):
            grad[name] = gi
        out.append(gop)
    return out
