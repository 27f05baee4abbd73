"""Write the issue-8 training nets of helper 8c as JSON files beside this script.

Run ``python -m tests.data.gen_training_nets`` from the project root to regenerate them;
``tests/realnets/test_training_nets_8c.py`` checks that the files match this script.

The nets are built the way Caffe2's Python front end builds them (``brew`` helpers on a
``ModelHelper``): parameters are named ``<blob>_w`` / ``<blob>_b`` (FC, Conv), LayerNorm is
``LayerNorm`` followed by ``Mul``/``Add`` with ``<blob>_scale`` / ``<blob>_bias``
(``brew.layer_norm``), Detectron's frozen batch norm is an ``AffineChannel`` with ``_s`` /
``_b`` parameters. Shapes are small so that ``/v1/verify`` runs in well under a second.

Each file holds ``{"description", "net", "ys", "inputs", "params"}``: ``net`` is the forward
NetDef in netgrad's JSON mapping, ``ys`` the loss blobs, ``inputs`` the fed blobs as
``/v1/verify`` takes them and ``params`` the trainable parameters (the blobs whose gradient
is checked).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


class Model:
    """A minimal stand-in for ``model_helper.ModelHelper`` + ``brew`` (ops as JSON dicts)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.ops: list[dict[str, Any]] = []
        self.inputs: list[dict[str, Any]] = []
        self.params: list[str] = []
        self._seed = 100

    # -- blobs -------------------------------------------------------------------------------
    def param(self, blob: str, shape: list[int], scale: float = 0.3, trainable: bool = True) -> str:
        """A parameter drawn uniformly in ``[-scale, scale)`` (seeded per parameter)."""
        self._seed += 1
        self.inputs.append(
            {
                "blob": blob,
                "random": {
                    "shape": shape,
                    "dtype": "float64",
                    "distribution": "uniform",
                    "low": -scale,
                    "high": scale,
                    "seed": self._seed,
                },
            }
        )
        if trainable:
            self.params.append(blob)
        return blob

    def const_param(self, blob: str, values: list[float]) -> str:
        """A fixed, non-trainable parameter (Detectron's frozen AffineChannel scale/bias)."""
        self.inputs.append(
            {"blob": blob, "tensor": {"shape": [len(values)], "dtype": "float64", "data": values}}
        )
        return blob

    def data(self, blob: str, shape: list[int], seed: int) -> str:
        """A random float input (the minibatch)."""
        self.inputs.append(
            {"blob": blob, "random": {"shape": shape, "dtype": "float64", "seed": seed}}
        )
        return blob

    def int_data(self, blob: str, shape: list[int], values: list[int]) -> str:
        """A fixed int32 input (labels)."""
        self.inputs.append(
            {"blob": blob, "tensor": {"shape": shape, "dtype": "int32", "data": values}}
        )
        return blob

    def float_data(self, blob: str, shape: list[int], values: list[float]) -> str:
        """A fixed float input that is not checked (targets, loss weights)."""
        self.inputs.append(
            {"blob": blob, "tensor": {"shape": shape, "dtype": "float64", "data": values}}
        )
        return blob

    # -- ops ---------------------------------------------------------------------------------
    def op(self, op_type: str, inputs: list[str], outputs: list[str], **args: Any) -> str:
        """Append an op (``net.<Type>(inputs, outputs, **args)``); returns output 0."""
        arg_list = []
        for k, v in args.items():
            if isinstance(v, bool) or isinstance(v, int):
                arg_list.append({"name": k, "i": int(v)})
            elif isinstance(v, float):
                arg_list.append({"name": k, "f": v})
            elif isinstance(v, str):
                arg_list.append({"name": k, "s": v})
            else:
                arg_list.append({"name": k, "ints": list(v)})
        op: dict[str, Any] = {"type": op_type, "input": inputs, "output": outputs}
        if arg_list:
            op["arg"] = arg_list
        self.ops.append(op)
        return outputs[0]

    def fc(self, blob_in: str, blob_out: str, dim_in: int, dim_out: int) -> str:
        """``brew.fc``: params ``<out>_w`` (dim_out × dim_in) and ``<out>_b``."""
        w = self.param(f"{blob_out}_w", [dim_out, dim_in], scale=1.0 / math.sqrt(dim_in))
        b = self.param(f"{blob_out}_b", [dim_out], scale=0.1)
        return self.op("FC", [blob_in, w, b], [blob_out])

    def layer_norm(self, blob_in: str, blob_out: str, dim_in: int) -> str:
        """``brew.layer_norm``: LayerNorm, then Mul by ``_scale`` and Add ``_bias`` (axis 1)."""
        self.op(
            "LayerNorm",
            [blob_in],
            [f"{blob_out}_norm", f"{blob_out}_mean", f"{blob_out}_stdev"],
            axis=1,
            epsilon=1e-4,
        )
        s = self.param(f"{blob_out}_scale", [dim_in], scale=1.0)
        b = self.param(f"{blob_out}_bias", [dim_in], scale=0.1)
        self.op("Mul", [f"{blob_out}_norm", s], [f"{blob_out}_scaled"], broadcast=1, axis=1)
        return self.op("Add", [f"{blob_out}_scaled", b], [blob_out], broadcast=1, axis=1)

    def conv(
        self, blob_in: str, blob_out: str, dim_in: int, dim_out: int, kernel: int, pad: int
    ) -> str:
        """``brew.conv`` (NCHW): params ``<out>_w`` (out, in, k, k) and ``<out>_b``."""
        w = self.param(f"{blob_out}_w", [dim_out, dim_in, kernel, kernel], scale=0.4)
        b = self.param(f"{blob_out}_b", [dim_out], scale=0.1)
        return self.op(
            "Conv", [blob_in, w, b], [blob_out], kernel=kernel, pad=pad, stride=1, order="NCHW"
        )

    def dump(self, description: str, ys: list[str]) -> dict[str, Any]:
        external = [i["blob"] for i in self.inputs]
        return {
            "description": description,
            "net": {"name": self.name, "op": self.ops, "external_input": external},
            "ys": ys,
            "inputs": self.inputs,
            "params": self.params,
        }


