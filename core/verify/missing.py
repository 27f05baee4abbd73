"""Which blobs a run reads that nobody gives: fed inputs, init_net outputs or earlier ops.

Caffe2's ``RunNetOnce`` fails on the first op whose input blob is absent from the workspace
("blob ... does not exist"); a service can do better and name *every* such blob up front,
with the op that first reads it and how to give it. The walk follows the executor
(:mod:`core.executor.executor`, spec §4): a kernel op reads all its inputs; ``Do`` reads
its inputs except the workspace blob; ``If`` reads its condition; ``While`` without a
``cond_net`` reads its condition. Control ops run sub-nets on the same workspace (``If``,
``While``), so after a control op every name its sub-nets mention counts as written: the
check never refuses a net the executor would run (it may miss a blob only a sub-net reads,
which the executor then reports itself).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

from api_schemas import caffe2_pb2
from core.errors import InvalidRequestError
from core.types import Diagnostic

NetDef = caffe2_pb2.NetDef
OperatorDef = caffe2_pb2.OperatorDef

#: Problem code of each missing blob.
CODE = "missing_input"

#: How to give a missing blob, appended to every problem.
HOW = (
    "give it in `inputs` (an explicit tensor {\"blob\": \"%s\", \"tensor\": {\"shape\": [...], "
    "\"data\": [...]}} or a random spec {\"blob\": \"%s\", \"random\": {\"shape\": [...]}}), "
    "or write it with a fill op in `init_net` (e.g. GivenTensorFill, as a model zoo's "
    "init_net.pb does)"
)


def _sub_nets(op: OperatorDef) -> Iterator[NetDef]:
    for a in op.arg:
        if a.HasField("n"):
            yield a.n
        yield from a.nets


def blob_names(net: NetDef, into: set[str]) -> None:
    """Add to ``into`` every blob name ``net`` and its sub-nets mention (external inputs and
    outputs, op inputs and outputs)."""
    into.update(net.external_input)
    into.update(net.external_output)
    for op in net.op:
        into.update(op.input)
        into.update(op.output)
        for sub in _sub_nets(op):
            blob_names(sub, into)


def _reads(op: OperatorDef, native: bool) -> list[str]:
    """The blobs the executor reads from the workspace before ``op`` writes anything."""
    if not native:
        return list(op.input)
    if op.type == "Do":
        return list(op.input[:-1])
    if op.type == "If":
        return list(op.input[:1])
    if op.type == "While" and not any(a.name == "cond_net" for a in op.arg):
        return list(op.input[:1])
    return []


def missing_inputs(net: NetDef, given: Collection[str]) -> list[Diagnostic]:
    """One ``missing_input`` problem per blob the top-level ops read but nothing provides.

    Args:
        net: the forward net, run from an empty workspace.
        given: names fed before the run (``inputs`` and the outputs of ``init_net``).

    Returns:
        Problems in first-read order, each naming the blob, the op that first reads it (index,
        type, path ``op[i]:Type``) and how to give it.
    """
    from core import ops, registry

    ops.load_all()
    have = set(given)
    out: list[Diagnostic] = []
    reported: set[str] = set()
    for i, op in enumerate(net.op):
        native = registry.get_native(op.type) is not None
        for name in _reads(op, native):
            if name in have or name in reported:
                continue
            reported.add(name)
            path = f"op[{i}]:{op.type}"
            out.append(Diagnostic(
                "error", CODE,
                f"{path} reads blob '{name}', which is neither fed nor written by an earlier "
                f"op: {HOW % (name, name)}",
                op_index=i, op_type=op.type, path=path, blobs=(name,),
            ))
        have.update(op.output)
        if native:
            for sub in _sub_nets(op):
                blob_names(sub, have)
    return out


def check_inputs(net: NetDef, given: Collection[str]) -> None:
    """Refuse a run of ``net`` that would read a blob nobody gives.

    Raises:
        InvalidRequestError: naming every missing blob (see :func:`missing_inputs`).
    """
    problems = missing_inputs(net, given)
    if problems:
        names = ", ".join(repr(p.blobs[0]) for p in problems)
        raise InvalidRequestError(
            f"the net reads {names} but the request gives no value for "
            f"{'it' if len(problems) == 1 else 'them'}: add each to `inputs` (a tensor or a "
            "random spec) or write it in `init_net`",
            problems,
        )
