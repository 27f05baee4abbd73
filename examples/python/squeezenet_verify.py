# %% [markdown]
# # Verify a model-zoo net with (random) weights through netgrad-client
#
# A Caffe2 model ships as `predict_net.pb` (the ops) plus `init_net.pb` (fill ops that write
# the weights). Here the predict net is SqueezeNet from the model zoo and the init net is
# generated with the right shapes and random values; netgrad runs the init net first,
# feeds its blobs to the predict net, and checks the generated gradient against finite
# differences. Run it from a netgrad checkout against a running server:
#
#     python examples/python/squeezenet_verify.py PREDICT_NET.pb [--url http://127.0.0.1:8000]
#
# Without a file it uses the SqueezeNet 1.1 that netgrad's page shows (same layer names).

# %%
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "clients" / "python" / "src"), str(ROOT)]  # uninstalled checkout

from netgrad.client import Client, random_input  # noqa: E402
from netgrad.proto import caffe2_pb2  # noqa: E402

from app.ui.examples import random_init_net, squeezenet, weight_shapes  # noqa: E402

# %% Load the predict net
parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("net", nargs="?", help="a SqueezeNet predict_net.pb (default: built in)")
parser.add_argument("--url", default="http://127.0.0.1:8000", help="the netgrad server")
args = parser.parse_args()
if args.net:
    net = caffe2_pb2.NetDef.FromString(Path(args.net).read_bytes())
else:
    from netgrad.client import as_message

    net = as_message(squeezenet(), caffe2_pb2.NetDef)
print(f"{net.name or 'net'}: {len(net.op)} ops, output {list(net.external_output)}")

# %% An init_net with the right shapes: one GivenTensorFill per weight and bias
init_net = random_init_net(weight_shapes(net), seed=0)
print(f"init_net: {len(init_net.op)} fill ops, "
      f"{sum(len(op.arg[1].floats) for op in init_net.op)} weights")

# %% Verify: the logits (pool10) as the loss, a 64x64 image, a sample of the inputs
with Client(args.url) as client:
    res = client.verify(
        net, ["pool10"], init_net=init_net,
        inputs=[random_input("data", [1, 3, 64, 64], seed=11)],
        mode="fast", check=["data", "conv1_w", "fire5/expand3x3_w", "conv10_b"],
        passes=2, atol=0.0, rtol=1e-4,
    )

# %% The report
for blob in res.report.blobs:
    mark = "PASS" if blob.passed else "FAIL"
    print(f"{mark} {blob.blob}: max rel error {blob.max_rel_error:.2e}")
print("passed" if res.report.passed else "FAILED")
sys.exit(0 if res.report.passed else 1)
