"""Arguments of ``RecurrentNetwork`` / ``RecurrentNetworkGradient``, read and checked once.

Source: Caffe2 ``recurrent_network_op.h/.cc`` (``extractLinks``, ``constructAliases``,
``constructRecurrentInputs``, ``extractNetDef``) and ``python/recurrent.py``
(``recurrent_net``), which names the arguments:

* ``step_net`` / ``backward_step_net``: a NetDef argument, or its protobuf text format in a
  string argument (older ``recurrent_net`` builds);
* ``link_internal``, ``link_external``, ``link_offset``, ``link_window`` (window default 1):
  at step ``t`` the step net's blob ``internal`` is rows ``[t + offset, t + offset +
  window)`` of the outer blob ``external``; ``backward_link_*`` likewise for gradients;
* ``alias_src``, ``alias_dst``, ``alias_offset``: output ``dst`` is ``src[offset:]``
  (a negative offset counts from the end: ``-1`` is the last row);
* ``recurrent_states`` and ``initial_recurrent_state_ids`` (indices into the op's inputs);
* ``timestep`` (blob name, default ``"timestep"``), ``param`` (input indices),
  ``param_grads``, ``outputs_with_grads``, ``recompute_blobs_on_backward``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf import text_format

from api_schemas import caffe2_pb2
from core.errors import InvalidNetError
from core.registry import find_arg

OperatorDef = caffe2_pb2.OperatorDef
NetDef = caffe2_pb2.NetDef

#: Arguments the gradient maker regenerates (the rest are copied from the forward op).
BACKWARD_ARGS = (
    "backward_step_net",
    "backward_link_internal",
    "backward_link_external",
    "backward_link_offset",
    "param",
    "param_grads",
    "outputs_with_grads",
    "recompute_blobs_on_backward",
)


@dataclass(frozen=True)
class Link:
    """Step blob ``internal`` = rows ``[t + offset, t + offset + window)`` of ``external``."""

    internal: str
    external: str
    offset: int
    window: int = 1


@dataclass(frozen=True)
class Alias:
    """Output ``dst`` = ``src[offset:]`` (``offset < 0``: the last ``-offset`` rows)."""

    src: str
    dst: str
    offset: int


@dataclass
class RnnSpec:
    """The parsed arguments of a RecurrentNetwork(-Gradient) op (see the module docstring)."""

    step_net: NetDef | None
    backward_step_net: NetDef | None
    links: list[Link]
    backward_links: list[Link]
    aliases: list[Alias]
    states: list[str]
    initial_ids: list[int]
    timestep: str
    params: list[int] | None
    param_grads: list[str]
    outputs_with_grads: list[int] | None
    recompute: list[str]
    problems: list[str] = field(default_factory=list)


def _strings(op: OperatorDef, name: str) -> list[str]:
    a = find_arg(op, name)
    return [s.decode("utf-8", "replace") for s in a.strings] if a is not None else []


def _ints(op: OperatorDef, name: str) -> list[int] | None:
    a = find_arg(op, name)
    if a is None:
        return None
    if len(a.ints):
        return [int(i) for i in a.ints]
    if a.HasField("i"):
        return [int(a.i)]
    return []


def net_arg(op: OperatorDef, name: str, problems: list[str]) -> NetDef | None:
    """The NetDef of argument ``name``: field ``n``, or text format in ``s`` (``None`` if
    absent or an empty string); a string that does not parse is added to ``problems``."""
    a = find_arg(op, name)
    if a is None:
        return None
    if a.HasField("n"):
        return a.n
    if a.HasField("s") and a.s:
        net = NetDef()
        try:
            text_format.Parse(a.s.decode("utf-8", "replace"), net)
        except text_format.ParseError as exc:
            problems.append(f"argument {name} holds a string that is not a NetDef ({exc})")
            return None
        return net
    return None


def _links(op: OperatorDef, prefix: str, windows: bool, problems: list[str]) -> list[Link]:
    internal = _strings(op, f"{prefix}_internal")
    external = _strings(op, f"{prefix}_external")
    offset = _ints(op, f"{prefix}_offset") or []
    window = (_ints(op, f"{prefix}_window") if windows else None) or [1] * len(offset)
    if not len(internal) == len(external) == len(offset) == len(window):
        problems.append(
            f"{prefix}_internal/_external/_offset{'/_window' if windows else ''} have "
            f"different lengths ({len(internal)}, {len(external)}, {len(offset)}"
            f"{', ' + str(len(window)) if windows else ''})"
        )
        return []
    return [Link(i, e, o, w) for i, e, o, w in zip(internal, external, offset, window,
                                                   strict=True)]


def parse_rnn(op: OperatorDef) -> RnnSpec:
    """Read every RecurrentNetwork argument; arity mismatches go to ``spec.problems``."""
    problems: list[str] = []
    step = net_arg(op, "step_net", problems)
    back = net_arg(op, "backward_step_net", problems)
    links = _links(op, "link", True, problems)
    blinks = _links(op, "backward_link", False, problems)
    src, dst = _strings(op, "alias_src"), _strings(op, "alias_dst")
    off = _ints(op, "alias_offset") or []
    if not len(src) == len(dst) == len(off):
        problems.append(
            f"alias_src/alias_dst/alias_offset have different lengths "
            f"({len(src)}, {len(dst)}, {len(off)})"
        )
        aliases: list[Alias] = []
    else:
        aliases = [Alias(s, d, o) for s, d, o in zip(src, dst, off, strict=True)]
    states = _strings(op, "recurrent_states")
    ids = _ints(op, "initial_recurrent_state_ids") or []
    if len(states) != len(ids):
        problems.append(
            f"recurrent_states has {len(states)} entries but initial_recurrent_state_ids "
            f"{len(ids)}: every recurrent state needs the index of its initial value"
        )
    for k in ids:
        if not 0 <= k < len(op.input):
            problems.append(f"initial_recurrent_state_ids entry {k} is not an input index "
                            f"(the op has {len(op.input)} inputs)")
    ts = find_arg(op, "timestep")
    timestep = ts.s.decode("utf-8", "replace") if ts is not None and ts.HasField("s") else (
        "timestep")
    return RnnSpec(
        step_net=step,
        backward_step_net=back,
        links=links,
        backward_links=blinks,
        aliases=aliases,
        states=states,
        initial_ids=ids,
        timestep=timestep,
        params=_ints(op, "param"),
        param_grads=_strings(op, "param_grads"),
        outputs_with_grads=_ints(op, "outputs_with_grads"),
        recompute=_strings(op, "recompute_blobs_on_backward"),
        problems=problems,
    )


def require_ok(spec: RnnSpec, op: OperatorDef) -> None:
    """Raise the first argument problem as a plain :class:`InvalidNetError` (the executor
    locates it at the op)."""
    if spec.problems:
        raise InvalidNetError(f"{op.type}: {spec.problems[0]}")


def remapped(op: OperatorDef, name: str) -> str:
    """Caffe2 ``remappedName``: argument ``<name>.rename`` (a string) if present, else ``name``."""
    a = find_arg(op, name + ".rename")
    return a.s.decode("utf-8", "replace") if a is not None and a.HasField("s") else name
