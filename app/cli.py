"""The ``netgrad`` command: run the service, or print the gradient ops of a NetDef file.

Usage::

    netgrad serve [--host 127.0.0.1] [--port 8000] [--http-workers N]
    netgrad keys add NAME [--file KEYS_FILE] [--max-jobs N]
    netgrad probe [livez|readyz] [--port 8000]
    netgrad grad FILE [--ys BLOB ...] [--skip N] [--format pbtxt|json] [--url URL] [--recompute]
                 [--densify] [--api-key KEY]
    netgrad verify FILE [--ys BLOB ...] [--init-net F] [--inputs F] [--random B:D1,D2 ...]
                   [--mode fast|full] [--check BLOB ...] [--skip N] [--recompute] [--densify]
                   [--url URL] [--api-key KEY]
    netgrad run FILE --fetch BLOB ... [--ys BLOB ...] [--init-net F] [--inputs F] [--skip N]
                [--recompute] [--densify] [--url URL] [--api-key KEY]
    netgrad ops [--status STATUS] [--format text|json] [--url URL] [--api-key KEY]
    netgrad --version

``grad`` reads ``.pb`` (binary), ``.pbtxt``/``.txt`` (text format) or ``.json`` NetDefs and
generates locally with :mod:`core`, or asks a running server when ``--url`` is given (binary
protobuf both ways, so any Argument bytes survive; ``--api-key`` or ``NETGRAD_API_KEY`` for a
server with API keys). Without ``--ys`` it uses the net's
``external_output``, or else the first output of its last op.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from api_schemas import caffe2_pb2, netgrad_pb2
from app import ops_cli
from app.netfiles import load_net, named
from core.errors import DecodeError, InvalidRequestError, NetgradError
from core.proto import codec
from core.types import Diagnostic, GradientSlice, GradValue


def default_ys(net: caffe2_pb2.NetDef) -> list[str]:
    """``external_output`` of the net, else the first output of its last op.

    Raises:
        InvalidRequestError: the net has neither.
    """
    if len(net.external_output):
        return list(net.external_output)
    for op in reversed(net.op):
        if len(op.output):
            return [op.output[0]]
    raise InvalidRequestError("the net has no external_output and no op output; pass --ys")


def _grad_text(g: GradValue) -> str:
    if g is None:
        return "None"
    if isinstance(g, GradientSlice):
        return f"GradientSlice(indices={g.indices}, values={g.values})"
    return g


def _grad_json(g: GradValue) -> Any:
    if isinstance(g, GradientSlice):
        return {"indices": g.indices, "values": g.values}
    return g


def _generate_local(
    net: caffe2_pb2.NetDef, ys: list[str], skip: int, recompute: bool, densify: bool = False
) -> tuple[list[caffe2_pb2.OperatorDef], dict[str, GradValue], list[Diagnostic]]:
    from core.api import gradient_for_net

    res = gradient_for_net(net, ys, skip, recompute=recompute, densify=densify)
    return list(res.grad_ops), dict(res.grad_map), list(res.diagnostics)


def _generate_remote(
    url: str, net: caffe2_pb2.NetDef, ys: list[str], skip: int, recompute: bool,
    densify: bool = False, api_key: str | None = None,
) -> tuple[list[caffe2_pb2.OperatorDef], dict[str, GradValue], list[Diagnostic]]:
    import httpx

    from app.cli_commands import key_headers

    req = netgrad_pb2.NetGradientRequest(
        net=net, skip=skip, recompute=recompute, densify=densify
    )
    for y in ys:
        req.ys.add(blob=y)
    try:
        resp = httpx.post(
            url.rstrip("/") + "/v1/gradients/net",
            content=codec.to_binary(req),
            headers={"Content-Type": "application/protobuf", "Accept": "application/protobuf",
                     **key_headers(api_key)},
            timeout=600.0,
        )
    except httpx.HTTPError as exc:
        raise RemoteError(0, f"cannot reach {url}: {exc}") from exc
    if resp.status_code != 200:
        raise RemoteError(resp.status_code, resp.text)
    msg = codec.from_binary(resp.content, netgrad_pb2.NetGradientResponse)
    grad_map: dict[str, GradValue] = {}
    for e in msg.grad_map:
        kind = e.gradient.WhichOneof("kind")
        grad_map[e.blob] = (
            e.gradient.dense
            if kind == "dense"
            else GradientSlice(e.gradient.slice.indices, e.gradient.slice.values)
            if kind == "slice"
            else None
        )
    diags = [
        Diagnostic(
            d.severity,
            d.code,
            d.message,
            d.op_index if d.op_index >= 0 else None,
            d.op_type or None,
            d.path or None,
            tuple(d.blobs),
        )
        for d in msg.diagnostics
    ]
    return list(msg.grad_ops), grad_map, diags


class RemoteError(Exception):
    """The server answered with an error status (its problem document is the message), or
    could not be reached (``status`` 0)."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"server answered {status}: {body}" if status else body)
        self.status = status
        self.body = body


