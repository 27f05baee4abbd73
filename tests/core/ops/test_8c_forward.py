"""Forward values of the issue-8c kernels against independent references.

The numeric gradient table only proves that each gradient matches its own forward kernel;
these tests pin the forward semantics: worked examples from Caffe2's operator docs, and
direct NumPy restatements of the definitions.
"""

from __future__ import annotations

import numpy as np
import pytest

from core.ops import load_all
from core.registry import get_kernel, make_arg, make_op

load_all()


def run(op_type: str, inputs: list[np.ndarray], n_out: int = 1, **args: object) -> list[np.ndarray]:
    op = make_op(
        op_type,
        [f"i{k}" for k in range(len(inputs))],
        [f"o{k}" for k in range(n_out)],
        [make_arg(k, v) for k, v in args.items()],
    )
    kernel = get_kernel(op_type)
    assert kernel is not None
    return list(kernel(op, inputs))


def test_cross_entropy_doc_example() -> None:
    # Caffe2 CrossEntropy docs: Y = [0.10536055, 0.8675006]
    x = np.array([[0.01, 0.05, 0.02, 0.02, 0.9], [0.03, 0.1, 0.42, 0.05, 0.4]])
    lab = np.array([[0.0, 0, 0, 0, 1], [0, 0, 1, 0, 0]])
    (y,) = run("CrossEntropy", [x, lab])
    np.testing.assert_allclose(y, [0.10536055, 0.8675006], rtol=1e-6)


def test_l1_distance_doc_example() -> None:
    (z,) = run("L1Distance", [5 * np.ones((1, 4)), np.ones((1, 4))])
    np.testing.assert_allclose(z, [16.0])


def test_batch_matmul_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4, 2)), rng.standard_normal((3, 5, 4))
    (y,) = run("BatchMatMul", [a, b], trans_a=1, trans_b=1)
    ref = np.stack([a[i].T @ b[i].T for i in range(3)])
    np.testing.assert_allclose(y, ref, rtol=1e-12)
    (yb,) = run(
        "BatchMatMul", [rng.standard_normal((2, 1, 3, 4)), rng.standard_normal((4, 2))], broadcast=1
    )
    assert yb.shape == (2, 1, 3, 2)


def test_layer_norm_outputs() -> None:
    x = np.arange(24.0).reshape(2, 3, 4) ** 1.5
    y, mean, std = run("LayerNorm", [x], 3, axis=1, epsilon=1e-5)
    rows = x.reshape(2, 12)
    ref_std = np.sqrt(rows.var(1) + 1e-5)
    np.testing.assert_allclose(mean.reshape(-1), rows.mean(1))
    np.testing.assert_allclose(std.reshape(-1), ref_std)
    assert mean.shape == (2, 1) and std.shape == (2, 1)
    np.testing.assert_allclose(
        y.reshape(2, 12), (rows - rows.mean(1, keepdims=True)) / ref_std[:, None]
    )


def test_group_norm_statistics_are_per_group() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 3))
    gamma, beta = np.array([1.0, 2.0, 3.0, 4.0]), np.array([0.0, 1.0, 0.0, -1.0])
    y, mean, rstd = run("GroupNorm", [x, gamma, beta], 3, group=2, epsilon=1e-5)
    grp = x.reshape(2, 2, 6)
    np.testing.assert_allclose(mean, grp.mean(2))
    np.testing.assert_allclose(rstd, 1 / np.sqrt(grp.var(2) + 1e-5))
    xhat = (grp - grp.mean(2, keepdims=True)) / np.sqrt(grp.var(2, keepdims=True) + 1e-5)
    ref = xhat.reshape(2, 4, 3) * gamma[None, :, None] + beta[None, :, None]
    np.testing.assert_allclose(y, ref, rtol=1e-10)


def test_sigmoid_cross_entropy_with_logits_definition() -> None:
    x = np.array([[-2.0, 0.5, 3.0], [0.0, -0.1, 7.0]])
    t = np.array([[0.0, 1.0, 1.0], [1.0, 0.0, 0.5]])
    (y,) = run("SigmoidCrossEntropyWithLogits", [x, t])
    p = 1 / (1 + np.exp(-x))
    ref = -(t * np.log(p) + (1 - t) * np.log(1 - p)).mean(1)
    np.testing.assert_allclose(y, ref, rtol=1e-12)


def test_smooth_l1_loss_definition() -> None:
    yh = np.array([[0.05, -2.0], [0.5, 0.0]])
    yt = np.zeros((2, 2))
    ai, ao = np.ones((2, 2)), np.array([[1.0, 0.5], [2.0, 1.0]])
    (loss,) = run("SmoothL1Loss", [yh, yt, ai, ao], beta=0.1, scale=3.0)
    per = np.array([[0.5 * 0.05**2 / 0.1, 2.0 - 0.05], [0.5 - 0.05, 0.0]])
    assert float(loss) == pytest.approx(3.0 * float((ao * per).sum()) / 2)


