"""Engine entry points used by ``app/`` and the CLI: one call per service operation.

Source: Caffe2 ``GradientRegistry.GetGradientForOp`` / ``GetBackwardPass`` and
``Net.AddGradientOperators`` (spec §2.2, §2.5, §2.8). The answers, :class:`NetGradientResult`
and :class:`OpGradientResult`, are defined with the pass that makes them
(:mod:`core.ir.backward`) and re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from api_schemas import caffe2_pb2
from core.ir.backward import NetGradientResult, OpGradientResult, net_gradient, op_gradient
from core.ir.collisions import refuse_duplicate_outputs
from core.ir.env import GenLimits
from core.ir.ssa import CONTROL_OP_TYPES
from core.types import Diagnostic, GradValue

__all__ = ["NetGradientResult", "OpGradientResult", "gradient_for_net", "gradient_for_op"]


def gradient_for_op(
    op: caffe2_pb2.OperatorDef,
    g_output: Sequence[GradValue],
    limits: GenLimits | None = None,
) -> OpGradientResult:
    """Gradient ops of one forward op (``GetGradientForOp``), ``Do``/``If``/``While`` included.

    Raises:
        InvalidRequestError: ``g_output`` length differs from ``len(op.output)``.
        GradientNotDefinedError, InvalidNetError, GradientError, LimitExceededError.
    """
    if (len(set(op.output)) < len(op.output) and op.type not in CONTROL_OP_TYPES
            and any(g is not None for g in g_output)):  # (as the backward pass refuses it)
        refuse_duplicate_outputs(op.type, op.output, 0, f"op[0]:{op.type}")
    res = op_gradient(op, g_output, limits or GenLimits())
    _note_partials(op, res)
    return res


def _note_partials(op: caffe2_pb2.OperatorDef, res: OpGradientResult) -> None:
    """Warn when one blob read at several inputs got several gradients (``Mul(x, x)``).

    ``g_input`` has one entry per input position, as Caffe2's ``GetGradientForOp``; the
    blob's gradient is then the sum of its entries, which the caller must add (the net
    routes sum them). Dense gradients only; a control op's workspace blob is skipped.
    """
    by_blob: dict[str, list[int]] = {}
    for k, name in enumerate(op.input):
        g = res.g_input[k] if k < len(res.g_input) else None
        if isinstance(g, str):
            by_blob.setdefault(name, []).append(k)
    for name, ks in by_blob.items():
        if len(ks) < 2:
            continue
        entries = [str(res.g_input[k]) for k in ks]  # (Sum(x, x): one name, counted twice)
        res.diagnostics.append(Diagnostic(
            "warning", "partial_input_gradients",
            f"{op.type} reads '{name}' at inputs {', '.join(map(str, ks))}: each g_input "
            f"entry is one partial gradient ({', '.join(entries)}), and the gradient of "
            f"'{name}' is their sum, each entry counted once; add them (Sum), or send the op "
            "as a one-op net to /v1/gradients/net, which sums them",
            0, op.type, f"op[0]:{op.type}", (name, *dict.fromkeys(entries))))


def gradient_for_net(
    net: caffe2_pb2.NetDef,
    ys: Sequence[str] | Mapping[str, GradValue],
    skip: int = 0,
    return_net: bool = False,
    limits: GenLimits | None = None,
    recompute: bool = False,
    densify: bool = False,
) -> NetGradientResult:
    """Backward pass of a whole net (``GetBackwardPass`` / ``AddGradientOperators``).

    Args:
        net: forward NetDef.
        ys: blob names to seed with all-ones gradients, or a map blob -> gradient
            (``None`` = auto seed ``<y>_autogen_grad``).
        skip: ignore the first ``skip`` ops (e.g. data loading).
        return_net: also return forward + gradient ops as one NetDef.
        recompute: re-run producers of forward values that a later in-place write
            overwrote, into fresh blobs, instead of raising the version error (opt-in).
        densify: where sparse and dense gradients of one blob meet, make the sparse parts
            dense with ``SparseToDense`` and sum (opt-in; Caffe2 raises; see
            :mod:`core.ir.densify`).

    Raises:
        InvalidRequestError: a ``ys`` blob is written by no op; ``skip`` out of range.
        GradientNotDefinedError: ops on the path without a gradient (all listed at once).
        VersionMismatchError, InvalidNetError, GradientError, LimitExceededError.
    """
    return net_gradient(net, ys, skip, return_net, limits or GenLimits(), recompute, densify)
