"""Lower If/While into Caffe2's control-op form: CreateScope, Do wrappers, workspace blobs.

Source: Caffe2 ``control_ops_util.py`` ``add_if_op`` / ``add_while_op`` and
``get_external_blob_names`` (spec §3.1). netgrad accepts nets built this way as they are;
this module builds them, for tests, examples and clients that have no Caffe2. Lists are in
first-appearance order where upstream iterated sets (spec §3.8 #3).
"""

from __future__ import annotations

from collections.abc import Iterable

from api_schemas import caffe2_pb2
from core.errors import InvalidNetError
from core.registry import make_arg, make_op

NetDef = caffe2_pb2.NetDef
BOOL = 5  # TensorProto.DataType.BOOL


def external_blob_names(net: NetDef, lexical_scope: Iterable[str]) -> tuple[list[str], list[str]]:
    """External inputs and outputs of a sub-net (Caffe2 ``get_external_blob_names``).

    Inputs are the names read before the sub-net writes them; outputs are the names it
    writes that exist in ``lexical_scope``.

    Raises:
        InvalidNetError: an input is not in the lexical scope ("Input blob <n> is undefined").
    """
    scope = set(lexical_scope)
    written = set(net.external_input)
    inputs: dict[str, None] = {}
    outputs: dict[str, None] = {}
    for op in net.op:
        for name in op.input:
            if name not in written:
                inputs.setdefault(name, None)
        for name in op.output:
            written.add(name)
            if name in scope:
                outputs.setdefault(name, None)
    for name in net.external_input:
        inputs.setdefault(name, None)
    undefined = [n for n in inputs if n not in scope]
    if undefined:
        raise InvalidNetError(f"Input blob {undefined[0]} is undefined")
    return list(inputs), list(outputs)


def _scoped_blob(net: NetDef, base: str) -> str:
    """A blob name not yet used in ``net`` (Caffe2 ``NextScopedBlob``: ``_auto_<k>`` suffix)."""
    used = {n for op in net.op for n in (*op.input, *op.output)}
    if base not in used:
        return base
    k = 0
    while f"{base}_auto_{k}" in used:
        k += 1
    return f"{base}_auto_{k}"


def _do_wrapper(
    name: str,
    body: NetDef,
    ins: list[str],
    outs: list[str],
    workspace: str,
    copy_external_blobs: bool = False,
) -> NetDef:
    inner = list(dict.fromkeys(ins + outs))
    outer = ins + outs
    args = [
        make_arg("net", body),
        make_arg("inner_blobs", inner),
        make_arg("outer_blobs_idx", [outer.index(n) for n in inner]),
    ]
    if copy_external_blobs:
        args.append(make_arg("copy_external_blobs", True))
    wrapper = NetDef()
    wrapper.name = name
    wrapper.op.append(make_op("Do", [*ins, workspace], [*outs, workspace], args))
    wrapper.external_output.extend([*outs, workspace])
    return wrapper


def add_if_op(
    if_net: NetDef,
    cond_blob: str,
    lexical_scope: Iterable[str],
    then_net: NetDef,
    else_net: NetDef | None = None,
) -> None:
    """Append ``CreateScope`` op(s) and an ``If`` with Do-wrapped branches to ``if_net``.

    Raises:
        InvalidNetError: a branch reads a blob outside ``lexical_scope``.
    """
    scope = list(lexical_scope)
    then_in, then_out = external_blob_names(then_net, scope)
    else_in, else_out = external_blob_names(else_net, scope) if else_net is not None else ([], [])
    if_inputs = [cond_blob, *dict.fromkeys(then_in + else_in)]
    if_outputs = list(dict.fromkeys(then_out + else_out))
    ws_then = _scoped_blob(if_net, if_net.name + "/workspace_if_then")
    args = [make_arg("then_net", _do_wrapper("do_then_net", then_net, then_in, then_out, ws_then))]
    workspaces = [ws_then]
    if else_net is not None:
        ws_else = _scoped_blob(if_net, if_net.name + "/workspace_if_else")
        if ws_else == ws_then:
            ws_else += "_auto_0"
        workspaces.append(ws_else)
        args.append(
            make_arg("else_net", _do_wrapper("do_else_net", else_net, else_in, else_out, ws_else))
        )
    for ws in workspaces:
        if_net.op.append(make_op("CreateScope", [], [ws]))
    if_net.op.append(make_op("If", if_inputs + workspaces, if_outputs + workspaces, args))
    if_net.external_output.extend(if_outputs + workspaces)


