"""Numeric gradient cases of the NN layer ops (core/ops/nn.py, core/ops/detection.py)."""

from __future__ import annotations

import numpy as np

from tests.core.ops.opcase import OpCase, OpInput, const, distinct, positive


def uniform_pm2(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Uniform in [-2, 2).

    Used for SpatialBN's X: the table test seeds the feeds and the checker's output weights
    with the same seed, so a standard-normal X would equal the weights w; BN's dX is zero
    for any w affine in X per channel, which would make the X check vacuous.
    """
    return rng.uniform(-2.0, 2.0, shape)


# float64, small shapes: N=2, C=3, H=W=5 unless a case needs otherwise.
X4 = (2, 3, 5, 5)

CASES: list[OpCase] = [
    # -- FC / FCTransposed ------------------------------------------------------------------
    OpCase("FC", [OpInput("X", (2, 3)), OpInput("W", (4, 3)), OpInput("b", (4,))], ["Y"]),
    OpCase(
        "FC",
        [OpInput("X", (2, 3, 2)), OpInput("W", (4, 6)), OpInput("b", (4,))],
        ["Y"],
        args={"axis": 1},
        id="_axis1_3d",
    ),
    OpCase(
        "FC",
        [OpInput("X", (2, 6)), OpInput("W", (4, 2, 3)), OpInput("b", (4,))],
        ["Y"],
        args={"axis_w": 1},
        id="_axis_w",
    ),
    OpCase(
        "FCTransposed",
        [OpInput("X", (2, 3)), OpInput("W", (3, 4)), OpInput("b", (4,))],
        ["Y"],
    ),
    # -- Conv family ------------------------------------------------------------------------
    OpCase(
        "Conv",
        [OpInput("X", X4), OpInput("W", (4, 3, 3, 3)), OpInput("b", (4,))],
        ["Y"],
        args={"kernel": 3},
    ),
    OpCase(
        "Conv",
        [OpInput("X", X4), OpInput("W", (4, 3, 3, 3)), OpInput("b", (4,))],
        ["Y"],
        args={"kernel": 3, "stride": 2, "pad": 1},
        id="_stride2_pad1",
    ),
    OpCase(
        "Conv",
        [OpInput("X", (2, 4, 5, 5)), OpInput("W", (6, 2, 2, 3)), OpInput("b", (6,))],
        ["Y"],
        args={"kernels": [2, 3], "strides": [1, 2], "pads": [1, 0, 0, 1], "group": 2},
        id="_group2_asym",
    ),
    OpCase(
        "Conv",
        [OpInput("X", X4), OpInput("W", (2, 3, 2, 2)), OpInput("b", (2,))],
        ["Y"],
        args={"kernel": 2, "dilation": 2, "pad_t": 1, "pad_l": 0, "pad_b": 0, "pad_r": 2},
        id="_dilation2_padtlbr",
    ),
    OpCase(
        "Conv",
        [OpInput("X", X4), OpInput("W", (2, 3, 3, 3))],
        ["Y"],
        args={"kernel": 3, "pad": 1},
        id="_nobias",
    ),
    OpCase(
        "Conv",
        [OpInput("X", (2, 5, 5, 3)), OpInput("W", (4, 3, 3, 3)), OpInput("b", (4,))],
        ["Y"],
        args={"kernel": 3, "stride": 2, "order": "NHWC"},
        id="_nhwc",
    ),
    OpCase(
        "Conv",
        [OpInput("X", X4), OpInput("W", (2, 3, 3, 3)), OpInput("b", (2,))],
        ["Y"],
        args={"kernel": 3, "no_gradient_to_input": 1},
        check=["W", "b"],
        id="_no_gradient_to_input",
    ),
    OpCase(
        "Conv1D",
        [OpInput("X", (2, 3, 6)), OpInput("W", (2, 3, 3)), OpInput("b", (2,))],
        ["Y"],
        args={"kernel": 3, "stride": 2, "pad": 1},
    ),
    OpCase(
        "Conv2D",
        [OpInput("X", (2, 2, 4, 4)), OpInput("W", (3, 2, 2, 2)), OpInput("b", (3,))],
        ["Y"],
        args={"kernel": 2},
    ),
    OpCase(
        "Conv3D",
        [OpInput("X", (1, 2, 3, 3, 3)), OpInput("W", (2, 2, 2, 2, 2)), OpInput("b", (2,))],
        ["Y"],
        args={"kernels": [2, 2, 2]},
    ),
    OpCase(
        "ConvTranspose",
        [OpInput("X", (2, 3, 4, 4)), OpInput("W", (3, 2, 3, 3)), OpInput("b", (2,))],
        ["Y"],
        args={"kernel": 3, "stride": 2, "pad": 1},
    ),
    OpCase(
        "ConvTranspose",
        [OpInput("X", (2, 4, 3, 3)), OpInput("W", (4, 1, 2, 2))],
        ["Y"],
        args={"kernel": 2, "stride": 2, "adj": 1, "group": 2},
        id="_group2_adj_nobias",
    ),
    OpCase(
        "ConvTranspose",
        [OpInput("X", (1, 3, 3, 2)), OpInput("W", (2, 3, 3, 3)), OpInput("b", (3,))],
        ["Y"],
        args={"kernel": 3, "order": "NHWC"},
        id="_nhwc",
    ),
    # -- Pooling ----------------------------------------------------------------------------
    OpCase("MaxPool", [OpInput("X", X4, distinct)], ["Y"], args={"kernel": 2, "stride": 2}),
    OpCase(
        "MaxPool",
        [OpInput("X", X4, distinct)],
        ["Y"],
        args={"kernel": 3, "stride": 1, "pad": 1},
        id="_pad1_overlap",
    ),
    OpCase(
        "MaxPool",
        [OpInput("X", (2, 3, 6, 6), distinct)],
        ["Y"],
        args={"kernel": 3, "stride": 2, "legacy_pad": 3},
        id="_caffe_legacy_ceil",
    ),
    OpCase(
        "MaxPool",
        [OpInput("X", (2, 4, 4, 3), distinct)],
        ["Y"],
        args={"kernel": 2, "stride": 2, "order": "NHWC"},
        id="_nhwc",
    ),
    OpCase("MaxPool", [OpInput("X", X4, distinct)], ["Y"], args={"global_pooling": 1}, id="_g"),
    OpCase("MaxPool1D", [OpInput("X", (2, 3, 6), distinct)], ["Y"], args={"kernel": 2}),
    OpCase("MaxPool2D", [OpInput("X", X4, distinct)], ["Y"], args={"kernel": 3, "stride": 2}),
    OpCase("MaxPool3D", [OpInput("X", (1, 2, 3, 3, 3), distinct)], ["Y"], args={"kernel": 2}),
    OpCase(
        "AveragePool",
        [OpInput("X", X4)],
        ["Y"],
        args={"kernel": 3, "stride": 2, "pad": 1},
    ),
    OpCase(
        "AveragePool",
        [OpInput("X", X4)],
        ["Y"],
        args={"kernel": 3, "stride": 2, "pad": 1, "count_include_pad": 1},
        id="_count_include_pad",
    ),
    OpCase(
        "AveragePool",
        [OpInput("X", X4)],
        ["Y"],
        args={"global_pooling": 1, "legacy_pad": 3, "kernel": 0, "stride": 1, "pad": 0},
        id="_global_legacy",
    ),
    OpCase(
        "AveragePool",
        [OpInput("X", (2, 3, 6, 6))],
        ["Y"],
        args={"kernel": 3, "stride": 2, "pad": 1, "legacy_pad": 3},
        id="_caffe_legacy_ceil_pad",
    ),
    OpCase(
        "AveragePool",
        [OpInput("X", (2, 5, 5, 3))],
        ["Y"],
        args={"kernel": 2, "stride": 1, "order": "NHWC"},
        id="_nhwc",
    ),
    OpCase("AveragePool1D", [OpInput("X", (2, 3, 6))], ["Y"], args={"kernel": 3, "pad": 1}),
    OpCase("AveragePool2D", [OpInput("X", X4)], ["Y"], args={"kernel": 2, "stride": 2}),
    OpCase("AveragePool3D", [OpInput("X", (1, 2, 3, 3, 3))], ["Y"], args={"kernel": 2}),
    # -- SpatialBN --------------------------------------------------------------------------
    OpCase(
        "SpatialBN",
        [
            OpInput("X", X4, uniform_pm2),
            OpInput("scale", (3,)),
            OpInput("bias", (3,)),
            OpInput("rm", (3,), const([0.1, -0.2, 0.3])),
            OpInput("rv", (3,), const([1.0, 0.5, 2.0])),
        ],
        ["Y", "rm_out", "rv_out", "saved_mean", "saved_inv_std"],
        args={"epsilon": 1e-5, "momentum": 0.9},
        id="_train",
    ),
    OpCase(
        "SpatialBN",
        [
            OpInput("X", (2, 4, 3, 3), uniform_pm2),
            OpInput("scale", (3,)),
            OpInput("bias", (3,)),
            OpInput("rm", (3,), const([0.1, -0.2, 0.3])),
            OpInput("rv", (3,), const([1.0, 0.5, 2.0])),
        ],
        ["Y", "rm_out", "rv_out", "saved_mean", "saved_inv_std"],
        args={"order": "NHWC"},
        id="_train_nhwc",
    ),
    OpCase(
        "SpatialBN",
        [
            OpInput("X", X4),
            OpInput("scale", (3,)),
            OpInput("bias", (3,)),
            OpInput("mean", (3,)),
            OpInput("var", (3,), positive),
        ],
        ["Y"],
        args={"is_test": 1, "epsilon": 1e-3},
        check=["X", "scale", "bias"],
        id="_is_test",
    ),
    # -- LRN --------------------------------------------------------------------------------
    OpCase(
        "LRN",
        [OpInput("X", (2, 5, 3, 3))],
        ["Y"],
        args={"size": 3, "alpha": 0.5, "beta": 0.75, "bias": 1.0},
    ),
    OpCase(
        "LRN",
        [OpInput("X", (2, 4, 3, 6))],
        ["Y", "scale"],
        args={"size": 5, "alpha": 0.3, "beta": 0.6, "bias": 2.0, "order": "NHWC"},
        id="_nhwc_two_outputs",
    ),
    # -- Softmax ----------------------------------------------------------------------------
    OpCase("Softmax", [OpInput("X", (2, 3, 4))], ["Y"]),
    OpCase("Softmax", [OpInput("X", (2, 3, 4))], ["Y"], args={"axis": -1}, id="_axis_last"),
    OpCase("Softmax", [OpInput("X", (3, 5))], ["Y"], args={"axis": 0}, id="_axis0"),
    # -- Dropout ----------------------------------------------------------------------------
    OpCase("Dropout", [OpInput("X", X4)], ["Y", "mask"], args={"ratio": 0.4}, id="_train"),
    OpCase(
        "Dropout",
        [OpInput("X", X4)],
        ["Y", "mask"],
        args={"ratio": 0.5, "is_test": 1},
        id="_is_test",
    ),
    # -- Layout -----------------------------------------------------------------------------
    OpCase("NCHW2NHWC", [OpInput("X", (2, 3, 4, 5))], ["Y"]),
    OpCase("NHWC2NCHW", [OpInput("X", (2, 4, 5, 3))], ["Y"]),
    # -- Detection --------------------------------------------------------------------------
    OpCase(
        "RoIAlign",
        [
            OpInput("X", (2, 3, 6, 6)),
            OpInput(
                "rois",
                (2, 5),
                const([[0.0, 0.5, 1.0, 4.2, 5.1], [1.0, 1.3, 0.2, 6.7, 3.9]]),
            ),
        ],
        ["Y"],
        args={"pooled_h": 2, "pooled_w": 3, "sampling_ratio": 2, "spatial_scale": 1.0},
    ),
    OpCase(
        "RoIAlign",
        [
            OpInput("X", (1, 2, 8, 8)),
            OpInput("rois", (2, 4), const([[2.0, 2.0, 13.0, 9.0], [-1.0, 0.0, 5.0, 17.5]])),
        ],
        ["Y"],
        args={"pooled_h": 2, "pooled_w": 2, "spatial_scale": 0.5},
        id="_adaptive_4col",
    ),
    OpCase(
        "RoIAlign",
        [
            OpInput("X", (1, 5, 5, 2)),
            OpInput("rois", (1, 5), const([[0.0, 0.7, 0.3, 3.1, 4.6]])),
        ],
        ["Y"],
        args={"pooled_h": 2, "pooled_w": 2, "sampling_ratio": 1, "aligned": 1, "order": "NHWC"},
        id="_aligned_nhwc",
    ),
    OpCase(
        "ResizeNearest",
        [OpInput("X", (2, 3, 3, 4))],
        ["Y"],
        args={"width_scale": 2.0, "height_scale": 2.0},
    ),
    OpCase(
        "ResizeNearest",
        [OpInput("X", (1, 2, 4, 3))],
        ["Y"],
        args={"width_scale": 1.5, "height_scale": 0.5},
        id="_fractional",
    ),
]
