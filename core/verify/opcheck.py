"""Finite-difference check of one op's gradient, run with the registry's NumPy kernels.

A small, dependency-free checker for per-op tests (the table-driven test over every
registered op). The net-level checker lives in :mod:`core.verify.checker`.
Source: Caffe2 ``GradientChecker.CheckSimple`` (spec §6.1), with the loss
``L = Σ_k <w_k, out_k>`` for fixed random ``w_k`` instead of ``½Σ out²``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from api_schemas import caffe2_pb2
from core.registry import get_gradient_for_op, get_kernel
from core.types import GradientSlice


@dataclass
class OpCheckResult:
    """Per-input comparison of analytic and numeric gradients.

    Attributes:
        analytic: input name -> analytic gradient (float64, shaped like the input).
        numeric: input name -> central-difference estimate.
        max_abs_error: input name -> max |analytic - numeric|.
    """

    analytic: dict[str, np.ndarray]
    numeric: dict[str, np.ndarray]
    max_abs_error: dict[str, float]


def run_op(op: caffe2_pb2.OperatorDef, blobs: dict[str, np.ndarray]) -> None:
    """Run one op's kernel on ``blobs`` in place (reads ``op.input``, writes ``op.output``).

    Raises:
        KeyError: no kernel for ``op.type`` or a missing input blob.
    """
    kernel = get_kernel(op.type)
    if kernel is None:
        raise KeyError(f"no kernel for {op.type}")
    outs = kernel(op, [blobs[n] for n in op.input])
    for name, val in zip(op.output, outs, strict=False):
        blobs[name] = val


def check_op(
    op: caffe2_pb2.OperatorDef,
    inputs: Mapping[str, np.ndarray],
    check: Sequence[str],
    outputs_with_grads: Sequence[int] = (0,),
    step: float = 1e-3,
    seed: int = 0,
) -> OpCheckResult:
    """Compare ``GetGradientForOp``'s gradient ops with central differences.

    Args:
        op: forward op; must be out of place for the inputs checked.
        inputs: input blobs (float64 recommended).
        check: names of inputs whose gradient is checked.
        outputs_with_grads: output indices that receive a gradient.
        step: finite-difference step.
        seed: seed of the random output weights.

    Returns:
        The analytic and numeric gradients per checked input.

    Raises:
        KeyError: a kernel is missing; ValueError: a checked input got no gradient.
    """
    rng = np.random.default_rng(seed)
    base = {k: np.array(v, copy=True) for k, v in inputs.items()}
    fwd = dict(base)
    run_op(op, fwd)
    weights = {
        op.output[k]: rng.standard_normal(np.shape(fwd[op.output[k]])) for k in outputs_with_grads
    }

    def loss(blobs: dict[str, np.ndarray]) -> float:
        b = dict(blobs)
        run_op(op, b)
        return float(sum(np.sum(w * b[name]) for name, w in weights.items()))

    g_output = [
        (o + "_grad") if k in outputs_with_grads else None for k, o in enumerate(op.output)
    ]
    grad_ops, g_input = get_gradient_for_op(op, g_output)
    ws = dict(fwd)
    for k in outputs_with_grads:
        ws[op.output[k] + "_grad"] = weights[op.output[k]].astype(fwd[op.output[k]].dtype)
    for g in grad_ops:
        run_op(g, ws)
    analytic: dict[str, np.ndarray] = {}
    numeric: dict[str, np.ndarray] = {}
    err: dict[str, float] = {}
    for name in check:
        idx = list(op.input).index(name)
        gname = g_input[idx]
        if gname is None:
            raise ValueError(f"input {name} got no gradient")
        if isinstance(gname, GradientSlice):
            dense = np.zeros_like(base[name], dtype=np.float64)
            np.add.at(dense, ws[gname.indices].astype(np.int64), ws[gname.values])
            a = dense
        else:
            a = np.asarray(ws[gname], dtype=np.float64).reshape(np.shape(base[name]))
        x = base[name]
        num = np.zeros(x.shape, dtype=np.float64)
        for i in np.ndindex(x.shape):
            plus = dict(base)
            minus = dict(base)
            xp = np.array(x, copy=True)
            xm = np.array(x, copy=True)
            xp[i] += step
            xm[i] -= step
            plus[name] = xp
            minus[name] = xm
            num[i] = (loss(plus) - loss(minus)) / (2 * step)
        analytic[name] = a
        numeric[name] = num
        err[name] = float(np.max(np.abs(a - num))) if a.size else 0.0
    return OpCheckResult(analytic, numeric, err)
