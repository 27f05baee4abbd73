"""Weights from a Caffe2 ``init_net``, and the inputs check of a run or verification.

Source: how Caffe2 deploys a model (``workspace.RunNetOnce(init_net)`` then
``workspace.RunNet(predict_net)``, spec §2.8): the init net's fill ops (``GivenTensorFill``
and friends, ``XavierFill``, ``ConstantFill``...) write the weights into the workspace the
predict net then reads. Here the init net runs first, as its own job in a worker (numeric
work never runs in the server process), every blob it writes comes back as an array, and
those arrays are fed to the net like explicit ``inputs``. An explicit input of the same
name wins (it is fed after the init net, as ``FeedBlob`` after ``RunNetOnce`` would).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from api_schemas import caffe2_pb2
from core.errors import NetgradError
from core.executor.jobs import run_job
from core.executor.limits import RunLimits
from core.verify.missing import check_inputs
from core.verify.specs import InputSpec

NetDef = caffe2_pb2.NetDef

#: Sub-net path prefix of problems located in the init net.
PREFIX = "init_net/"


def init_net_outputs(init_net: NetDef) -> list[str]:
    """Every blob the top-level ops of ``init_net`` write, in first-write order."""
    seen: dict[str, None] = {}
    for op in init_net.op:
        for name in op.output:
            seen.setdefault(name, None)
    return list(seen)


def _relocated(err: NetgradError) -> NetgradError:
    """``err`` with every problem's path (and the message) prefixed by ``init_net/``."""
    problems = [
        dataclasses.replace(p, path=PREFIX + (p.path or ""), message=f"init_net: {p.message}")
        for p in err.problems
    ]
    new = type(err)(f"init_net: {err.message}", problems)
    new.__cause__ = err
    return new


def run_init_net(
    init_net: NetDef,
    pool: Any = None,
    max_elements: int = 10**8,
    limits: RunLimits | None = None,
) -> list[InputSpec]:
    """Run ``init_net`` from an empty workspace and return every blob it writes as an input.

    Args:
        init_net: a NetDef of fill ops (any op with a kernel may appear).
        pool: a :class:`core.executor.pool.WorkerPool` (else runs in this process).
        max_elements: cap on the elements of all written blobs together.
        limits: job limits (default: the pool's / process defaults).

    Returns:
        One literal :class:`InputSpec` per written blob (dtype as the fill op made it).

    Raises:
        InvalidRequestError: the init net reads a blob nobody gives (``missing_input``).
        ExecutionError, LimitExceededError, InvalidNetError: from running it; every problem's
            path starts with ``init_net/``.
    """
    names = init_net_outputs(init_net)
    if not names:
        return []
    try:
        check_inputs(init_net, ())
        args: tuple[Any, ...] = (init_net.SerializeToString(), [], names, max_elements, limits)
        arrays = pool.submit(run_job, *args) if pool is not None else run_job(*args)
    except NetgradError as err:
        raise _relocated(err) from None
    return [InputSpec.from_array(name, arrays[name]) for name in names]


def merged_inputs(
    init_inputs: Sequence[InputSpec], inputs: Sequence[InputSpec]
) -> list[InputSpec]:
    """The init net's blobs not given explicitly, then the explicit ``inputs``.

    Each spec keeps where it came from (:attr:`~core.verify.specs.InputSpec.path`): the
    explicit ones their ``inputs[k]``, the init net's ``init_net``, so that problems name
    the request's field and not a position in the merged list."""
    explicit = {i.blob for i in inputs}
    given = [i if i.path is not None else dataclasses.replace(i, path=f"inputs[{k}]")
             for k, i in enumerate(inputs)]
    return [dataclasses.replace(i, path="init_net") for i in init_inputs
            if i.blob not in explicit] + given


def prepare_inputs(
    net: NetDef,
    inputs: Sequence[InputSpec],
    init_net: NetDef | None = None,
    pool: Any = None,
    max_elements: int = 10**8,
) -> list[InputSpec]:
    """The fed blobs of a run of ``net``: ``init_net``'s outputs merged with ``inputs``,
    checked so that every blob the net reads is given.

    Raises:
        InvalidRequestError: code ``missing_input`` per blob the net reads that is neither
            fed nor written by an earlier op (all of them at once, each with how to give it).
        NetgradError: from running ``init_net`` (see :func:`run_init_net`).
    """
    fed = list(inputs)
    if init_net is not None and len(init_net.op):
        fed = merged_inputs(run_init_net(init_net, pool, max_elements), fed)
    check_inputs(net, [i.blob for i in fed])
    return fed
