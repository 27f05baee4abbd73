"""What the control-op gradient makers share: Do bindings, seeds and sub-net gradients.

Source: Caffe2 ``control_ops_grad.py`` (``_do_op_sanity_check_and_process``,
``dedupe_g_output``, ``_gen_subnet_gradient``, ``_get_net_argument``), spec §3.2. A sub-net
is differentiated by the backward pass registered in :mod:`core.registry`
(:func:`core.registry.subnet_pass`): the makers plug into the pass through the registry and
never import it. Lists are in first-appearance order, never set order (spec §3.8 #3).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from api_schemas import caffe2_pb2
from core.errors import GradientError, InvalidNetError, NetgradError
from core.ir.env import GenEnv
from core.registry import GradientMaker, bad_argument, find_arg, make_op, subnet_pass
from core.types import GradientSlice, GradValue

OperatorDef = caffe2_pb2.OperatorDef
NetDef = caffe2_pb2.NetDef

#: Suffix of the inner name a gradient Do seeds with an outer output gradient.
INNER_GRAD = "/_DO_OPERATOR_INNER_GRAD_"
#: Suffix of the inner name a gradient Do copies an input gradient out through.
INNER_GRAD_COPY = "/_DO_OPERATOR_INNER_GRAD_COPY_"


def invalid_net(
    env: GenEnv, op: OperatorDef, message: str, code: str, blobs: Sequence[str] = ()
) -> NetgradError:
    """An :class:`~core.errors.InvalidNetError` located at the control op being differentiated."""
    return InvalidNetError.at(
        message,
        op_index=env.op_index,
        op_type=op.type,
        path=env.op_path(env.op_index, op.type),
        blobs=blobs,
        code=code,
    )


def net_argument(op: OperatorDef, name: str) -> NetDef | None:
    """The NetDef held in argument ``name`` of ``op`` (Caffe2 ``_get_net_argument``)."""
    a = find_arg(op, name)
    if a is None or not a.HasField("n"):
        return None
    return a.n


def bool_arg(op: OperatorDef, name: str) -> bool:
    """Integer argument ``name`` of ``op`` as a flag (``False`` when absent), read as the
    runtime reads it (:func:`core.control.runtime`'s flags) and as Caffe2 does (spec §1.4).

    Raises:
        InvalidNetError: code ``invalid_argument``, the argument holds no integer.
    """
    a = find_arg(op, name)
    if a is None:
        return False
    if not a.HasField("i"):
        raise bad_argument(op.type, name, a, "an integer (field i)")
    return bool(a.i)


@dataclass
class DoBindings:
    """Parsed and checked blob bindings of a ``Do`` op.

    Attributes:
        subnet: the inner NetDef (arg ``net``).
        outer_to_inner: outer blob name -> inner name, in binding order.
        inner_to_outer: inner name -> outer blob name, in binding order.
        workspace_blob: the last input (= last output), holding the workspace stack.
    """

    subnet: NetDef
    outer_to_inner: dict[str, str]
    inner_to_outer: dict[str, str]
    workspace_blob: str


def check_do(op: OperatorDef, env: GenEnv) -> DoBindings:
    """Validate a ``Do`` op's bindings (Caffe2 ``_do_op_sanity_check_and_process``, spec §3.2).

    Raises:
        InvalidNetError: listing every binding problem of the op at once.
    """
    problems: list[str] = []
    if op.type != "Do":
        problems.append("Expected Do op")
    subnet: NetDef | None = None
    net_seen = False  # the first "net" argument decides (find_arg)
    inner_args: list[caffe2_pb2.Argument] = []
    idx_args: list[caffe2_pb2.Argument] = []
    for a in op.arg:  # (one pass: this runs twice per Do, on the op and on its gradient)
        name = a.name
        if name == "net":
            if not net_seen:
                net_seen = True
                subnet = a.n if a.HasField("n") else None
        elif name == "inner_blobs":
            inner_args.append(a)
        elif name == "outer_blobs_idx":
            idx_args.append(a)
    if subnet is None:
        problems.append("No net argument found in Do op")
    inner: list[str] = []
    idx: list[int] = []
    for args, label in ((inner_args, "inner_blobs"), (idx_args, "outer_blobs_idx")):
        if len(args) > 1:
            problems.append(f"{label} redefinition")
        if not args:
            problems.append(f"No {label} argument found in Do op")
    if inner_args:
        try:
            inner = [s.decode("utf-8") for s in inner_args[0].strings]
        except UnicodeDecodeError:
            problems.append("inner_blobs holds names that are not UTF-8")
        if not inner:
            problems.append("Empty inner_blobs argument in Do op")
    if idx_args:
        idx = list(idx_args[0].ints)
        if not idx:
            problems.append("Empty outer_blobs_idx argument in Do op")
    if inner and idx and len(inner) != len(idx):
        problems.append(
            f"Invalid blob bindings: different inner/outer blobs lengths "
            f"(inner_blobs has {len(inner)}, outer_blobs_idx has {len(idx)})"
        )
    if len(set(inner)) != len(inner):
        dup_inner = [n for i, n in enumerate(inner) if n in inner[:i]]
        problems.append(f"Invalid blob bindings: redefinition of inner blob {dup_inner[0]}")
    op_in, op_out = op.input[:], op.output[:]
    if not op_in or not op_out:
        problems.append("Expected at least one input blob and one output blob (the workspace)")
    ws = op_in[-1] if op_in else ""
    if op_in and op_out and op_in[-1] != op_out[-1]:
        problems.append(
            f"Expected same input/output workspace blob (last input '{op_in[-1]}', "
            f"last output '{op_out[-1]}')"
        )
    ins = op_in[:-1]
    outs = op_out[:-1]
    if len(set(ins)) != len(ins):
        problems.append("Duplicate input blobs")
    if len(set(outs)) != len(outs):
        problems.append("Duplicate output blobs")
    outer_list = ins + outs
    outer_to_inner: dict[str, str] = {}
    inner_to_outer: dict[str, str] = {}
    for name, k in zip(inner, idx, strict=False):
        if k < 0 or k >= len(outer_list):
            problems.append(
                f"Invalid blob bindings: outer blob index ({k}, inner name: {name}) is out of "
                f"bounds [0, {len(outer_list) - 1}]"
            )
            continue
        outer = outer_list[k]
        if outer in outer_to_inner:
            problems.append(f"Reusage of outer blob name {outer} in Do op")
            continue
        outer_to_inner[outer] = name
        inner_to_outer[name] = outer
    if inner and idx and len(inner) == len(idx):
        unbound = [n for n in dict.fromkeys(outer_list) if n not in outer_to_inner]
        if unbound and not any("out of bounds" in p or "Reusage" in p for p in problems):
            problems.append(
                "Not all outer blob names are used in blob bindings in Do op "
                f"(unbound: {', '.join(unbound)})"
            )
    if problems:
        raise InvalidNetError(
            problems[0],
            [
                invalid_net(env, op, p, "invalid_do_bindings").problems[0]
                for p in problems
            ],
        )
    if subnet is None:  # unreachable: reported above; keeps the type checker precise
        raise invalid_net(env, op, "No net argument found in Do op", "invalid_do_bindings")
    return DoBindings(subnet, outer_to_inner, inner_to_outer, ws)


def dedupe_g_output(
    op: OperatorDef, g_output: Sequence[GradValue]
) -> tuple[list[OperatorDef], list[GradValue]]:
    """Give each output its own gradient blob (Caffe2 ``dedupe_g_output``, spec §3.2).

    A later output reusing a gradient name already claimed by an earlier, different output
    gets ``<output>_<grad>_DEDUP`` filled by a raw ``Copy``. Bindings must be one-to-one.
    """
    copies: list[OperatorDef] = []
    claimed: dict[str, str] = {}
    out: list[GradValue] = []
    for name, g in zip(op.output, g_output, strict=False):
        if isinstance(g, str) and g in claimed and claimed[g] != name:
            new = f"{name}_{g}_DEDUP"
            copies.append(make_op("Copy", [g], [new], name=None))
            out.append(new)
            continue
        if isinstance(g, str):
            claimed.setdefault(g, name)
        out.append(g)
    return copies, out


def reject_sparse(env: GenEnv, op: OperatorDef, blob: str, g: GradValue, where: str) -> None:
    """Refuse a sparse gradient of ``blob`` crossing control op ``op`` (spec §3.8 #9).

    Raises:
        GradientError: code ``sparse_through_control_op``, naming the op and the blob.
    """
    if isinstance(g, GradientSlice):
        raise GradientError.at(
            f"A sparse gradient (GradientSlice indices={g.indices}, values={g.values}) of blob "
            f"'{blob}' would cross {op.type} op ({where}); sparse gradients through control "
            "ops are not supported. Densify it first (EnsureDense / SparseToDense, or Gather "
            "with dense_gradient=1)"
            + ('; or ask for "densify": true, which does that for you.'
               if where == "output gradient" and not env.densify
               else ('; "densify": true densifies gradients outside control ops only: a '
                     "sparse gradient made inside this op's sub-net leaves it sparse, so "
                     "densify it inside the sub-net (Gather with dense_gradient=1 there)."
                     if env.densify else ".")),
            op_index=env.op_index,
            op_type=op.type,
            path=env.op_path(env.op_index, op.type),
            blobs=(blob,),
            code="sparse_through_control_op",
        )


@dataclass
class SubnetGradient:
    """Result of differentiating one sub-net (Caffe2 ``_gen_subnet_gradient``).

    The gradient NetDef is ``header`` (the forward sub-net's fields but ops and external
    lists, name + ``_grad``) plus ``ops``; :func:`put_net` builds it in place inside the
    gradient op's argument, so nested sub-nets are copied once, not three times.

    Attributes:
        header: NetDef fields of the gradient net, without ops.
        ops: gradient ops of the sub-net (more may be appended, e.g. zero fills).
        grad_map: forward blob -> gradient name (dense only).
        inputs: names read by a gradient op before any gradient op wrote them.
        outputs: names written by gradient ops (first-appearance order).
    """

    header: NetDef
    ops: list[OperatorDef]
    grad_map: dict[str, str]
    inputs: list[str]
    outputs: list[str]


def put_net(
    op: OperatorDef, arg_name: str, header: NetDef, ops: Sequence[OperatorDef]
) -> NetDef:
    """Append argument ``arg_name`` holding ``header`` + ``ops`` to ``op``, built in place."""
    arg = op.arg.add()
    arg.name = arg_name
    arg.n.CopyFrom(header)
    arg.n.op.extend(ops)
    return arg.n


def io_names(ops: Sequence[OperatorDef]) -> tuple[list[str], list[str]]:
    """``(names read before any of ops writes them, names written)``, first-appearance order."""
    written: dict[str, None] = {}
    read: dict[str, None] = {}
    for gop in ops:
        for name in gop.input:
            if name not in written:
                read.setdefault(name, None)
        for name in gop.output:
            written.setdefault(name, None)
    return list(read), list(written)


def subnet_gradient(
    op: OperatorDef,
    subnet: NetDef,
    seeds: Mapping[str, GradValue],
    env: GenEnv,
    arg_name: str,
) -> SubnetGradient:
    """Backward pass over a sub-net with the given seeds (spec §3.2 ``_gen_subnet_gradient``).

    Raises:
        LimitExceededError: nesting deeper than the limit.
        GradientError: a sparse gradient would leave the sub-net.
        NetgradError subclasses from the inner pass, with nested sub-net paths.
    """
    child = env.child(env.op_index, op.type, arg_name)
    grad_ops, gmap = subnet_pass()(subnet.op, seeds, child, entry=True)
    dense: dict[str, str] = {}
    for blob, g in gmap.items():
        reject_sparse(env, op, blob, g, f"{arg_name} gradient")
        if isinstance(g, str):
            dense[blob] = g
    header = copy_except(subnet, NetDef(), ("op", "external_input", "external_output"))
    if header.name:
        header.name += "_grad"
    ins, outs = io_names(grad_ops)
    return SubnetGradient(header, grad_ops, dense, ins, outs)


def gradient_control_op(op: OperatorDef) -> OperatorDef:
    """Copy of a forward control op with I/O, args and control_input cleared (name + _grad)."""
    grad = copy_except(op, OperatorDef(), ("input", "output", "arg", "control_input"))
    if grad.name:
        grad.name += "_grad"
    grad.is_gradient_op = True
    return grad


def copy_except(src: Any, dst: Any, skip: tuple[str, ...]) -> Any:
    """Copy every set field of ``src`` into ``dst`` but those named in ``skip``.

    Cheaper than ``CopyFrom`` + clearing when the skipped fields hold large sub-nets.
    """
    for field, value in src.ListFields():
        if field.name in skip:
            continue
        if field.is_repeated:
            getattr(dst, field.name).extend(value)
        elif field.message_type is not None:
            getattr(dst, field.name).CopyFrom(value)
        else:
            setattr(dst, field.name, value)
    return dst


def conditional_seeds(m: GradientMaker) -> tuple[list[OperatorDef], dict[str, GradValue]]:
    """Dedupe copies and the output -> gradient seed map of an If/While (spec §3.4, §3.5).

    Raises:
        InvalidNetError: no condition input, or no output has a gradient.
        GradientError: a sparse output gradient (§3.8 #9).
    """
    op, env = m.op, m.env
    if not len(op.input):
        raise invalid_net(
            env, op, f"{op.type} op requires at least one input (the condition)",
            f"invalid_{op.type.lower()}",
        )
    copies, g_output = dedupe_g_output(op, m.g_output)
    seeds: dict[str, GradValue] = {}
    for out, g in zip(op.output, g_output, strict=False):
        if g is not None:
            reject_sparse(env, op, out, g, "output gradient")
            seeds[out] = g
    if not seeds:
        raise invalid_net(
            env, op, f"Empty initial gradient map for {op.type} op", "empty_gradient_map"
        )
    return copies, seeds

