"""Example nets of the page (``GET /``), the CLI docs and the client examples.

SqueezeNet 1.1 is built here from its published architecture (layer names as in the Caffe2
model zoo's ``squeezenet`` predict net: ``conv1``, ``fire2/squeeze1x1``, ... ``conv10``,
``pool10``, ``softmaxout``; channel counts of the paper's v1.1), so the service ships no model
file. :func:`random_init_net` writes an init_net of ``GivenTensorFill`` ops with seeded random
values of the right shapes, the way a model-zoo ``init_net.pb`` carries trained weights.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from api_schemas import caffe2_pb2
from app.api import docs
from core.proto import codec

NetDef = caffe2_pb2.NetDef

#: SqueezeNet 1.1 fire modules: number -> (squeeze channels, expand channels per branch).
FIRE = {2: (16, 64), 3: (16, 64), 4: (32, 128), 5: (32, 128), 6: (48, 192), 7: (48, 192),
        8: (64, 256), 9: (64, 256)}
#: Fire modules followed by a 3x3/2 max pool.
POOL_AFTER = {3: "pool3", 5: "pool5"}


def _arg(name: str, value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return {"name": name, "s": value}
    if isinstance(value, float):
        return {"name": name, "f": value}
    return {"name": name, "i": value}


def _conv(x: str, out: str, kernel: int, stride: int = 1, pad: int = 0) -> list[dict[str, Any]]:
    return [
        {"type": "Conv", "input": [x, f"{out}_w", f"{out}_b"], "output": [out],
         "arg": [_arg("stride", stride), _arg("pad", pad), _arg("kernel", kernel)]},
        {"type": "Relu", "input": [out], "output": [out]},
    ]


def _max_pool(x: str, out: str) -> dict[str, Any]:
    return {"type": "MaxPool", "input": [x], "output": [out],
            "arg": [_arg("stride", 2), _arg("pad", 0), _arg("kernel", 3), _arg("order", "NCHW"),
                    _arg("legacy_pad", 3)]}


def squeezenet(classes: int = 1000) -> dict[str, Any]:
    """SqueezeNet 1.1 as a JSON NetDef: 66 ops, input ``data`` (N x 3 x H x W, NCHW), output
    ``softmaxout`` (N x ``classes``); ``pool10`` holds the logits."""
    ops: list[dict[str, Any]] = [*_conv("data", "conv1", 3, stride=2), _max_pool("conv1", "pool1")]
    x = "pool1"
    for k, (_squeeze, _expand) in FIRE.items():
        f = f"fire{k}"
        ops += _conv(x, f"{f}/squeeze1x1", 1)
        ops += _conv(f"{f}/squeeze1x1", f"{f}/expand1x1", 1)
        ops += _conv(f"{f}/squeeze1x1", f"{f}/expand3x3", 3, pad=1)
        ops.append({"type": "Concat", "input": [f"{f}/expand1x1", f"{f}/expand3x3"],
                    "output": [f"{f}/concat", f"_{f}/concat_dims"],
                    "arg": [_arg("order", "NCHW")]})
        x = f"{f}/concat"
        if k in POOL_AFTER:
            ops.append(_max_pool(x, POOL_AFTER[k]))
            x = POOL_AFTER[k]
    ops.append({"type": "Dropout", "input": [x], "output": [x, "_fire9/concat_mask"],
                "arg": [_arg("ratio", 0.5), _arg("is_test", 1)]})
    ops += _conv(x, "conv10", 1)
    ops.append({"type": "AveragePool", "input": ["conv10"], "output": ["pool10"],
                "arg": [_arg("stride", 1), _arg("pad", 0), _arg("kernel", 0),
                        _arg("order", "NCHW"), _arg("legacy_pad", 3),
                        _arg("global_pooling", 1)]})
    ops.append({"type": "Softmax", "input": ["pool10"], "output": ["softmaxout"]})
    weights = [b for op in ops if op["type"] == "Conv" for b in op["input"][1:]]
    return {"name": "squeezenet", "op": ops, "external_input": ["data", *weights],
            "external_output": ["softmaxout"]}


def weight_shapes(net: NetDef, data_channels: int = 3, classes: int = 1000) -> dict[str, list[int]]:
    """Blob -> shape of every Conv weight and bias of a SqueezeNet 1.1 predict net (ours or
    the model zoo's: same blob names), found by tracing channels through the net."""
    channels = {"data": data_channels}
    shapes: dict[str, list[int]] = {}
    for op in net.op:
        if op.type == "Conv":
            out = op.output[0]
            if out.startswith("conv1"):
                c_out = 64 if out == "conv1" else classes
            else:
                squeeze, expand = FIRE[int(out.split("/")[0].removeprefix("fire"))]
                c_out = squeeze if "squeeze" in out else expand
            k = next((int(a.i) for a in op.arg if a.name == "kernel"), 1)
            shapes[op.input[1]] = [c_out, channels[op.input[0]], k, k]
            if len(op.input) > 2:
                shapes[op.input[2]] = [c_out]
            channels[out] = c_out
        elif op.type == "Concat":
            channels[op.output[0]] = sum(channels[i] for i in op.input)
        elif len(op.input) and op.input[0] in channels:
            for out in op.output[:1]:
                channels[out] = channels[op.input[0]]
    return shapes


def random_init_net(shapes: dict[str, list[int]], seed: int = 0, scale: float = 0.2) -> NetDef:
    """An init_net of one ``GivenTensorFill`` per blob: float32 values uniform in
    ``[-scale, scale)`` from ``numpy.random.default_rng(seed)``, in ``shapes`` order."""
    rng = np.random.default_rng(seed)
    net = NetDef(name="init")
    for blob, shape in shapes.items():
        values = rng.uniform(-scale, scale, size=int(np.prod(shape))).astype(np.float32)
        op = net.op.add(type="GivenTensorFill", output=[blob])
        op.arg.add(name="shape", ints=shape)
        op.arg.add(name="values", floats=values.tolist())
    return net


#: The squeezenet example's verification: a small image, the logits as the loss output
#: (through the softmax of random weights every gradient is ~1e-8, too small to check),
#: a sample of inputs to check, relative tolerance only.
SQUEEZENET_VERIFY: dict[str, Any] = {
    "ys": ["pool10"],
    "data_shape": [1, 3, 64, 64],
    "check": ["data", "conv1_w", "fire5/expand3x3_w", "conv10_b"],
    "passes": 2,
    "atol": 0.0,
    "rtol": 1e-4,
}


def squeezenet_verify_inputs() -> list[dict[str, Any]]:
    """Random input specs (JSON ``InputSpec`` list) for the squeezenet example."""
    net = codec.from_json_obj(squeezenet(), NetDef)
    inputs: list[dict[str, Any]] = [
        {"blob": "data", "random": {"shape": SQUEEZENET_VERIFY["data_shape"], "seed": 11}}
    ]
    for k, (blob, shape) in enumerate(weight_shapes(net).items()):
        inputs.append({"blob": blob, "random": {"shape": shape, "seed": 100 + k,
                                                "distribution": "uniform",
                                                "low": -0.2, "high": 0.2}})
    return inputs


def examples() -> dict[str, dict[str, Any]]:
    """The page's example nets: name -> ``{"title", "net", "ys", "verify"}`` (JSON)."""
    mlp_verify = {k: v for k, v in docs.VERIFY_REQUEST.items() if k not in ("net", "ys")}
    sq = SQUEEZENET_VERIFY
    return {
        "squeezenet": {
            "title": "SqueezeNet 1.1 (66 ops)",
            "net": squeezenet(),
            "ys": sq["ys"],
            "verify": {"inputs": squeezenet_verify_inputs(), "mode": "fast",
                       "check": sq["check"], "passes": sq["passes"],
                       "tolerances": {"atol": sq["atol"], "rtol": sq["rtol"]}},
        },
        "mlp": {
            "title": "FC + Relu + Softmax",
            "net": docs.MLP_NET,
            "ys": ["prob"],
            "verify": mlp_verify,
        },
        "if_tutorial": {
            "title": "If tutorial (control flow)",
            "net": docs.IF_TUTORIAL_NET,
            "ys": ["z"],
            "verify": {"inputs": [{"blob": "x", "tensor": {"shape": [], "data": [0.5]}}],
                       "mode": "full", "check": ["x"]},
        },
    }
