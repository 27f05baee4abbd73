"""Dense gradients on request: each sparse ``GradientSlice`` of the grad map turned into a blob.

Source: Caffe2 turns a ``GradientSlice`` into a dense gradient with ``SparseToDense([indices,
values, var] -> [dense])`` where it must (``core.py``, mixing sparse and dense gradients of
one blob before summing, spec §2.6): rows ``indices[k]`` of a zero tensor shaped like ``var``
receive ``values[k]``, duplicate indices adding up. ``densify`` applies that to every
``GradientSlice`` in the grad map, after the backward pass, so a client that wants plain
tensors (an optimizer without sparse updates, a viewer) gets them.

Only blobs that no op of the net writes (inputs such as embedding tables) are densified: the
``SparseToDense`` reads the blob for its first dimension, and a blob the net writes may hold
a value of another shape by the time the gradient ops run. Others stay sparse, with an info
diagnostic saying why.
"""

from __future__ import annotations

from api_schemas import caffe2_pb2
from core.ir.backward import NetGradientResult
from core.types import Diagnostic, GradientSlice, GradValue

NetDef = caffe2_pb2.NetDef
OperatorDef = caffe2_pb2.OperatorDef


def _names(net: NetDef, into: set[str]) -> None:
    into.update(net.external_input)
    into.update(net.external_output)
    for op in net.op:
        into.update(op.input)
        into.update(op.output)
        for a in op.arg:
            if a.HasField("n"):
                _names(a.n, into)
            for sub in a.nets:
                _names(sub, into)


def _written(net: NetDef) -> set[str]:
    out: set[str] = set()
    for op in net.op:
        out.update(op.output)
    return out


def _free(base: str, taken: set[str]) -> str:
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


def densify(net: NetDef, res: NetGradientResult) -> NetGradientResult:
    """``res`` with every ``GradientSlice`` of a blob the net does not write made dense.

    One ``SparseToDense([indices, values, blob] -> [<blob>_grad_dense])`` per such blob is
    appended to the gradient ops (and to ``res.net`` when it was returned); its grad map entry
    becomes that dense blob. Deterministic: grad map order.

    Args:
        net: the forward net the gradient was generated for.
        res: the answer of :func:`core.api.gradient_for_net` for it.

    Returns:
        A new result (``res`` is not modified).
    """
    taken: set[str] = set()
    _names(net, taken)
    for op in res.grad_ops:
        taken.update(op.input)
        taken.update(op.output)
    written = _written(net)
    extra: list[OperatorDef] = []
    grad_map: dict[str, GradValue] = {}
    diagnostics = list(res.diagnostics)
    for blob, g in res.grad_map.items():
        if not isinstance(g, GradientSlice):
            grad_map[blob] = g
            continue
        if blob in written:
            grad_map[blob] = g
            diagnostics.append(Diagnostic(
                "info", "densify_skipped",
                f"the gradient of '{blob}' stays sparse: the net writes '{blob}', so its "
                "shape when the gradient ops run is not known to be the shape the slice "
                "refers to", blobs=(blob,)))
            continue
        dense = _free(f"{blob}_grad_dense", taken)
        op = OperatorDef(type="SparseToDense", input=[g.indices, g.values, blob],
                         output=[dense], is_gradient_op=True)
        extra.append(op)
        grad_map[blob] = dense
    if not extra:
        return NetGradientResult(list(res.grad_ops), grad_map, diagnostics, res.net)
    out_net = None
    if res.net is not None:
        out_net = NetDef()
        out_net.CopyFrom(res.net)
        out_net.op.extend(extra)
    return NetGradientResult([*res.grad_ops, *extra], grad_map, diagnostics, out_net)
