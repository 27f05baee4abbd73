"""Build the training nets of issue 8 as Caffe2's Python front end builds them, as files.

``python -m tests.data.make_training_nets`` rewrites ``dlrm_train_net.pbtxt`` and
``reader_train_net.pbtxt`` beside this file. The ops, blob names and arguments follow what
``model_helper.ModelHelper`` + ``brew`` emit: ``brew.fc(model, x, "name", dim_in, dim_out)``
is ``FC([x, name_w, name_b] -> [name])`` (parameters created in the param-init net, here
external inputs), ``brew.relu`` is ``Relu``, ``model.net.<Op>(...)`` one op with its args.

* **DLRM** (``dlrm_s_caffe2.py`` layout, shrunk): a bottom MLP on the dense features, one
  ``SparseLengthsSum`` embedding bag per sparse feature, the dot interaction (``Concat`` ->
  ``Reshape`` to ``[B, F, D]`` -> ``BatchMatMul(T, T, trans_b=1)`` -> ``Flatten`` ->
  ``BatchGather`` of the strictly-lower-triangle entries), ``Concat`` with the bottom output,
  the top MLP, ``SigmoidCrossEntropyWithLogits`` and ``AveragedLoss``.
* **Reader net**: ``TensorProtosDBInput`` at the head (``model.TensorProtosDBInput([],
  ["data", "label"], batch_size, db, db_type)``), an MLP classifier, ``Softmax``,
  ``LabelCrossEntropy``, ``AveragedLoss`` and an ``Accuracy`` metric.

:func:`dlrm_feeds` / :func:`reader_feeds` give inputs of the right shapes and dtypes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf import text_format

from api_schemas import caffe2_pb2
from core.registry import make_arg, make_op

HERE = Path(__file__).resolve().parent
DLRM_FILE = HERE / "dlrm_train_net.pbtxt"
READER_FILE = HERE / "reader_train_net.pbtxt"

# DLRM sizes: batch, dense features, embedding dim D, tables x rows, bottom/top MLP widths.
B, DENSE, D = 4, 5, 4
TABLES = [10, 7, 12]
BOT = [DENSE, 8, D]
F = 1 + len(TABLES)  # interaction features: the bottom output and one per table
TOP = [D + F * (F - 1) // 2, 6, 1]


class _Net:
    """The bit of ``core.Net`` / ``brew`` used here: ops, params and external inputs."""

    def __init__(self, name: str) -> None:
        self.net = caffe2_pb2.NetDef(name=name, type="simple")
        self.params: list[str] = []
        self.inputs: list[str] = []

    def op(self, op_type: str, ins: list[str], outs: list[str], **args: Any) -> str:
        self.net.op.append(make_op(op_type, ins, outs, [make_arg(k, v) for k, v in args.items()]))
        return outs[0]

    def fc(self, x: str, name: str) -> str:
        self.params += [name + "_w", name + "_b"]
        return self.op("FC", [x, name + "_w", name + "_b"], [name])

    def mlp(self, x: str, prefix: str, widths: list[int], last_relu: bool) -> str:
        for i in range(len(widths) - 1):
            x = self.fc(x, f"{prefix}_fc{i}")
            if i < len(widths) - 2 or last_relu:
                x = self.op("Relu", [x], [x])
        return x

    def done(self, outputs: list[str]) -> caffe2_pb2.NetDef:
        self.net.external_input.extend(self.inputs + self.params)
        self.net.external_output.extend(outputs)
        return self.net


def dlrm_net(n_tables: int = len(TABLES), top_hidden: int = TOP[1]) -> caffe2_pb2.NetDef:
    """The DLRM-style training net (forward ops; ``loss`` is the scalar to differentiate).

    ``n_tables`` / ``top_hidden`` scale it (the benchmark uses 26 tables, as Criteo's 26
    sparse features); the file holds the default.
    """
    n = _Net("dlrm")
    f = 1 + n_tables
    n.inputs += ["dense_x", "label", "tril_indices"]
    x = n.mlp("dense_x", "bot", BOT, last_relu=True)
    bags = []
    for t in range(n_tables):
        n.params.append(f"emb_{t}")
        n.inputs += [f"sparse_idx_{t}", f"sparse_len_{t}"]
        bags.append(n.op("SparseLengthsSum", [f"emb_{t}", f"sparse_idx_{t}", f"sparse_len_{t}"],
                         [f"emb_{t}_bag"]))
    cat = n.op("Concat", [x, *bags], ["int_cat", "int_cat_info"], axis=1)
    t3 = n.op("Reshape", [cat], ["int_t", "int_t_old_shape"], shape=[-1, f, D])
    z = n.op("BatchMatMul", [t3, t3], ["int_z"], trans_b=1)
    zflat = n.op("Flatten", [z], ["int_z_flat"], axis=1)
    zuniq = n.op("BatchGather", [zflat, "tril_indices"], ["int_z_tril"])
    r = n.op("Concat", [x, zuniq], ["top_in", "top_in_info"], axis=1)
    logits = n.mlp(r, "top", [D + f * (f - 1) // 2, top_hidden, 1], last_relu=False)
    xent = n.op("SigmoidCrossEntropyWithLogits", [logits, "label"], ["xent"])
    n.op("AveragedLoss", [xent], ["loss"])
    return n.done(["loss"])


def dlrm_param_shapes() -> dict[str, tuple[int, ...]]:
    """Parameter blob -> shape (``FC`` weights are ``[out, in]``)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for prefix, widths in (("bot", BOT), ("top", TOP)):
        for i in range(len(widths) - 1):
            shapes[f"{prefix}_fc{i}_w"] = (widths[i + 1], widths[i])
            shapes[f"{prefix}_fc{i}_b"] = (widths[i + 1],)
    for t, rows in enumerate(TABLES):
        shapes[f"emb_{t}"] = (rows, D)
    return shapes


