"""The floor walk of ``bench/`` (``bench.nets.floor_walk``) does the work it claims to time.

The issue 10 growth figure is judged beside that walk (bench/README.md §5f), so it must emit
one protobuf op per differentiated forward op, read the names out of protobuf and keep a
blob -> gradient map. A walk that skipped work would make netgrad look slow beside it.
"""

from __future__ import annotations

from bench.nets import floor_walk, mlp
from core.api import gradient_for_net


def test_floor_walk_emits_one_op_per_forward_op_like_the_pass() -> None:
    net = mlp(4)
    ops = floor_walk(net, "loss")
    real = gradient_for_net(net, ["loss"]).grad_ops
    # one gradient op per forward op, in reverse order, same types as the real pass
    assert [op.type for op in ops] == [f"{op.type}Gradient" for op in reversed(net.op)]
    assert [op.type for op in real[1:]] == [op.type for op in ops]  # (real[0]: the seed)
    first = ops[0]
    assert list(first.input) == ["prob", "loss_grad"]
    assert list(first.output) == ["prob_grad"]
    assert all(op.is_gradient_op for op in ops)
    # the walk follows gradients: the FC of layer 0 reads the gradient Relu 0 wrote
    fc0 = ops[-1]
    assert list(fc0.input) == ["data", "fc0_w", "fc0_b", "fc0_grad"]
    assert list(fc0.output) == ["data_grad", "fc0_w_grad", "fc0_b_grad"]


def test_floor_walk_stops_where_no_gradient_flows() -> None:
    net = mlp(2)
    assert floor_walk(net, "not_a_blob") == []