def transformer_block() -> dict[str, Any]:
    """A pre-norm transformer encoder block with two heads and a Gelu MLP, then an L2 loss.

    Tokens are rows: X is (B·S, D) with B = 2 sequences of S = 3 tokens, D = 4, H = 2 heads
    of size 2. Attention: per head ``softmax(Q·Kᵀ/√dh)·V`` with ``BatchMatMul`` over
    (B·H, S, dh) tensors made by ``Reshape``/``Transpose``; residual ``Add``s around the
    attention and the MLP (4 → 8 → 4, ``Gelu``).
    """
    b, s, d, h = 2, 3, 4, 2
    dh = d // h
    m = Model("transformer_encoder_block")
    x = m.data("tokens", [b * s, d], seed=1)
    target = m.data("target", [b * s, d], seed=2)
    ln1 = m.layer_norm(x, "ln1", d)
    heads = {}
    for name in ("q", "k", "v"):
        flat = m.fc(ln1, name, d, d)
        m.op("Reshape", [flat], [f"{name}_4d", f"{name}_shape0"], shape=[b, s, h, dh])
        m.op("Transpose", [f"{name}_4d"], [f"{name}_bhsd"], axes=[0, 2, 1, 3])
        heads[name] = m.op(
            "Reshape", [f"{name}_bhsd"], [f"{name}_heads", f"{name}_shape1"], shape=[b * h, s, dh]
        )
    m.op("BatchMatMul", [heads["q"], heads["k"]], ["scores"], trans_b=1)
    m.op("Scale", ["scores"], ["scores_scaled"], scale=1.0 / math.sqrt(dh))
    m.op("Softmax", ["scores_scaled"], ["attn"], axis=2)
    m.op("BatchMatMul", ["attn", heads["v"]], ["ctx_heads"])
    m.op("Reshape", ["ctx_heads"], ["ctx_4d", "ctx_shape0"], shape=[b, h, s, dh])
    m.op("Transpose", ["ctx_4d"], ["ctx_bshd"], axes=[0, 2, 1, 3])
    m.op("Reshape", ["ctx_bshd"], ["ctx", "ctx_shape1"], shape=[b * s, d])
    attn_out = m.fc("ctx", "attn_out", d, d)
    m.op("Add", [x, attn_out], ["res1"])
    ln2 = m.layer_norm("res1", "ln2", d)
    m.fc(ln2, "mlp_fc1", d, 2 * d)
    m.op("Gelu", ["mlp_fc1"], ["mlp_act"])
    mlp_out = m.fc("mlp_act", "mlp_fc2", 2 * d, d)
    m.op("Add", ["res1", mlp_out], ["block_out"])
    m.op("SquaredL2Distance", ["block_out", target], ["dist"])
    m.op("AveragedLoss", ["dist"], ["loss"])
    return m.dump(
        "Transformer encoder block (LayerNorm, BatchMatMul attention with Softmax, Gelu MLP, "
        "residual Adds) with an L2 loss; issue 8 acceptance (helper 8c)",
        ["loss"],
    )