def dlrm_feeds(seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs and parameters of :func:`dlrm_net` (float64 values, int32/int64 ids)."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {
        "dense_x": rng.standard_normal((B, DENSE)),
        "label": rng.integers(0, 2, (B, 1)).astype(np.float64),
        "tril_indices": np.array(
            [i * F + j for i in range(F) for j in range(i)], dtype=np.int32
        ),
    }
    for t, rows in enumerate(TABLES):
        lengths = rng.integers(1, 4, B).astype(np.int32)
        feeds[f"sparse_len_{t}"] = lengths
        feeds[f"sparse_idx_{t}"] = rng.integers(0, rows, int(lengths.sum())).astype(np.int64)
    for name, shape in dlrm_param_shapes().items():
        feeds[name] = rng.uniform(-0.5, 0.5, shape)
    return feeds


READER_WIDTHS = [6, 8, 3]


def reader_net() -> caffe2_pb2.NetDef:
    """An MLP classifier whose data come from ``TensorProtosDBInput`` (op 0)."""
    n = _Net("reader_train")
    n.op("TensorProtosDBInput", [], ["data", "label"], batch_size=4, db="train.minidb",
         db_type="minidb")
    logits = n.mlp("data", "mlp", READER_WIDTHS, last_relu=False)
    prob = n.op("Softmax", [logits], ["softmax"])
    xent = n.op("LabelCrossEntropy", [prob, "label"], ["xent"])
    n.op("AveragedLoss", [xent], ["loss"])
    n.op("Accuracy", [prob, "label"], ["accuracy"])
    return n.done(["loss", "accuracy"])


def reader_feeds(seed: int = 0) -> dict[str, np.ndarray]:
    """``data``/``label`` (what the reader would yield) and the parameters of the MLP."""
    rng = np.random.default_rng(seed)
    feeds = {
        "data": rng.standard_normal((4, READER_WIDTHS[0])),
        "label": rng.integers(0, READER_WIDTHS[-1], 4).astype(np.int32),
    }
    for i in range(len(READER_WIDTHS) - 1):
        feeds[f"mlp_fc{i}_w"] = rng.uniform(-0.5, 0.5, (READER_WIDTHS[i + 1], READER_WIDTHS[i]))
        feeds[f"mlp_fc{i}_b"] = rng.uniform(-0.1, 0.1, (READER_WIDTHS[i + 1],))
    return feeds


def load(path: Path) -> caffe2_pb2.NetDef:
    """Read a NetDef text file written by :func:`main`."""
    return text_format.Parse(path.read_text(), caffe2_pb2.NetDef())


def main() -> None:
    """Rewrite the net files."""
    DLRM_FILE.write_text(text_format.MessageToString(dlrm_net()))
    READER_FILE.write_text(text_format.MessageToString(reader_net()))


if __name__ == "__main__":
    main()
