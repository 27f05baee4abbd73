"""Fuzzing ``densify``: sparse and dense gradients of one table, summed densely (stop 24).

The random nets of :mod:`tests.fuzz.strategies` keep sparse tables apart from dense readers,
so they never reach ``densify``. Here one embedding table ``E`` ([4, 3], checked) has two to
four readers: sparse ones (``Gather``, ``SparseLengthsSum``, whose gradients are
GradientSlices), dense ones (``Scale``, ``Tanh``, ``FC``) and ``Sum(E, E or F)`` read by a
``Gather`` (a pass-through maker handed a densified slice). Now and then an in-place
``Scale`` of ``E`` sits between two readers (two versions, each with its own gradients), a
reader's output goes on through ``Tanh`` (a nonlinear loss), and after the readers the net
overwrites ``E`` (``Concat([E, E]) -> E`` doubles its rows, or an in-place ``Scale``) or an
index blob. Every case is a clean 4xx or a verified 200
(:func:`tests.fuzz.property.check_outcome` with ``densify``); on the engine before the fix
the overwrite by ``Concat`` gave a ``SparseToDense`` of the wrong shape with a 200.
"""

from __future__ import annotations

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from api_schemas import caffe2_pb2
from core.registry import make_arg, make_op
from core.verify import InputSpec, RandomSpec, TensorSpec
from tests.fuzz.profiles import fuzz_settings
from tests.fuzz.property import check_outcome

#: A fifth of the random nets' examples (500 in CI, 2 000 in the ``long`` profile).
SETTINGS = settings(fuzz_settings(), max_examples=max(1, fuzz_settings().max_examples // 5))

Case = tuple[caffe2_pb2.NetDef, list[str], list[InputSpec], list[str], bool]


def _ints(name: str, values: list[int], dtype: str) -> InputSpec:
    return InputSpec(name, tensor=TensorSpec([len(values)], dtype, values))


@st.composite
def mixed_tables(draw: st.DrawFn) -> Case:
    """A net, its ``ys``, inputs, constants (index and length blobs) and ``recompute``."""
    net = caffe2_pb2.NetDef(name="densify")
    inputs = [InputSpec("E", random=RandomSpec([4, 3], seed=draw(st.integers(0, 99))))]
    constants: list[str] = []
    ys: list[str] = []
    kinds: list[str] = []
    for k in range(draw(st.integers(2, 4))):
        if k and draw(st.integers(0, 4)) == 0:  # a new version of E between two readers
            net.op.append(make_op("Scale", ["E"], ["E"], [make_arg("scale", 0.5)]))
            kinds.append("Scale-in-place")
        kind = draw(st.sampled_from(["Gather", "SparseLengthsSum", "Scale", "Tanh", "FC",
                                     "SumGather"]))
        kinds.append(kind)
        out = f"Y{k}"
        if kind == "SumGather":  # a pass-through maker between the table and a Gather
            idx, other = f"IDX{k}", draw(st.sampled_from(["E", "E", f"F{k}"]))
            if other != "E":
                inputs.append(InputSpec(other, random=RandomSpec([4, 3], seed=20 + k)))
            inputs.append(_ints(idx, [draw(st.integers(0, 3)) for _ in range(2)], "int64"))
            constants.append(idx)
            net.op.extend([make_op("Sum", ["E", other], [f"S{k}"]),
                           make_op("Gather", [f"S{k}", idx], [out])])
        elif kind in ("Gather", "SparseLengthsSum"):
            idx = f"IDX{k}"
            n = draw(st.integers(1, 3))
            inputs.append(_ints(idx, [draw(st.integers(0, 3)) for _ in range(n)], "int64"))
            constants.append(idx)
            if kind == "Gather":
                net.op.append(make_op("Gather", ["E", idx], [out]))
            else:
                ln = f"LEN{k}"
                first = draw(st.integers(0, n))
                inputs.append(_ints(ln, [first, n - first], "int32"))
                constants.append(ln)
                net.op.append(make_op("SparseLengthsSum", ["E", idx, ln], [out]))
        elif kind == "FC":
            x = f"X{k}"
            inputs += [InputSpec(x, random=RandomSpec([2, 3], seed=k)),
                       InputSpec(f"B{k}", random=RandomSpec([4], seed=10 + k))]
            net.op.append(make_op("FC", [x, "E", f"B{k}"], [out]))
        else:
            args = [make_arg("scale", 1.5)] if kind == "Scale" else []
            net.op.append(make_op(kind, ["E"], [out], args))
        if draw(st.booleans()):  # a nonlinear loss in this reader's output
            net.op.append(make_op("Tanh", [out], [out + "_t"]))
            out += "_t"
        ys.append(out)
    after = draw(st.sampled_from(["none", "none", "concat", "scale", "index"]))
    if after == "concat":
        net.op.append(make_op("Concat", ["E", "E"], ["E", "E_info"], [make_arg("axis", 0)]))
    elif after == "scale":
        net.op.append(make_op("Scale", ["E"], ["E"], [make_arg("scale", 2.0)]))
    elif after == "index" and constants and constants[0].startswith("IDX"):
        # the first index blob is overwritten after everything read it
        net.op.append(make_op("Concat", [constants[0], constants[0]],
                              [constants[0], constants[0] + "_info"], [make_arg("axis", 0)]))
    recompute = draw(st.booleans())
    event(f"readers {'+'.join(kinds)}, after {after}, recompute={recompute}")
    return net, ys, inputs, constants, recompute


@pytest.mark.timeout(900)
@SETTINGS
@given(case=mixed_tables())
def test_densified_gradients_are_right_or_refused(case: Case) -> None:
    net, ys, inputs, constants, recompute = case
    outcome = check_outcome(net, ys, inputs, recompute, constants=constants, seed=24,
                            densify=True)
    event(f"outcome {outcome}")
    assert outcome in ("4xx", "200")
