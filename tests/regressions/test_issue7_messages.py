"""Issue 7, D: the version error suggests ``recompute`` only when it can help."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from core.api import gradient_for_net
from core.errors import VersionMismatchError
from core.proto import codec
from core.registry import make_arg, make_op
from tests.regressions.issue7_nets import net_of

SUGGEST = "send recompute=true"
CANNOT = "recompute cannot help"


def overwritten_after_read(producer: str | None):  # type: ignore[no-untyped-def]
    """``z = Mul(x, w)`` then ``Scale(w -> w)``: MulGradient needs the overwritten w@k."""
    ops = []
    if producer == "Scale":
        ops.append(make_op("Scale", ["w0"], ["w"], [make_arg("scale", 2.0)]))
    elif producer == "UniformFill":
        ops.append(make_op("UniformFill", [], ["w"], [make_arg("shape", [2])]))
    ops += [
        make_op("Mul", ["x", "w"], ["z"]),
        make_op("Scale", ["w"], ["w"], [make_arg("scale", 10.0)]),
        make_op("Mul", ["z", "w"], ["y"]),
    ]
    return net_of("overwrite", *ops)


def _message(producer: str | None, recompute: bool) -> str:
    with pytest.raises(VersionMismatchError) as info:
        gradient_for_net(overwritten_after_read(producer), ["y"], recompute=recompute)
    return info.value.problems[0].message


def test_a_fed_value_says_recompute_cannot_help_and_what_would() -> None:
    for recompute in (False, True):
        msg = _message(None, recompute)
        assert CANNOT in msg and SUGGEST not in msg
        assert "'w' (version 0) is a value fed to the net" in msg
        assert "write the result of op[1]:Scale to a new blob instead of overwriting 'w'" in msg


def test_a_random_fill_says_recompute_cannot_help() -> None:
    msg = _message("UniformFill", False)
    assert CANNOT in msg and SUGGEST not in msg
    assert "produced by op[0]:UniformFill" in msg and "random or stateful" in msg


def test_a_recomputable_value_suggests_recompute() -> None:
    msg = _message("Scale", False)
    assert SUGGEST in msg and CANNOT not in msg
    gradient_for_net(overwritten_after_read("Scale"), ["y"], recompute=True)  # and it works


def test_the_http_problem_carries_the_advice() -> None:
    with TestClient(create_app(Settings(workers=0)), raise_server_exceptions=False) as c:
        r = c.post("/v1/gradients/net", json={
            "net": codec.to_json_obj(overwritten_after_read(None)), "ys": ["y"],
            "recompute": True,
        })
    assert r.status_code == 422, r.text
    (err,) = r.json()["errors"]
    assert CANNOT in err["message"] and (err["op_index"], err["op_type"]) == (0, "Mul")


def test_a_loop_counter_on_its_limit_is_reported_as_non_differentiable() -> None:
    """Checking a float loop counter: its comparison sits on a tie (counter == LIMIT at the
    end), so a mismatch there is flagged, not a silent false alarm (walkthrough finding)."""
    import numpy as np

    from core.verify import InputSpec, VerifyOptions, verify_net
    from tests.regressions.issue7_nets import while_body_overwrites_carried

    case = while_body_overwrites_carried(2)
    feeds = case.all_feeds()
    opts = VerifyOptions(inputs=[InputSpec.from_array(k, np.asarray(v)) for k, v in
                                 feeds.items()], mode="full", check=["counter", "a"])
    res = verify_net(case.net, ["loss"], opts)
    by_blob = {b.blob: b for b in res.report.blobs}
    assert by_blob["a"].passed
    assert by_blob["counter"].nondifferentiable
    assert any(d.code == "nondifferentiable_point" and d.op_type == "LT"
               for d in res.diagnostics)