def detectron_head() -> dict[str, Any]:
    """A Detectron-style RPN training head on a small backbone stage.

    ``conv1`` → ``AffineChannel`` (learnable, Detectron's ``is_learnable``) → ``Relu`` →
    ``res2_conv`` → in-place frozen ``AffineChannel`` (``_bn_s``/``_bn_b`` not trained, as
    Detectron's frozen BN) → ``Relu`` → ``conv_rpn`` → ``Relu`` → ``rpn_cls_logits`` (A = 3
    anchors) and ``rpn_bbox_pred`` (4A). Losses as Detectron's ``add_single_scale_rpn_losses``:
    ``SigmoidCrossEntropyLoss`` on the objectness logits with int32 labels (−1 ignored) and
    ``SmoothL1Loss`` (beta 1/9) on the box deltas with inside/outside weights.
    """
    n, c_in, hw, c, a = 1, 3, 6, 4, 3
    m = Model("detectron_rpn_head")
    m.data("data", [n, c_in, hw, hw], seed=3)
    m.conv("data", "conv1", c_in, c, 3, 1)
    s1 = m.param("conv1_bn_s", [c], scale=1.0)
    b1 = m.param("conv1_bn_b", [c], scale=0.1)
    m.op("AffineChannel", ["conv1", s1, b1], ["conv1_bn"], is_learnable=1)
    m.op("Relu", ["conv1_bn"], ["conv1_relu"])
    m.conv("conv1_relu", "res2_conv", c, c, 3, 1)
    s2 = m.const_param("res2_bn_s", [0.9, 1.1, 0.8, 1.2])
    b2 = m.const_param("res2_bn_b", [0.05, -0.05, 0.1, 0.0])
    m.op("AffineChannel", ["res2_conv", s2, b2], ["res2_conv"])  # in place, frozen
    m.op("Relu", ["res2_conv"], ["res2_relu"])
    m.conv("res2_relu", "conv_rpn", c, c, 3, 1)
    m.op("Relu", ["conv_rpn"], ["conv_rpn"])
    m.conv("conv_rpn", "rpn_cls_logits", c, a, 1, 0)
    m.conv("conv_rpn", "rpn_bbox_pred", c, 4 * a, 1, 0)
    cells = n * a * hw * hw
    labels = [(-1, 0, 1, 0, 0, 1, 0)[k % 7] for k in range(cells)]
    m.int_data("rpn_labels_int32", [n, a, hw, hw], labels)
    boxes = n * 4 * a * hw * hw
    m.float_data(
        "rpn_bbox_targets",
        [n, 4 * a, hw, hw],
        [round(0.37 * math.sin(1.3 * k), 4) for k in range(boxes)],
    )
    inside = [1.0 if labels[(k // 4) % cells] == 1 else 0.0 for k in range(boxes)]
    m.float_data("rpn_bbox_inside_weights", [n, 4 * a, hw, hw], inside)
    m.float_data("rpn_bbox_outside_weights", [n, 4 * a, hw, hw], [1.0 / cells] * boxes)
    m.op(
        "SigmoidCrossEntropyLoss",
        ["rpn_cls_logits", "rpn_labels_int32"],
        ["loss_rpn_cls"],
        scale=1.0,
    )
    m.op(
        "SmoothL1Loss",
        [
            "rpn_bbox_pred",
            "rpn_bbox_targets",
            "rpn_bbox_inside_weights",
            "rpn_bbox_outside_weights",
        ],
        ["loss_rpn_bbox"],
        beta=1.0 / 9.0,
        scale=1.0,
    )
    return m.dump(
        "Detectron-style RPN head: AffineChannel backbone stage (learnable and in-place "
        "frozen), SigmoidCrossEntropyLoss + SmoothL1Loss; issue 8 acceptance (helper 8c)",
        ["loss_rpn_cls", "loss_rpn_bbox"],
    )


NETS = {
    "transformer_block.json": transformer_block,
    "detectron_rpn_head.json": detectron_head,
}


def render(name: str) -> str:
    """The JSON text of one net file (sorted keys, 1-space indent, trailing newline)."""
    return json.dumps(NETS[name](), indent=1, sort_keys=True) + "\n"


def main() -> None:
    for name in NETS:
        (HERE / name).write_text(render(name), encoding="utf-8")


if __name__ == "__main__":
    main()
