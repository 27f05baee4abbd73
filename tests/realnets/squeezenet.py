"""SqueezeNet 1.1 weight shapes for the model-zoo predict net (its init net is not shipped).

Channel counts are SqueezeNet 1.1's published architecture; kernel sizes come from the
net's own Conv args, input channels from tracing the net.
"""

from __future__ import annotations

from api_schemas import caffe2_pb2
from core.registry import find_arg

#: output channels per Conv output blob prefix (SqueezeNet 1.1)
FIRE = {2: (16, 64), 3: (16, 64), 4: (32, 128), 5: (32, 128), 6: (48, 192), 7: (48, 192),
        8: (64, 256), 9: (64, 256)}


def conv_out_channels(out: str) -> int:
    if out.startswith("conv1"):
        return 64
    if out.startswith("conv10"):
        return 1000
    fire = int(out.split("/")[0].removeprefix("fire"))
    squeeze, expand = FIRE[fire]
    return squeeze if "squeeze" in out else expand


def weight_shapes(net: caffe2_pb2.NetDef, data_channels: int = 3) -> dict[str, list[int]]:
    """Blob -> shape for every Conv weight and bias of a SqueezeNet predict net."""
    channels = {"data": data_channels}
    shapes: dict[str, list[int]] = {}
    for op in net.op:
        if op.type == "Conv":
            c_in = channels[op.input[0]]
            c_out = conv_out_channels(op.output[0])
            k_arg = find_arg(op, "kernel")
            k = int(k_arg.i) if k_arg is not None else 1
            shapes[op.input[1]] = [c_out, c_in, k, k]
            if len(op.input) > 2:
                shapes[op.input[2]] = [c_out]
            channels[op.output[0]] = c_out
        elif op.type == "Concat":
            channels[op.output[0]] = sum(channels[i] for i in op.input)
        elif len(op.input) and op.input[0] in channels:
            for out in op.output[:1]:
                channels[out] = channels[op.input[0]]
    return shapes
