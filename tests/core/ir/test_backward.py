"""Backward-pass acceptance cases of spec §7.1 (upstream ``core_gradients_test.py``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from api_schemas import caffe2_pb2
from core.errors import GradientError, InvalidNetError, InvalidRequestError, VersionMismatchError
from core.ir.backward import backward
from core.ir.env import GenEnv
from core.registry import make_op
from core.types import GradValue
from tests.core.ir.testops import registered_test_ops


@pytest.fixture(autouse=True)
def _test_ops() -> Iterator[None]:
    with registered_test_ops():
        yield


def op(t: str, ins: Sequence[str], outs: Sequence[str]) -> caffe2_pb2.OperatorDef:
    return make_op(t, ins, outs)


def sig(ops: Sequence[caffe2_pb2.OperatorDef]) -> list[tuple[str, list[str], list[str]]]:
    return [(o.type, list(o.input), list(o.output)) for o in ops]


def run(ops: Sequence[caffe2_pb2.OperatorDef], ys: dict[str, GradValue]) -> tuple[
    list[caffe2_pb2.OperatorDef], dict[str, GradValue]
]:
    return backward(ops, ys, GenEnv())


def test_direct_chain() -> None:
    ops = [op("Direct", ["in"], ["hidden"]), op("Direct", ["hidden"], ["out"])]
    g, m = run(ops, {"out": "out_grad"})
    assert sig(g) == [
        ("DirectGradient", ["out_grad"], ["hidden_grad"]),
        ("DirectGradient", ["hidden_grad"], ["in_grad"]),
    ]
    assert m == {"in": "in_grad", "hidden": "hidden_grad", "out": "out_grad"}


def test_device_option_is_copied() -> None:
    ops = [op("Direct", ["in"], ["hidden"]), op("Direct", ["hidden"], ["out"])]
    for o in ops:
        o.device_option.device_type = 1
        o.device_option.device_id = 1
    g, _ = run(ops, {"out": "out_grad"})
    assert all(x.device_option.device_type == 1 and x.device_option.device_id == 1 for x in g)


def test_auto_seed() -> None:
    ops = [op("Direct", ["in"], ["hidden"]), op("Direct", ["hidden"], ["out"])]
    g, m = run(ops, {"out": None})
    assert sig(g) == [
        ("ConstantFill", ["out"], ["out_autogen_grad"]),
        ("DirectGradient", ["out_autogen_grad"], ["hidden_grad"]),
        ("DirectGradient", ["hidden_grad"], ["in_grad"]),
    ]
    assert g[0].arg[0].name == "value" and g[0].arg[0].f == 1.0
    assert m["out"] == "out_autogen_grad"


def test_seed_in_the_middle_and_empty() -> None:
    ops = [op("Direct", ["in"], ["hidden"]), op("Direct", ["hidden"], ["out"])]
    g, _ = run(ops, {"hidden": "hidden_grad"})
    assert sig(g) == [("DirectGradient", ["hidden_grad"], ["in_grad"])]
    g, m = run(ops, {})
    assert g == [] and m == {}


def test_in_place() -> None:
    ops = [op("Direct", ["in"], ["in"]), op("Direct", ["in"], ["out"])]
    g, _ = run(ops, {"out": "out_grad"})
    assert sig(g) == [
        ("DirectGradient", ["out_grad"], ["in_grad"]),
        ("DirectGradient", ["in_grad"], ["in_grad"]),
    ]


def test_version_mismatch_reports_history() -> None:
    ops = [op("UseInput", ["x"], ["y"]), op("Direct", ["y"], ["x"])]
    with pytest.raises(VersionMismatchError) as info:
        run(ops, {"x": "x_grad"})
    p = info.value.problems[0]
    assert 'needs input "x" at version 0, but currently we have version 1' in p.message
    assert "version (out) 1 <-- op[1]:Direct" in p.message
    assert (p.op_index, p.op_type) == (0, "UseInput")


def test_overwriting_without_reading_ends_the_older_versions_gradient() -> None:
    """x@1 is overwritten by x@2 before anything reads it: x@1 and x@0 get no gradient.

    Upstream handed x@2's gradient to the writer of x@1 (a version error); netgrad knows
    the older versions have none and warns about the dead write.
    """
    ops = [op("Direct", ["x"], ["x"]), op("Direct", ["y"], ["x"]), op("Direct", ["x"], ["y"])]
    env = GenEnv()
    g, gmap = backward(ops, {"y": "y_grad"}, env)
    assert sig(g) == [
        ("DirectGradient", ["y_grad"], ["x_grad"]),
        ("DirectGradient", ["x_grad"], ["y_grad"]),
    ]
    assert gmap == {"y": "y_grad"}  # the fed x reaches y only through the dead x@1
    (dead,) = [d for d in env.diagnostics if d.code == "dead_write"]
    assert (dead.op_index, dead.blobs) == (0, ("x",))


def test_use_output_chain_and_in_place() -> None:
    ops = [
        op("UseOutput", ["in"], ["hidden"]),
        op("UseOutput", ["hidden"], ["out"]),
        op("Direct", ["out"], ["sink"]),
    ]
    g, _ = run(ops, {"sink": "sink_grad"})
    assert sig(g) == [
        ("DirectGradient", ["sink_grad"], ["out_grad"]),
        ("UseOutputGradient", ["out", "out_grad"], ["hidden_grad"]),
        ("UseOutputGradient", ["hidden", "hidden_grad"], ["in_grad"]),
    ]
    ops = [
        op("UseOutput", ["in"], ["in"]),
        op("UseOutput", ["in"], ["out"]),
        op("Direct", ["out"], ["sink"]),
    ]
    g, _ = run(ops, {"sink": "sink_grad"})
    assert sig(g) == [
        ("DirectGradient", ["sink_grad"], ["out_grad"]),
        ("UseOutputGradient", ["out", "out_grad"], ["in_grad"]),
        ("UseOutputGradient", ["in", "in_grad"], ["in_grad"]),
    ]


def test_overwritten_output_and_input_are_rejected() -> None:
    ops = [
        op("UseOutput", ["in"], ["hidden"]),
        op("Direct", ["hidden"], ["hidden"]),
        op("UseOutput", ["hidden"], ["out"]),
        op("Direct", ["out"], ["sink"]),
    ]
    with pytest.raises(VersionMismatchError):
        run(ops, {"sink": "sink_grad"})
    with pytest.raises(VersionMismatchError):
        run([op("UseInput", ["in"], ["out"]), op("Direct", ["in"], ["in"])], {"out": "out_grad"})


def test_use_input() -> None:
    ops = [
        op("Direct", ["in"], ["hidden"]),
        op("UseInput", ["hidden"], ["out"]),
        op("Direct", ["out"], ["sink"]),
    ]
    g, _ = run(ops, {"sink": "sink_grad"})
    assert sig(g) == [
        ("DirectGradient", ["sink_grad"], ["out_grad"]),
        ("UseInputGradient", ["hidden", "out_grad"], ["hidden_grad"]),
        ("DirectGradient", ["hidden_grad"], ["in_grad"]),
    ]


def test_multi_use_accumulates_with_autosplit() -> None:
    ops = [
        op("Direct", ["in"], ["hidden1"]),
        op("Direct", ["in"], ["hidden2"]),
        op("Direct", ["hidden1", "hidden2"], ["out"]),
    ]
    g, m = run(ops, {"out": "out_grad"})
    assert sig(g) == [
        ("DirectGradient", ["out_grad"], ["hidden1_grad", "hidden2_grad"]),
        ("DirectGradient", ["hidden2_grad"], ["in_grad"]),
        ("DirectGradient", ["hidden1_grad"], ["_in_grad_autosplit_0"]),
        ("Sum", ["in_grad", "_in_grad_autosplit_0"], ["in_grad"]),
    ]
    assert m["in"] == "in_grad"
    assert list(g[-1].device_option.extra_info) == ["is_auto_gen_sum_ops:1"]


def test_nogradient_branch_needs_no_sum() -> None:
    ops = [
        op("Direct", ["in"], ["hidden1"]),
        op("Nogradient", ["in"], ["hidden2"]),
        op("Direct", ["hidden1", "hidden2"], ["out"]),
    ]
    g, _ = run(ops, {"out": "out_grad"})
    assert sig(g) == [
        ("DirectGradient", ["out_grad"], ["hidden1_grad", "hidden2_grad"]),
        ("DirectGradient", ["hidden1_grad"], ["in_grad"]),
    ]


def test_big_version_restarts_autosplit_counter() -> None:
    ops = [
        op("Direct", ["in"], ["in"]),
        op("Direct", ["in"], ["hidden1"]),
        op("Direct", ["in"], ["hidden2"]),
        op("Direct", ["hidden1", "hidden2"], ["in"]),
        op("Direct", ["in"], ["hidden3"]),
        op("Direct", ["in"], ["hidden4"]),
        op("Direct", ["in"], ["hidden5"]),
        op("Direct", ["hidden3", "hidden4", "hidden5"], ["out"]),
    ]
    g, _ = run(ops, {"out": "out_grad"})
    assert sig(g) == [
        ("DirectGradient", ["out_grad"], ["hidden3_grad", "hidden4_grad", "hidden5_grad"]),
        ("DirectGradient", ["hidden5_grad"], ["in_grad"]),
        ("DirectGradient", ["hidden4_grad"], ["_in_grad_autosplit_0"]),
        ("DirectGradient", ["hidden3_grad"], ["_in_grad_autosplit_1"]),
        ("Sum", ["in_grad", "_in_grad_autosplit_0", "_in_grad_autosplit_1"], ["in_grad"]),
        ("DirectGradient", ["in_grad"], ["hidden1_grad", "hidden2_grad"]),
        ("DirectGradient", ["hidden2_grad"], ["in_grad"]),
        ("DirectGradient", ["hidden1_grad"], ["_in_grad_autosplit_0"]),
        ("Sum", ["in_grad", "_in_grad_autosplit_0"], ["in_grad"]),
        ("DirectGradient", ["in_grad"], ["in_grad"]),
    ]


def test_sum_device_tags() -> None:
    def net(extra: list[str]) -> list[caffe2_pb2.OperatorDef]:
        ops = [
            op("Direct", ["in"], ["hidden1"]),
            op("Direct", ["in"], ["hidden2"]),
            op("Direct", ["hidden1", "hidden2"], ["out"]),
        ]
        for o in ops[:2]:
            o.device_option.extra_info.extend(extra)
        return ops

    g, _ = run(net(["parallelize:shard_by_1", "only_keep_is_auto_gen_sum_ops_tag:1"]), {"out": "g"})
    assert g[-1].type == "Sum"
    assert "parallelize:shard_by_1" not in g[-1].device_option.extra_info
    g, _ = run(net(["parallelize:shard_by_1"]), {"out": "g"})
    assert "parallelize:shard_by_1" in g[-1].device_option.extra_info


def test_stop_gradient_cases() -> None:
    g, _ = run(
        [
            op("Direct", ["in"], ["hidden"]),
            op("StopGradient", ["hidden"], ["hidden2"]),
            op("Direct", ["hidden2"], ["out"]),
        ],
        {"out": "out_grad"},
    )
    assert sig(g) == [("DirectGradient", ["out_grad"], ["hidden2_grad"])]
    with pytest.raises(InvalidNetError) as info:
        run(
            [
                op("Direct", ["in"], ["hidden"]),
                op("StopGradient", ["hidden"], ["auto_blobx"]),
                op("Direct", ["hidden"], ["out"]),
            ],
            {"out": "out_grad"},
        )
    assert "orphan" in info.value.problems[0].message
    assert info.value.problems[0].op_index == 1
    g, m = run(
        [
            op("Direct", ["in"], ["hidden"]),
            op("StopGradient", ["hidden"], ["hidden"]),
            op("Direct", ["hidden"], ["out"]),
        ],
        {"out": "out_grad"},
    )
    assert sig(g) == [("DirectGradient", ["out_grad"], ["hidden_grad"])]
    assert m == {"out": "out_grad"}
    g, m = run(
        [
            op("Direct", ["in"], ["hidden"]),
            op("Direct", ["hidden"], ["hidden2"]),
            op("StopGradient", ["hidden"], ["hidden3"]),
            op("Direct", ["hidden2", "hidden3"], ["out"]),
        ],
        {"out": "out_grad"},
    )
    assert sig(g) == [
        ("DirectGradient", ["out_grad"], ["hidden2_grad", "hidden3_grad"]),
        ("DirectGradient", ["hidden2_grad"], ["hidden_grad"]),
        ("DirectGradient", ["hidden_grad"], ["in_grad"]),
    ]
    assert m == {
        "in": "in_grad",
        "hidden": "hidden_grad",
        "hidden2": "hidden2_grad",
        "hidden3": "hidden3_grad",
        "out": "out_grad",
    }


def test_given_seed_that_is_also_consumed_is_accumulated() -> None:
    # Upstream drops the given seed (or raises on the name clash); we sum it.
    ops = [op("Direct", ["in"], ["y"]), op("Direct", ["y"], ["z"])]
    g, m = run(ops, {"y": "y_grad", "z": "z_grad"})
    # The caller's seed is a pass-through gradient: the sum goes to a fresh blob, so a
    # name other blobs may share is never written in place.
    assert sig(g) == [
        ("DirectGradient", ["z_grad"], ["_y_grad_autosplit_0"]),
        ("Sum", ["y_grad", "_y_grad_autosplit_0"], ["_y_grad_accumulated"]),
        ("DirectGradient", ["_y_grad_accumulated"], ["in_grad"]),
    ]
    assert m["y"] == "_y_grad_accumulated"


def test_in_place_sum_does_not_clobber_a_shared_pass_through_gradient() -> None:
    """Review finding: Sum(c, b -> c) gives b the gradient name of c; c's accumulation with
    another consumer must not overwrite it (upstream raised)."""
    from core.registry import make_arg
    from core.verify import InputSpec, RandomSpec, VerifyOptions, verify_net

    net = caffe2_pb2.NetDef()
    net.op.extend(
        [
            make_op("Scale", ["a"], ["c"], [make_arg("scale", 2.0)]),
            make_op("Scale", ["c"], ["z2"], [make_arg("scale", 3.0)]),
            make_op("Sum", ["c", "b"], ["c"]),
        ]
    )
    opts = VerifyOptions(
        inputs=[InputSpec("a", random=RandomSpec([3], seed=1)),
                InputSpec("b", random=RandomSpec([3], seed=2))],
        mode="full",
    )
    assert verify_net(net, ["c", "z2"], opts).report.passed


def test_every_offending_op_is_listed() -> None:
    from core.errors import GradientNotDefinedError

    ops = [
        op("Direct", ["a"], ["b"]),
        op("BBoxTransform", ["b"], ["c"]),
        op("GenerateProposals", ["b"], ["d"]),
        op("Direct", ["c", "d"], ["out"]),
    ]
    with pytest.raises((GradientNotDefinedError, GradientError)) as info:
        run(ops, {"out": "out_grad"})
    assert sorted(p.op_index or 0 for p in info.value.problems) == [1, 2]


def test_ys_must_be_list_or_dict() -> None:
    from core.api import gradient_for_net

    net = caffe2_pb2.NetDef()
    net.op.append(op("Direct", ["a"], ["b"]))
    with pytest.raises(InvalidRequestError):
        gradient_for_net(net, "b")
    with pytest.raises(InvalidRequestError):
        gradient_for_net(net, ["nope"])


def test_in_place_dropout_is_test_keeps_relu_gradient_valid() -> None:
    from core.registry import make_arg

    ops = [
        op("FC", ["x", "w", "b"], ["y"]),
        op("Relu", ["y"], ["y"]),
        make_op("Dropout", ["y"], ["y", "mask"], [make_arg("is_test", 1)]),
        op("AveragedLoss", ["y"], ["loss"]),
    ]
    g, m = run(ops, {"loss": None})
    assert [o.type for o in g] == [
        "ConstantFill", "AveragedLossGradient", "DropoutGrad", "ReluGradient", "FCGradient"
    ]
    assert m["w"] == "w_grad" and m["x"] == "x_grad"


def bug_case_1() -> list[caffe2_pb2.OperatorDef]:
    """bug-cases row 1: a training Dropout overwrites the output ReluGradient needs."""
    from core.registry import make_arg

    return [
        op("FC", ["x", "w", "b"], ["y"]),
        op("Relu", ["y"], ["y"]),
        make_op("Dropout", ["y"], ["y", "mask"], [make_arg("is_test", 0)]),
        op("AveragedLoss", ["y"], ["loss"]),
    ]


def test_bug_case_1_training_dropout_reports_the_version_error() -> None:
    with pytest.raises(VersionMismatchError) as info:
        run(bug_case_1(), {"loss": None})
    p = info.value.problems[0]
    assert 'needs output "y" at version 1, but currently we have version 2' in p.message
    assert (p.op_index, p.op_type, p.path) == (1, "Relu", "op[1]:Relu")


def test_recompute_rebuilds_overwritten_values() -> None:
    env = GenEnv(recompute=True)
    g, m = backward(bug_case_1(), {"loss": None}, env)
    recomputed = [o for o in g if any(n.endswith("_recompute") for n in o.output)]
    assert [(o.type, list(o.input), list(o.output)) for o in recomputed] == [
        ("FC", ["x", "w", "b"], ["_y_v0_recompute"]),
        ("Relu", ["_y_v0_recompute"], ["_y_v1_recompute"]),
    ]
    relu_grad = next(o for o in g if o.type == "ReluGradient")
    assert relu_grad.input[0] == "_y_v1_recompute"
    assert g.index(recomputed[-1]) < g.index(relu_grad)
    assert m["w"] == "w_grad"
    assert any(d.code == "recomputed_forward_value" for d in env.diagnostics)


def test_op_count_limit_covers_sub_nets() -> None:
    from core.errors import LimitExceededError
    from core.ir.env import GenLimits

    ops = [op("Direct", ["x"], ["y"]), op("Direct", ["y"], ["z"])]
    with pytest.raises(LimitExceededError) as info:
        backward(ops, {"z": "z_grad"}, GenEnv(GenLimits(max_ops=1)))
    assert info.value.problems[0].code == "too_many_ops"
    g, _ = backward(ops, {"z": "z_grad"}, GenEnv(GenLimits(max_ops=2)))
    assert len(g) == 2