def format_result(
    grad_ops: Sequence[caffe2_pb2.OperatorDef], grad_map: dict[str, GradValue], fmt: str
) -> str:
    """Gradient ops as NetDef text format (grad map as ``#`` comments) or as JSON."""
    if fmt == "json":
        obj = {
            "grad_ops": [codec.to_json_obj(op) for op in grad_ops],
            "grad_map": {k: _grad_json(v) for k, v in grad_map.items()},
        }
        return json.dumps(obj, ensure_ascii=False, indent=2)
    lines = [f"# grad_map: {blob} -> {_grad_text(g)}" for blob, g in grad_map.items()]
    net = caffe2_pb2.NetDef()
    net.op.extend(grad_ops)
    return "\n".join(lines) + ("\n" if lines else "") + codec.to_text(net)


def _cmd_serve(ns: argparse.Namespace) -> int:
    import uvicorn

    from app.ops_cli import uvicorn_options as ops_uvicorn_options
    from app.server import raise_fd_limit, tune_malloc, uvicorn_options
    from app.settings import get_settings

    settings = get_settings()
    if ns.http_workers is not None:
        settings = settings.model_copy(update={"http_workers": ns.http_workers})
    host = ns.host or settings.host
    port = ns.port if ns.port is not None else settings.port
    raise_fd_limit()
    tune_malloc()
    # Connection guards and timeouts (app.server), then logging and HTTP worker processes
    # (app.ops_cli: its JSON/text log configuration replaces uvicorn's plain one).
    options = {**uvicorn_options(settings), **ops_uvicorn_options(settings)}
    uvicorn.run("app.main:create_app", factory=True, host=host, port=port, **options)
    return 0


def _cmd_grad(ns: argparse.Namespace) -> int:
    try:
        net = load_net(Path(ns.file))
        ys = list(ns.ys) if ns.ys else default_ys(net)
        if ns.url:
            grad_ops, grad_map, diags = _generate_remote(
                ns.url, net, ys, ns.skip, ns.recompute, ns.densify, ns.api_key
            )
        else:
            grad_ops, grad_map, diags = _generate_local(
                net, ys, ns.skip, ns.recompute, ns.densify
            )
    except OSError as exc:
        print(f"netgrad: cannot read {ns.file}: {exc}", file=sys.stderr)
        return 2
    except NetgradError as exc:
        _print_local_problem(exc, "/v1/gradients/net")
        return 1
    except RemoteError as exc:
        doc = _problem_document(exc.body)
        if doc is None:
            print(f"netgrad: {exc}", file=sys.stderr)
        else:
            code = str(doc.get("type", "")).rsplit(":", 1)[-1]
            _print_problem(code, f"{doc.get('detail', '')} (HTTP {exc.status})",
                           doc.get("errors", []))
        return 1
    for d in diags:
        where = f" at {d.path}" if d.path else ""
        print(f"{d.severity}: {d.code}{where}: {d.message}", file=sys.stderr)
    sys.stdout.write(format_result(grad_ops, grad_map, ns.format).rstrip("\n") + "\n")
    return 0


def _print_local_problem(exc: NetgradError, route: str) -> None:
    """A local engine error, with the same hints the server adds to its answer."""
    from app.api.hints import with_hints

    _print_problem(exc.code, exc.message,
                   [_problem_dict(p) for p in with_hints(route, exc.problems)])