def test_channel_shuffle_and_spatial_ops() -> None:
    x = np.arange(6.0).reshape(1, 6, 1, 1)
    (y,) = run("ChannelShuffle", [x], group=2)
    assert y.reshape(-1).tolist() == [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
    img = np.arange(4.0).reshape(1, 1, 2, 2)
    (up,) = run("UpsampleNearest", [img], scale=2)
    assert up[0, 0].tolist() == [[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 3, 3], [2, 2, 3, 3]]
    (bil,) = run("UpsampleBilinear", [img], height_scale=1.5, width_scale=1.5)
    # corner-aligned: output corners equal the input corners, the centre is their mean
    assert bil[0, 0].tolist() == [[0.0, 0.5, 1.0], [1.0, 1.5, 2.0], [2.0, 2.5, 3.0]]
    (narrow,) = run(
        "SpatialNarrowAs", [np.arange(16.0).reshape(1, 1, 4, 4), np.zeros((1, 3, 2, 3))]
    )
    assert narrow[0, 0].tolist() == [[0, 1, 2], [4, 5, 6]]
    (two,) = run("MakeTwoClass", [np.array([0.25, 0.9])])
    np.testing.assert_allclose(two, [[0.75, 0.25], [0.1, 0.9]])


def test_roi_pool_bins() -> None:
    x = np.arange(36.0).reshape(1, 1, 6, 6)
    rois = np.array([[0, 1.0, 1.0, 4.0, 4.0]])  # 4×4 box from (1, 1): bins of 2×2
    y, arg = run("RoIPool", [x, rois], 2, pooled_h=2, pooled_w=2, spatial_scale=1.0)
    assert y[0, 0].tolist() == [[14.0, 16.0], [26.0, 28.0]]
    assert arg[0, 0].tolist() == [[14, 16], [26, 28]]


def test_space_to_batch_follows_caffe2_indexing() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 4, 6))
    blk, pt, pad = 2, 1, 1  # pad_t from `pad_t`; left, bottom, right from `pad`
    (y,) = run("SpaceToBatch", [x], block_size=blk, pad=pad, pad_t=pt)
    n, c, h, w = x.shape
    assert y.shape == (n * 4, c, (h + pt + pad) // blk, (w + 2 * pad) // blk)
    for ob in range(y.shape[0]):
        nb, off_w, off_h = ob % n, (ob // n) % blk, (ob // n) // blk
        for oy in range(y.shape[2]):
            for ox in range(y.shape[3]):
                iy, ix = oy * blk + off_h - pt, ox * blk + off_w - pad
                inside = 0 <= iy < h and 0 <= ix < w
                want = x[nb, :, iy, ix] if inside else np.zeros(c)
                np.testing.assert_array_equal(y[ob, :, oy, ox], want)
    (back,) = run("BatchToSpace", [y], block_size=blk, pad=pad, pad_t=pt)
    np.testing.assert_array_equal(back, x)


@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
def test_im2col_layout(order: str) -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 5, 4))  # NCHW reference image
    kh, kw, pad, stride = 2, 3, 1, 2
    xin = np.moveaxis(x, 1, -1) if order == "NHWC" else x
    (y,) = run("Im2Col", [xin], kernel_h=kh, kernel_w=kw, pad=pad, stride=stride, order=order)
    xp = np.pad(x, [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    oh, ow = (5 + 2 * pad - kh) // stride + 1, (4 + 2 * pad - kw) // stride + 1
    for c in range(3):
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, c, i : i + stride * oh : stride, j : j + stride * ow : stride]
                if order == "NCHW":
                    got = y[:, (c * kh + i) * kw + j]
                else:
                    got = y[:, :, :, (i * kw + j) * 3 + c]
                np.testing.assert_array_equal(got, patch)


def test_roi_align_rotated_at_zero_angle_equals_roi_align() -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 2, 6, 7))
    # an axis-aligned box: centre (3, 2.5), size 4×2 == corners (1, 1.5)-(5, 3.5)
    (rot,) = run(
        "RoIAlignRotated",
        [x, np.array([[0, 3.0, 2.5, 4.0, 2.0, 0.0]])],
        pooled_h=2,
        pooled_w=2,
        sampling_ratio=2,
    )
    (ref,) = run(
        "RoIAlign",
        [x, np.array([[0, 1.0, 1.5, 5.0, 3.5]])],
        pooled_h=2,
        pooled_w=2,
        sampling_ratio=2,
    )
    np.testing.assert_allclose(rot, ref, rtol=1e-12)


def test_sigmoid_cross_entropy_loss_normalisation() -> None:
    # Detectron: the mean over cared-for targets (normalize=1), else a plain sum; times scale
    x = np.array([[0.3, -1.2, 2.0], [0.0, 0.7, -0.4]])
    t = np.array([[1, 0, -1], [0, 1, 1]], dtype=np.int32)
    care = t != -1
    per = np.log1p(np.exp(x)) - t * x
    total = float(per[care].sum())
    (norm,) = run("SigmoidCrossEntropyLoss", [x, t], scale=2.0)
    (plain,) = run("SigmoidCrossEntropyLoss", [x, t], scale=2.0, normalize=0)
    assert float(norm) == pytest.approx(2.0 * total / 5)
    assert float(plain) == pytest.approx(2.0 * total)