def add_while_op(
    while_net: NetDef,
    cond_blob: str,
    lexical_scope: Iterable[str],
    loop_body_net: NetDef,
    condition_body_net: NetDef | None = None,
) -> None:
    """Append ``CreateScope`` op(s) and a ``While`` with a Do-wrapped body to ``while_net``.

    The body Do gets ``copy_external_blobs=1`` so each saved workspace keeps its own
    iteration's values for the backward pass (spec §4.4).

    Raises:
        InvalidNetError: a sub-net reads a blob outside ``lexical_scope``, or the condition
            net does not write ``cond_blob``.
    """
    scope = list(lexical_scope)
    body_in, body_out = external_blob_names(loop_body_net, scope)
    body_in = list(dict.fromkeys(body_in + body_out))  # zero trips: outputs are inputs too
    ws_body = _scoped_blob(while_net, while_net.name + "/workspace_loop_body")
    inputs = [cond_blob, *body_in, ws_body]
    outputs = [*body_out, ws_body]
    args = [
        make_arg(
            "loop_net",
            _do_wrapper("do_loop_body_net", loop_body_net, body_in, body_out, ws_body, True),
        )
    ]
    workspaces = [ws_body]
    if condition_body_net is not None:
        if not any(cond_blob in op.output for op in condition_body_net.op):
            raise InvalidNetError("Condition net does not write into condition blob")
        cond_in, cond_out = external_blob_names(condition_body_net, [*scope, cond_blob])
        if cond_blob not in cond_out:
            cond_out.append(cond_blob)
        ws_cond = _scoped_blob(while_net, while_net.name + "/workspace_loop_cond")
        if ws_cond == ws_body:
            ws_cond += "_auto_0"
        workspaces.append(ws_cond)
        args.append(
            make_arg(
                "cond_net",
                _do_wrapper("do_loop_condition_net", condition_body_net, cond_in, cond_out,
                            ws_cond),
            )
        )
        inputs += [n for n in [*cond_in, ws_cond] if n not in inputs]
        outputs += [n for n in [*cond_out, ws_cond] if n not in outputs]
    for ws in workspaces:
        while_net.op.append(make_op("CreateScope", [], [ws]))
    if cond_blob not in scope:
        fill_args = [make_arg("dtype", BOOL), make_arg("value", False)]
        while_net.op.append(make_op("ConstantFill", [], [cond_blob], fill_args))
    while_net.op.append(make_op("While", inputs, outputs, args))
    while_net.external_output.extend(outputs)


def add_do_op(net: NetDef, lexical_scope: Iterable[str], body: NetDef) -> None:
    """Append ``CreateScope`` and a ``Do`` running ``body`` in its own workspace to ``net``.

    Bindings are the identity over ``body``'s external blobs, as in the branch wrappers of
    :func:`add_if_op`.

    Raises:
        InvalidNetError: ``body`` reads a blob outside ``lexical_scope``.
    """
    ins, outs = external_blob_names(body, lexical_scope)
    ws = _scoped_blob(net, (net.name or "net") + "/workspace_do")
    wrapper = _do_wrapper("do_net", body, ins, outs, ws)
    net.op.append(make_op("CreateScope", [], [ws]))
    net.op.extend(wrapper.op)
