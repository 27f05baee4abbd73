"""Non-differentiable points of the issue-8b ops are reported by ``/v1/verify``'s checker.

A Max with two inputs tied at one element, a Clip input sitting on a bound, a ReduceMax row
with a tie: the full-mode check may disagree there, and the report must say why (a
``nondifferentiable_point`` warning naming the op), while the same ops away from their kinks
pass without a warning.
"""

from __future__ import annotations

import numpy as np
import pytest

from api_schemas import caffe2_pb2
from core.registry import make_arg, make_op
from core.verify import InputSpec, VerifyOptions, verify_net
from core.verify.kinks import KINKS, kink_distances, top2_gap

SEED = 20261201


def _net(*ops: caffe2_pb2.OperatorDef) -> caffe2_pb2.NetDef:
    net = caffe2_pb2.NetDef(name="n")
    net.op.extend(ops)
    return net


def _kinks(res: object) -> list[object]:
    return [d for d in res.diagnostics if d.code == "nondifferentiable_point"]  # type: ignore[attr-defined]


def test_max_tie_is_reported_and_explains_the_mismatch() -> None:
    a = np.array([0.3, 1.0, -0.4])
    b = np.array([0.3, -1.0, 0.9])  # tie at element 0: MaxGradient gives dY to both inputs
    opts = VerifyOptions(
        inputs=[InputSpec.from_array("a", a), InputSpec.from_array("b", b)], mode="full",
        seed=SEED,
    )
    res = verify_net(_net(make_op("Max", ["a", "b"], ["y"])), ["y"], opts)
    kinks = _kinks(res)
    assert len(kinks) == 1 and "ties among the inputs" in kinks[0].message  # type: ignore[attr-defined]
    assert not res.report.passed  # the tie double-counts dY (Caffe2's MaxGradient)
    assert all(r.nondifferentiable for r in res.report.blobs)
    assert {tuple(r.worst_index or ()) for r in res.report.blobs if not r.passed} == {(0,)}


def test_max_without_ties_passes_silently() -> None:
    opts = VerifyOptions(
        inputs=[InputSpec.from_array("a", np.array([0.3, 1.0, -0.4])),
                InputSpec.from_array("b", np.array([0.5, -1.0, 0.9]))],
        mode="full", seed=SEED,
    )
    res = verify_net(_net(make_op("Max", ["a", "b"], ["y"])), ["y"], opts)
    assert res.report.passed and not _kinks(res)


def test_clip_on_a_bound_is_reported() -> None:
    clip = make_op("Clip", ["x"], ["y"], [make_arg("min", -0.5), make_arg("max", 0.5)])
    on = InputSpec.from_array("x", np.array([0.5, 0.1, -2.0]))
    res = verify_net(_net(clip), ["y"], VerifyOptions(inputs=[on], mode="full", seed=SEED))
    kinks = _kinks(res)
    assert len(kinks) == 1 and "clip bound" in kinks[0].message  # type: ignore[attr-defined]
    off = InputSpec.from_array("x", np.array([0.4, 0.1, -2.0]))
    res = verify_net(_net(clip), ["y"], VerifyOptions(inputs=[off], mode="full", seed=SEED))
    assert res.report.passed and not _kinks(res)


@pytest.mark.parametrize(
    ("op", "inputs", "zero_at"),
    [
        (make_op("ReluN", ["x"], ["y"], [make_arg("n", 1.0)]), [np.array([0.2, 1.0])], 1),
        (make_op("ThresholdedRelu", ["x"], ["y"]), [np.array([1.0, 3.0])], 0),
        (make_op("HardSigmoid", ["x"], ["y"]), [np.array([0.0, 2.5])], 1),
        (make_op("L1Distance", ["x", "z"], ["y"]), [np.array([1.0, 2.0]), np.array([0.0, 2.0])],
         1),
        (make_op("Min", ["x", "z"], ["y"]), [np.array([1.0, 2.0]), np.array([0.0, 2.0])], 1),
        (make_op("ReduceMax", ["x"], ["y"], [make_arg("axes", [1])]),
         [np.array([[1.0, 2.0], [3.0, 3.0]])], 1),
        (make_op("ReduceFrontMax", ["x"], ["y"]), [np.array([[1.0, 5.0], [1.0, 4.0]])], 0),
        (make_op("RowwiseMax", ["x"], ["y"]), [np.array([[[1.0, 2.0], [4.0, 4.0]]])], 1),
    ],
)
def test_distances_are_zero_exactly_at_the_kink(
    op: caffe2_pb2.OperatorDef, inputs: list[np.ndarray], zero_at: int
) -> None:
    found = kink_distances(op, inputs)
    assert found is not None
    dist, _what = found
    assert dist[zero_at] == 0.0
    assert np.all(np.delete(dist, zero_at) > 0.1)


def test_bad_arguments_never_raise_in_the_scanner() -> None:
    bad = make_op("ReduceFrontMax", ["x"], ["y"], [make_arg("num_reduce_dim", 5)])
    assert kink_distances(bad, [np.zeros((2, 2))]) is None  # the kernel reports it, not us
    bad_n = make_op("ReluN", ["x"], ["y"], [make_arg("n", "six")])  # a string: ignored
    assert kink_distances(bad_n, [np.array([6.0])]) is not None
    assert kink_distances(make_op("Relu", ["x"], ["y"]), [np.zeros(2)]) is None  # not listed
    assert top2_gap(np.zeros((3, 1))) is None
    assert set(KINKS) >= {"Max", "Min", "Clip", "ReluN"}
