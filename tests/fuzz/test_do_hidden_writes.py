"""Random nets whose ``Do`` ops write a blob through an input-only binding.

The generator binds every blob a ``Do`` body writes as an input too. Here the first output
of such a ``Do`` is dropped from its outputs, so the write reaches the outer blob through
the binding only, unseen by the SSA (review, stop 34). netgrad must refuse the net where
that write's gradient is needed (``undeclared_branch_write``) and be right elsewhere. A
test of its own, so the main differential fuzzer's examples stay those its seed gives.
"""

from __future__ import annotations

from hypothesis import assume, event, given, settings

from api_schemas import caffe2_pb2
from tests.fuzz.profiles import CI_EXAMPLES, fuzz_settings
from tests.fuzz.property import check_outcome
from tests.fuzz.strategies import FuzzCase, fuzz_cases
from tests.fuzz.test_differential import _well_conditioned

#: A tenth of the main fuzzer's examples (the long profile's under --hypothesis-profile).
SETTINGS = fuzz_settings()
if SETTINGS.max_examples >= CI_EXAMPLES:
    SETTINGS = settings(SETTINGS, max_examples=SETTINGS.max_examples // 10)


def _hide_first_outputs(net: caffe2_pb2.NetDef) -> int:
    """Drop the first output of each Do whose outputs are all among its inputs too (so its
    bindings still name each blob); the number of Dos changed."""
    changed = 0
    for op in net.op:
        for a in op.arg:
            if a.HasField("n"):
                changed += _hide_first_outputs(a.n)
        if (op.type == "Do" and len(op.output) > 1
                and set(op.output[:-1]) <= set(op.input[:-1])):
            del op.output[0]
            changed += 1
    return changed


@SETTINGS
@given(case=fuzz_cases())
def test_a_do_writing_through_its_input_binding_is_refused_or_right(case: FuzzCase) -> None:
    assume(_well_conditioned(case))
    assume(_hide_first_outputs(case.net) > 0)
    outcome = check_outcome(case.net, case.ys, case.inputs, case.recompute,
                            constants=case.constants, seed=case.seed)
    event(f"outcome {outcome}")
    assert outcome in ("4xx", "200")
