"""The ``netgrad`` command: run the service, or print the gradient ops of a NetDef file.

Usage::

    netgrad serve [--host 127.0.0.1] [--port 8000]
    netgrad grad FILE [--ys BLOB ...] [--skip N] [--format pbtxt|json] [--url URL] [--recompute]

``grad`` reads ``.pb`` (binary), ``.pbtxt``/``.txt`` (text format) or ``.json`` NetDefs and
generates locally with :mod:`core`, or asks a running server when ``--url`` is given (binary
protobuf both ways, so any Argument bytes survive). Without ``--ys`` it uses the net's
``external_output``, or else the first output of its last op.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from api_schemas import caffe2_pb2, netgrad_pb2
from core.errors import DecodeError, InvalidRequestError, NetgradError
from core.proto import codec
from core.types import Diagnostic, GradientSlice, GradValue


def load_net(path: Path) -> caffe2_pb2.NetDef:
    """Read a NetDef from ``.pb``, ``.pbtxt``/``.txt`` or ``.json``.

    Raises:
        DecodeError: the file does not parse in the format its extension names.
        OSError: the file cannot be read.
    """
    suffix = path.suffix.lower()
    if suffix in (".pbtxt", ".txt", ".prototxt"):
        return codec.from_text(path.read_text(encoding="utf-8"), caffe2_pb2.NetDef)
    if suffix == ".json":
        try:
            obj = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise DecodeError(f"{path}: not valid UTF-8 JSON: {exc}") from exc
        return codec.from_json_obj(obj, caffe2_pb2.NetDef)
    return codec.from_binary(path.read_bytes(), caffe2_pb2.NetDef)


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
    net: caffe2_pb2.NetDef, ys: list[str], skip: int, recompute: bool
) -> tuple[list[caffe2_pb2.OperatorDef], dict[str, GradValue], list[Diagnostic]]:
    from core.api import gradient_for_net

    res = gradient_for_net(net, ys, skip, recompute=recompute)
    return list(res.grad_ops), dict(res.grad_map), list(res.diagnostics)


def _generate_remote(
    url: str, net: caffe2_pb2.NetDef, ys: list[str], skip: int, recompute: bool
) -> tuple[list[caffe2_pb2.OperatorDef], dict[str, GradValue], list[Diagnostic]]:
    import httpx

    req = netgrad_pb2.NetGradientRequest(net=net, skip=skip, recompute=recompute)
    for y in ys:
        req.ys.add(blob=y)
    try:
        resp = httpx.post(
            url.rstrip("/") + "/v1/gradients/net",
            content=codec.to_binary(req),
            headers={"Content-Type": "application/protobuf", "Accept": "application/protobuf"},
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

    from app.server import raise_fd_limit, tune_malloc, uvicorn_options
    from app.settings import get_settings

    settings = get_settings()
    host = ns.host or settings.host
    port = ns.port if ns.port is not None else settings.port
    raise_fd_limit()
    tune_malloc()
    uvicorn.run("app.main:create_app", factory=True, host=host, port=port,
                **uvicorn_options(settings))
    return 0


def _cmd_grad(ns: argparse.Namespace) -> int:
    try:
        net = load_net(Path(ns.file))
        ys = list(ns.ys) if ns.ys else default_ys(net)
        if ns.url:
            grad_ops, grad_map, diags = _generate_remote(ns.url, net, ys, ns.skip, ns.recompute)
        else:
            grad_ops, grad_map, diags = _generate_local(net, ys, ns.skip, ns.recompute)
    except OSError as exc:
        print(f"netgrad: cannot read {ns.file}: {exc}", file=sys.stderr)
        return 2
    except NetgradError as exc:
        _print_problem(exc.code, exc.message, [_problem_dict(p) for p in exc.problems])
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


def _problem_dict(p: Diagnostic) -> dict[str, Any]:
    return {"code": p.code, "path": p.path, "message": p.message}


def _problem_document(body: str) -> dict[str, Any] | None:
    """The server's RFC 9457 problem document, or ``None`` when the body is not one."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and "errors" in doc else None


def _print_problem(code: str, message: str, errors: Sequence[Any]) -> None:
    """The same error report for local and remote failures: headline, then one line each."""
    print(f"netgrad: {code}: {message}", file=sys.stderr)
    for p in errors:
        if not isinstance(p, dict):
            continue
        where = f" at {p['path']}" if p.get("path") else ""
        print(f"  - {p.get('code')}{where}: {p.get('message')}", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``netgrad`` command."""
    parser = argparse.ArgumentParser(prog="netgrad", description="Caffe2 gradient nets")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP service (uvicorn)")
    serve.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="port (default 8000)")
    serve.set_defaults(func=_cmd_serve)
    grad = sub.add_parser("grad", help="print the gradient ops of a NetDef file")
    grad.add_argument("file", help="NetDef as .pb, .pbtxt or .json")
    grad.add_argument("--ys", nargs="+", metavar="BLOB", help="blobs to differentiate")
    grad.add_argument("--skip", type=int, default=0, help="ignore the first N ops")
    grad.add_argument("--format", choices=("pbtxt", "json"), default="pbtxt")
    grad.add_argument(
        "--recompute",
        action="store_true",
        help="re-run producers of values overwritten in place instead of failing",
    )
    grad.add_argument("--url", help="ask this server instead of generating locally")
    grad.set_defaults(func=_cmd_grad)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``netgrad`` console script; returns the exit status."""
    ns = build_parser().parse_args(argv)
    return int(ns.func(ns))


if __name__ == "__main__":
    sys.exit(main())
