"""Metric ops a training net computes beside its loss (no gradient): NumPy kernels.

Source: Caffe2 ``accuracy_op.cc`` (spec §5.5). ``Accuracy`` is ``should_not_differentiate``
in Caffe2 (:mod:`core.caffe2_statuses`); it only needs to run, so that ``/v1/verify`` and
``/v1/run`` can execute a training net that reports it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.ops._args import get_int
from core.ops.elementwise import expect_inputs, kernel_error
from core.registry import OperatorDef, register_kernel

Array = np.ndarray[Any, Any]


@register_kernel("Accuracy")
def accuracy(op: OperatorDef, inputs: list[Array]) -> list[Array]:
    """``[prediction (N, D) float, label (N,) int] -> [accuracy float32 scalar]``.

    The fraction of rows whose label is among the ``top_k`` (arg, default 1) largest
    predictions; ties count the label in when its score is not below the k-th largest
    (Caffe2 counts the entries strictly greater, or equal with a lower index).
    """
    expect_inputs(op, inputs, 2)
    pred, label = np.asarray(inputs[0]), np.asarray(inputs[1])
    k = get_int(op, "top_k", 1)
    if pred.ndim != 2 or label.shape != (pred.shape[0],) or label.dtype.kind not in "iu":
        raise kernel_error(op, "expects prediction [N, D] and integer label [N]", inputs)
    if label.size and (label.min() < 0 or label.max() >= pred.shape[1]):
        raise kernel_error(op, f"label out of range [0, {pred.shape[1]})", inputs)
    n = pred.shape[0]
    if n == 0:
        return [np.array(0.0, dtype=np.float32)]
    own = pred[np.arange(n), label]
    cols = np.arange(pred.shape[1])
    better = (pred > own[:, None]) | ((pred == own[:, None]) & (cols < label[:, None]))
    hits = np.sum(better, axis=1) < k
    return [np.array(hits.mean(), dtype=np.float32)]
