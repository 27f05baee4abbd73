"""Issue 4 acceptance: verify SqueezeNet's generated gradient, and catch a tampered one.

The loss is taken at ``pool10`` (the logits): through the 1000-way softmax of random weights
every gradient is ~1e-8, below what central differences resolve, so a check there could
not fail. ``atol`` is 0, so the comparison is purely relative.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from api_schemas import caffe2_pb2
from core.proto import codec
from core.registry import make_arg
from core.verify import InputSpec, RandomSpec, VerifyOptions, verify_net
from tests.realnets.squeezenet import weight_shapes

NET = "caffe2_test_assets__squeeze_predict_net.pb"
SAMPLE = ["data", "conv1_w", "fire5/expand3x3_w", "conv10_b"]


def options(net: caffe2_pb2.NetDef) -> VerifyOptions:
    inputs = [InputSpec("data", random=RandomSpec([1, 3, 64, 64], seed=11))]
    for k, (blob, shape) in enumerate(weight_shapes(net).items()):
        inputs.append(InputSpec(blob, random=RandomSpec(shape, seed=100 + k, low=-0.2,
                                                        high=0.2, distribution="uniform")))
    return VerifyOptions(
        inputs=inputs, mode="fast", check=SAMPLE, passes=2, seed=7, atol=0.0, rtol=1e-4
    )


@pytest.fixture(scope="module")
def squeezenet(shared_dir: Path) -> caffe2_pb2.NetDef:
    return codec.from_binary((shared_dir / "realnets" / NET).read_bytes(), caffe2_pb2.NetDef)


def test_squeezenet_gradient_passes_fast_mode(squeezenet: caffe2_pb2.NetDef) -> None:
    result = verify_net(squeezenet, ["pool10"], options(squeezenet))
    reports = {b.blob: b for b in result.report.blobs}
    assert set(reports) == set(SAMPLE)
    assert all(reports[b].passed for b in SAMPLE), result.report
    assert result.report.passed


def test_tampered_gradient_op_is_caught(squeezenet: caffe2_pb2.NetDef) -> None:
    good = verify_net(squeezenet, ["pool10"], options(squeezenet))
    tampered = [caffe2_pb2.OperatorDef() for _ in good.grad_ops]
    for new, old in zip(tampered, good.grad_ops, strict=True):
        new.CopyFrom(old)
    # The gradient op of conv10 (the last Conv) now scales its outputs by 1.5.
    target = next(o for o in tampered if o.type == "ConvGradient" and "conv10_w_grad" in o.output)
    target.type = "Scale"
    del target.arg[:]
    target.ClearField("is_gradient_op")
    idx = tampered.index(target)
    original = good.grad_ops[idx]
    target.input[:] = [original.input[2]]  # dY of conv10
    target.output[:] = ["conv10_dY_scaled"]
    target.arg.append(make_arg("scale", 1.5))
    fixed = caffe2_pb2.OperatorDef()
    fixed.CopyFrom(original)
    fixed.input[2] = "conv10_dY_scaled"
    tampered.insert(idx + 1, fixed)
    bad = verify_net(squeezenet, ["pool10"], options(squeezenet), grad_ops=tampered)
    reports = {b.blob: b for b in bad.report.blobs}
    assert not bad.report.passed
    assert not reports["conv10_b"].passed and not reports["data"].passed
