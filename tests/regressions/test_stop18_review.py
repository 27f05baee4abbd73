"""Regressions from this stop's reviews (issue 10 landing).

* A blob asked for in ``ys`` that also gets a sparse gradient from an op: the mixed
  sparse/dense refusal named its consumers by indexing past the op list (IndexError, a 500);
  it is the documented 422 ``mixed_sparse_dense``, naming the seed.
* The ``rnn_step_workspaces`` diagnostic listed its blobs in set order, which changes with
  ``PYTHONHASHSEED``: the same request gave different answer bytes per process.
* A JSON answer with a list of millions of elements is written by ``json.dumps`` (orjson
  reserves about 260 bytes of address space per element, and crashed the address-space
  limited isolation process instead of raising).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from api_schemas import caffe2_pb2
from app.api import negotiation
from core.api import gradient_for_net
from core.errors import GradientError
from core.registry import make_op

ROOT = Path(__file__).resolve().parents[2]


def test_mixed_sparse_dense_with_a_seed_is_a_gradient_error() -> None:
    net = caffe2_pb2.NetDef()
    net.op.extend([make_op("Relu", ["x"], ["x"]),
                   make_op("SparseLengthsSum", ["x", "idx", "lengths"], ["y"])])
    with pytest.raises(GradientError) as info:
        gradient_for_net(net, ["y", "x"])
    assert info.value.problems[0].code == "mixed_sparse_dense"
    assert "the gradient asked for in ys" in info.value.message


_RNN_SCRIPT = """
import json, sys
from core.proto import codec
from api_schemas import caffe2_pb2
from core.api import gradient_for_net
body = json.loads(open(sys.argv[1]).read())
net = codec.from_json_obj(body["net"], caffe2_pb2.NetDef)
res = gradient_for_net(net, ["loss"])
print(json.dumps([[d.code, d.message, list(d.blobs)] for d in res.diagnostics]))
"""


def test_rnn_diagnostics_do_not_depend_on_the_hash_seed() -> None:
    data = ROOT / "tests" / "data" / "rnn_lstm_1layer.json"
    outs = set()
    for seed in ("1", "2", "3", "4"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        run = subprocess.run([sys.executable, "-c", _RNN_SCRIPT, str(data)], env=env,
                             capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert run.returncode == 0, run.stderr[-2000:]
        outs.add(run.stdout)
    assert len(outs) == 1
    (out,) = outs
    assert any(code == "rnn_step_workspaces" and len(blobs) > 1
               for code, _, blobs in json.loads(out))


def test_long_lists_are_written_by_json_dumps(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = negotiation.orjson.dumps

    def spy(obj: object) -> bytes:
        calls.append(1)
        return real(obj)

    monkeypatch.setattr(negotiation.orjson, "dumps", spy)
    small = {"data": list(range(10))}
    assert negotiation.json_bytes(small) == b'{"data":[0,1,2,3,4,5,6,7,8,9]}' and calls
    calls.clear()
    big = {"data": list(range(10))}
    text = negotiation.json_bytes(big, size_hint=negotiation.ORJSON_MAX_BYTES + 1)
    assert json.loads(text) == big and not calls


def test_the_streaming_scan_bounds_bracket_nesting() -> None:
    """A large JSON body of nested brackets held one frame per bracket (328 MB for 1.9 M);
    past :data:`core.proto.jsonscan.MAX_NESTING` it is refused at once."""
    from core.errors import LimitExceededError
    from core.proto.jsonscan import MAX_NESTING, JsonScan

    scan = JsonScan(max_ops=1000, max_depth=150, max_containers=10**9)
    with pytest.raises(LimitExceededError) as info:
        scan.feed(b'{"net": {"op": [{"arg": [{"name": "a", "ints": ' + b"[" * 2_000_000)
    assert info.value.problems[0].code == "nesting_too_deep"
    assert len(scan._stack) <= MAX_NESTING
