"""Opt-in densification where sparse and dense gradients of one blob meet (``densify``).

Caffe2 refuses to accumulate a ``GradientSlice`` with a dense gradient of the same blob
version ("Automatic aggregation of a mix of sparse and dense gradients is not supported
yet", ``core.py`` ``_MakeSumOps``; spec §2.7); netgrad keeps that as the default. With
``densify`` the pass turns each sparse part into a dense tensor shaped like the blob with
Caffe2's own ``SparseToDense([indices, values, like] -> dense)`` (rows of duplicate indices
add up; the first dimension is taken from ``like``) and sums them with the dense parts as
usual. ``like`` is one of the blob's dense gradients, which has the blob's shape at the
version being differentiated: the forward blob itself is read after the forward net, where a
later op may have overwritten it with another shape (a ``Concat`` over it doubled the rows;
review, stop 24). A diagnostic ``densified_gradient`` names the blob and what it costs: one
extra dense tensor of ``numel(blob)`` elements per sparse part (the number itself when a fill
op of the net gives the blob's ``shape``). A sparse gradient reaching an op whose gradient
takes only dense ones (its maker refuses it: ``sparse_output_gradient``) is made dense
before that op's gradient (:func:`densify_outputs`), which then sees an ordinary incoming
dense gradient: a pass-through maker (``Sum``) hands it on as it would any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any

from api_schemas import caffe2_pb2
from core.ir.env import GenEnv
from core.registry import find_arg, make_op
from core.types import GradientSlice, GradValue

OperatorDef = caffe2_pb2.OperatorDef
DeviceOption = caffe2_pb2.DeviceOption


def densify_slices(
    name: str,
    slices: Sequence[tuple[GradientSlice, DeviceOption | None]],
    like: str,
    grad_ops: list[OperatorDef],
    env: GenEnv,
    forward_ops: Sequence[OperatorDef],
) -> list[str]:
    """Make each sparse gradient of ``name`` dense with a ``SparseToDense`` op.

    Args:
        name: the forward blob whose sparse and dense gradients meet.
        slices: its sparse gradients, each with the device option of its writer.
        like: a dense gradient of ``name`` (same version), emitted before these ops, whose
            first dimension the dense tensors take.
        grad_ops: the gradient ops emitted so far; the ``SparseToDense`` ops are appended
            (placed on the device of the sparse gradient's writer).
        env: generation environment (diagnostics, per-request counters).
        forward_ops: the forward ops (to find a fill op giving ``name``'s shape).

    Returns:
        One dense blob per slice, ``_<name>_grad_densified_<k>`` (unique per request),
        shaped like ``name`` (float, as the slice's values).
    """
    made: list[str] = []
    for gs, device in slices:
        dense = _densified_name(env, name)
        op = make_op("SparseToDense", [gs.indices, gs.values, like], [dense])
        if device is not None:
            op.device_option.CopyFrom(device)
        grad_ops.append(op)
        made.append(dense)
    numel = _known_numel(name, forward_ops)
    each = f"{numel} elements" if numel is not None else f"numel({name}) elements"
    env.warn(
        "densified_gradient",
        f"densify: the sparse gradient(s) of {name} were made dense with SparseToDense and "
        f"summed with its dense gradient(s); this costs {len(made)} extra dense tensor(s) "
        f"of {each} each ({', '.join(made)})",
        blobs=(name, *made),
    )
    return made


def _densified_name(env: GenEnv, name: str) -> str:
    """A fresh ``_<name>_grad_densified_<k>`` (``k`` counts per blob and request)."""
    key = "\0densify:" + name
    k = env.counters.get(key, 0)
    env.counters[key] = k + 1
    return f"_{name}_grad_densified_{k}"


def _known_numel(name: str, forward_ops: Sequence[OperatorDef]) -> int | None:
    """Element count of ``name`` when a fill op of the net writes it with a ``shape`` arg."""
    for op in forward_ops:
        if name in op.output:
            a = find_arg(op, "shape")
            if a is not None and len(a.ints):
                return int(prod(a.ints))
    return None


def densify_outputs(bp: Any, idx: int, g_output: Sequence[GradValue],
                    grad_ops: list[OperatorDef]) -> list[GradValue]:
    """Make the sparse output gradients of forward op ``idx`` dense, for its maker.

    Emits ``SparseToDense([indices, values, O(i)] -> _<O(i)>_grad_densified_<k>)`` into
    ``grad_ops`` for each sparse entry: shaped like output ``O(i)`` at the version op
    ``idx`` wrote, which the backward pass ``bp`` checks (or, with ``recompute``,
    rebuilds) as it checks any gradient op's read.

    Args:
        bp: the backward pass (:class:`core.ir.backward.BackwardPass`).
        idx: the forward op whose maker refused a sparse output gradient.
        g_output: its output gradients.
        grad_ops: the gradient ops so far (appended to).

    Returns:
        ``g_output`` with dense names in place of the slices.

    Raises:
        VersionMismatchError: ``O(i)`` was overwritten and not rebuilt.
    """
    env = bp.env
    outputs = bp.op_outputs[idx]
    names = {n: j for j, g in enumerate(g_output) if isinstance(g, GradientSlice) for n in g}
    out: list[GradValue] = list(g_output)
    made: list[OperatorDef] = []
    for j, g in enumerate(g_output):
        if not isinstance(g, GradientSlice):
            continue
        dense = _densified_name(env, outputs[j])
        op = make_op("SparseToDense", [g.indices, g.values, outputs[j]], [dense])
        op.is_gradient_op = True
        fwd = bp.ops[idx]
        if fwd.HasField("device_option"):
            op.device_option.CopyFrom(fwd.device_option)
        made.append(op)
        out[j] = dense
        env.warn(
            "densified_gradient",
            f"densify: the sparse gradient of {outputs[j]} was made dense with SparseToDense "
            f"for {bp.where(idx)}, whose gradient takes only dense ones; this costs one "
            f"extra dense tensor of numel({outputs[j]}) elements ({dense})",
            blobs=(outputs[j], dense),
        )
    bp._check_gradient_inputs(idx, made, names, frozenset())
    if bp._pending:  # recomputed forward values, before the ops that read them
        grad_ops.extend(bp._pending)
        bp._pending = []
    grad_ops.extend(made)
    return out