def _problem_dict(p: Diagnostic) -> dict[str, Any]:
    return {"code": p.code, "path": p.path, "message": p.message, "op_index": p.op_index,
            "op_type": p.op_type}


def _problem_document(body: str) -> dict[str, Any] | None:
    """The server's RFC 9457 problem document, or ``None`` when the body is not one."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and "errors" in doc else None


#: What to type, for problems the command line can fix.
CLI_HINTS = {
    "missing_input": "on the command line, give inputs with --random BLOB:D1,D2 (a random "
                     "tensor), --inputs FILE (a JSON list) or --init-net FILE (the model's "
                     "init_net)",
    "gradient_not_defined": "for a partial gradient, pass --ys with outputs that do not "
                            "depend on that op, or --skip N to leave out the first N ops",
    "api_key_missing": "the server needs an API key: pass --api-key KEY or set "
                       "NETGRAD_API_KEY",
    "api_key_invalid": "the server does not know that API key (--api-key / NETGRAD_API_KEY); "
                       "ask its operator for one (netgrad keys add NAME)",
}


_HTTP_TAIL = re.compile(r" \(HTTP \d+\)$")


def _print_problem(code: str, message: str, errors: Sequence[Any]) -> None:
    """The same error report for local and remote failures: headline, then one line each."""
    listed = [p for p in errors if isinstance(p, dict)]
    if len(listed) > 1 and "; the first: " in message:  # (the list below gives every one)
        head, _, rest = message.partition("; the first: ")
        first = str(listed[0].get("message", ""))
        # (advice added after the first problem's words stays: "...; the file holds ...")
        message = head + (rest[len(first):] if first and rest.startswith(first) else "")
    print(f"netgrad: {code}: {message}", file=sys.stderr)
    for p in errors:
        if not isinstance(p, dict):
            continue
        where = f" at {p['path']}" if p.get("path") else ""
        # (one problem whose words the headline already gave, remote or local, after the
        # file's name: "net.json: op[0].inputs: unknown field ...")
        words = str(p.get("message", ""))
        said = len(listed) == 1 and bool(words) and any(
            head == words or head.endswith(f": {words}")
            for head in (message, _HTTP_TAIL.sub("", message)))
        if where and words.startswith(f"{p['path']}: "):
            p = {**p, "message": words[len(p["path"]) + 2:]}  # (its path, once)
        op_type, op_index = p.get("op_type"), p.get("op_index")
        # (the op a field path is in, unless the path already names it: "op[0]:Relu")
        of_op = ("" if op_index is None or f":{op_type}" in str(p.get("path")) else
                 f" (op {op_index}{f', {op_type}' if op_type else ''})")
        print(f"  - {p.get('code')}{where}" + ("" if said else f": {p.get('message')}")
              + of_op, file=sys.stderr)
    codes = {p.get("code") for p in errors if isinstance(p, dict)}
    for code, hint in CLI_HINTS.items():
        if code in codes:
            print(f"netgrad: {hint}", file=sys.stderr)


def _load_named(path: str) -> caffe2_pb2.NetDef:
    """A NetDef file of a command that reads several files: its problems name it.

    Raises:
        DecodeError: the file does not parse.
        OSError: it cannot be read.
    """
    try:
        return load_net(Path(path))
    except DecodeError as exc:
        raise named(path, exc) from exc


def _load_init_net(path: str | None) -> caffe2_pb2.NetDef | None:
    """The ``--init-net`` file's NetDef; its problems name the file (there are two nets).

    Raises:
        DecodeError: the file does not parse.
        OSError: it cannot be read.
    """
    return _load_named(path) if path else None


def _guarded(ns: argparse.Namespace, route: str, work: Any) -> int:
    """Run ``work()``; print any error once (with the server's hints) and return 1 or 2."""
    from app.cli_commands import CliError

    try:
        return int(work())
    except OSError as exc:
        print(f"netgrad: cannot read {exc.filename or ns.file}: {exc.strerror or exc}",
              file=sys.stderr)
        return 2
    except NetgradError as exc:
        _print_local_problem(exc, route)
        return 1
    except CliError as exc:
        _print_problem(exc.code, exc.message, exc.errors)
        return 1


def _cmd_verify(ns: argparse.Namespace) -> int:
    from app import cli_commands as cc

    def work() -> int:
        net = _load_named(ns.file)
        ys = list(ns.ys) if ns.ys else default_ys(net)
        req = cc.verify_request(ns, net, ys, _load_init_net(ns.init_net))
        if ns.url:
            res = cc.remote(ns.url, "/v1/verify", req, netgrad_pb2.VerifyResponse,
                            ns.api_key)
        else:
            res = cc.verify_local(req)
        cc.print_diagnostics([d for d in res.diagnostics if d.code != "verify_passed"])
        sys.stdout.write(cc.format_report(res, ns.format) + "\n")
        return 0 if res.report.passed else 1

    return _guarded(ns, "/v1/verify", work)


def _cmd_run(ns: argparse.Namespace) -> int:
    from app import cli_commands as cc

    def work() -> int:
        req = cc.run_request(ns, _load_named(ns.file), _load_init_net(ns.init_net))
        if ns.url:
            res = cc.remote(ns.url, "/v1/run", req, netgrad_pb2.RunResponse, ns.api_key)
        else:
            res = cc.run_local(req)
        cc.print_diagnostics(res.diagnostics)
        sys.stdout.write(cc.format_outputs(res) + "\n")
        return 0

    return _guarded(ns, "/v1/run", work)


def _cmd_ops(ns: argparse.Namespace) -> int:
    from app import cli_commands as cc

    def work() -> int:
        if ns.url:
            params = {"status": ns.status} if ns.status else None
            entries = cc.remote_get(ns.url, "/v1/operators", params,
                                    ns.api_key)["operators"]
        else:
            entries = cc.operators_local()
        if ns.status:  # also when a server does not filter
            entries = [e for e in entries if e["gradient"] == ns.status]
        sys.stdout.write(cc.format_operators(entries, ns.format) + "\n")
        return 0

    ns.file = "-"
    return _guarded(ns, "/v1/operators", work)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``netgrad`` command."""
    from app import __version__
    from app.cli_commands import add_api_key, add_parsers

    parser = argparse.ArgumentParser(prog="netgrad", description="Caffe2 gradient nets")
    parser.add_argument("--version", action="version", version=f"netgrad {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP service (uvicorn)")
    serve.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="port (default 8000)")
    serve.add_argument("--http-workers", type=int, default=None,
                       help="uvicorn worker processes (default NETGRAD_HTTP_WORKERS, 1)")
    serve.set_defaults(func=_cmd_serve)
    grad = sub.add_parser("grad", help="print the gradient ops of a NetDef file")
    grad.add_argument("file", help="NetDef as .pb, .pbtxt or .json")
    grad.add_argument("--ys", nargs="+", metavar="BLOB",
                      help="blobs to differentiate (default: the net's external_output, else "
                           "the first output of its last op)")
    grad.add_argument("--skip", type=int, default=0, help="ignore the first N ops (default: 0)")
    grad.add_argument("--format", choices=("pbtxt", "json"), default="pbtxt",
                      help="gradient ops as NetDef text format or JSON (default: pbtxt)")
    grad.add_argument(
        "--recompute",
        action="store_true",
        help="re-run producers of values overwritten in place instead of failing (default: off)",
    )
    grad.add_argument(
        "--densify",
        action="store_true",
        help="sum sparse and dense gradients of one blob densely (SparseToDense) instead of "
        "failing as Caffe2 does (default: off)",
    )
    grad.add_argument("--url", help="ask this server instead of generating locally "
                                    "(default: local)")
    grad.set_defaults(func=_cmd_grad)
    add_parsers(sub, _cmd_verify, _cmd_run, _cmd_ops)
    add_api_key(grad)
    ops_cli.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``netgrad`` console script; returns the exit status."""
    ns = build_parser().parse_args(argv)
    from pydantic import ValidationError

    try:
        return int(ns.func(ns))
    except ValidationError as exc:  # a NETGRAD_* setting of the environment is invalid
        for err in exc.errors():
            name = "NETGRAD_" + "_".join(str(p) for p in err["loc"]).upper()
            print(f"netgrad: {name}={err.get('input')!r} is not valid: {err['msg']}",
                  file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
