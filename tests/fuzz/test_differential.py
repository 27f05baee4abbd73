"""Differential fuzzing of gradient generation: a clean 4xx, or gradients that are right.

Random forward nets with ``Do``/``If``/``While`` (:mod:`tests.fuzz.strategies`) go through
:func:`tests.fuzz.property.check_outcome`. A failure prints the shrunk net as a listing
(hypothesis ``note``) and as the body of ``POST /v1/verify`` in a ready-to-paste ``curl``
command (the assertion message). Profiles: see :mod:`tests.fuzz.profiles`.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, event, given, note

from api_schemas import caffe2_pb2
from core.errors import NetgradError
from core.executor.executor import execute
from core.verify import materialize_inputs
from tests.fuzz.profiles import CI_EXAMPLES, fuzz_settings
from tests.fuzz.property import check_outcome
from tests.fuzz.strategies import FuzzCase, fuzz_cases

NetDef = caffe2_pb2.NetDef

#: Forward values above this make central differences unreliable: such cases are skipped.
MAX_MAGNITUDE = 1e3
#: Hypothesis settings: ``fuzz-ci`` unless ``--hypothesis-profile`` names a profile.
SETTINGS = fuzz_settings()
#: pytest-timeout for the property: a CI-sized run, plus hypothesis' shrinking (at most five
#: minutes) when it fails; no limit for larger profiles such as ``long``.
TIMEOUT_S = 0 if SETTINGS.max_examples > CI_EXAMPLES else 900


def _well_conditioned(case: FuzzCase) -> bool:
    """Whether every value of the forward run (sub-nets included) is finite and moderate.

    Central differences lose about ``1e-16 · |L| / step`` to rounding, so large values would
    make right gradients fail the tolerance; such cases are not informative and are skipped.
    """
    feeds = {k: v.astype(np.float64) for k, v in materialize_inputs(case.inputs).items()}
    seen: list[float] = [0.0]

    def observe(op: object, inputs: list[np.ndarray], path: str) -> None:
        for x in inputs:
            if x.dtype.kind == "f" and x.size:
                seen.append(float(np.max(np.abs(x))) if np.all(np.isfinite(x)) else np.inf)

    try:
        out = execute(case.net, feeds, observer=observe)
    except NetgradError:
        return True  # let check_outcome report a net that does not run
    seen += [float(np.max(np.abs(v), initial=0.0)) if np.all(np.isfinite(v)) else np.inf
             for v in out.values() if v.dtype.kind == "f"]
    return max(seen) <= MAX_MAGNITUDE


def _control_ops(net: NetDef) -> set[str]:
    """Types of the ``Do``/``If``/``While`` ops in ``net`` and its sub-nets (for statistics)."""
    found: set[str] = set()
    for op in net.op:
        if op.type in ("Do", "If", "While"):
            found.add(op.type)
        for arg in op.arg:
            if arg.HasField("n"):
                found |= _control_ops(arg.n)
    return found


@pytest.mark.timeout(TIMEOUT_S)
@SETTINGS
@given(case=fuzz_cases())
def test_gradient_is_clean_4xx_or_right(case: FuzzCase) -> None:
    """Every random net gets a located 4xx, or a runnable gradient net with right numbers."""
    assume(_well_conditioned(case))
    note(f"recompute={case.recompute} ys={case.ys} checked={case.checked}\n{case.listing()}")
    outcome = check_outcome(case.net, case.ys, case.inputs, case.recompute,
                            constants=case.constants, seed=case.seed)
    event(f"outcome {outcome}")
    event(f"recompute={case.recompute}")
    for op_type in sorted(_control_ops(case.net)):
        event(f"contains {op_type}")
    assert outcome in ("4xx", "200")
