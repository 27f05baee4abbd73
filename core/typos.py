"""What a mistyped op type was probably meant to be: other frameworks' names of Caffe2 ops,
and an edit distance that ranks typos (used by :func:`core.registry.nearest_op_types`)."""

from __future__ import annotations

#: Other frameworks' names of Caffe2 ops (ONNX, PyTorch, Keras, Caffe 1), for "did you mean".
OTHER_NAMES = {
    "fullyconnected": "FC", "linear": "FC", "dense": "FC", "gemm": "FC", "innerproduct": "FC",
    "convolution": "Conv", "batchnorm": "SpatialBN", "batchnormalization": "SpatialBN",
    "batchnorm2d": "SpatialBN", "maxpool2d": "MaxPool", "maxpooling2d": "MaxPool",
    "avgpool": "AveragePool", "averagepooling2d": "AveragePool", "avgpool2d": "AveragePool",
    "softmaxcrossentropy": "SoftmaxWithLoss", "embedding": "Gather", "view": "Reshape",
    "permute": "Transpose",
    "cat": "Concat", "concatenate": "Concat",
}


def edit_distance(a: str, b: str) -> float:
    """Optimal-string-alignment distance: an insertion, deletion or substitution costs 1, a
    swap of two neighbours, the commonest typo, 0.5 (``Tahn`` is 0.5 from ``Tanh``, 1 from
    ``Tan``)."""
    prev2: list[float] = []
    prev: list[float] = [float(k) for k in range(len(b) + 1)]
    for i in range(1, len(a) + 1):
        cur: list[float] = [float(i)] + [0.0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 0.5)
        prev2, prev = prev, cur
    return prev[-1]
