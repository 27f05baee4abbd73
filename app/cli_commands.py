"""``netgrad verify``, ``netgrad run`` and ``netgrad ops``: the API from the command line.

Each works locally (the engine in this process; numeric work too) or against a server with
``--url`` (binary protobuf both ways, as ``netgrad grad`` does). Inputs come from
``--inputs FILE`` (a JSON list of InputSpec, as in the API), ``--random BLOB:D1,D2``
(a random tensor of that shape) and ``--init-net FILE`` (a Caffe2 init_net whose blobs are
fed, e.g. a model zoo's ``init_net.pb``). A server with API keys needs ``--api-key KEY`` (or
the ``NETGRAD_API_KEY`` environment variable), sent as ``Authorization: Bearer KEY``. Errors
are printed once, as the server's problem document would state them (with the same hints),
and exit with status 1; an unreadable file exits with 2. ``verify`` exits with 1 when the
check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from api_schemas import caffe2_pb2, netgrad_pb2
from app.api import jsonmap
from core.errors import DecodeError, InvalidRequestError
from core.proto import codec
from core.registry import GradientStatus

#: Statuses of ``GET /v1/operators`` entries (every :class:`core.registry.GradientStatus`).
STATUSES = tuple(s.value for s in GradientStatus)


class CliError(Exception):
    """A problem to print (``code``, ``message``, ``errors`` as problem items) and exit 1."""

    def __init__(self, code: str, message: str, errors: Sequence[dict[str, Any]] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.errors = list(errors)


# -- inputs ----------------------------------------------------------------------------------------
def parse_random(spec: str) -> netgrad_pb2.InputSpec:
    """``BLOB:D1,D2,...`` (``BLOB:`` for a scalar) as a random ``InputSpec``.

    Raises:
        InvalidRequestError: not of that form.
    """
    blob, sep, dims = spec.rpartition(":")
    try:
        shape = [int(d) for d in dims.split(",") if d.strip()]
    except ValueError:
        shape = None
    if not sep or not blob or shape is None:
        raise InvalidRequestError(f"--random {spec!r}: write BLOB:D1,D2,... e.g. data:2,4")
    msg = netgrad_pb2.InputSpec(blob=blob)
    msg.random.shape.extend(shape)
    return msg


def read_inputs(path: str | None, randoms: Sequence[str]) -> list[netgrad_pb2.InputSpec]:
    """``--inputs FILE`` entries, then ``--random`` ones.

    Raises:
        DecodeError: the file is not a JSON list of InputSpec.
        OSError: the file cannot be read.
    """
    out: list[netgrad_pb2.InputSpec] = []
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8-sig")
        except UnicodeDecodeError as exc:
            raise DecodeError(f"{path}: not UTF-8 (byte {exc.start}: {exc.reason}); save it "
                              "as UTF-8 text") from exc
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            from app.api.bodypaths import syntax_place

            _, advice = syntax_place(text, exc, netgrad_pb2.RunRequest)
            raise DecodeError(f"{path}: not valid JSON: {exc}{advice}") from exc
        except (ValueError, RecursionError) as exc:  # (>4300-digit ints, nesting)
            raise DecodeError(f"{path}: not valid JSON: {exc}") from exc
        if not isinstance(items, list):
            raise DecodeError(f"{path}: expected a JSON list of inputs like "
                              '[{"blob": "data", "random": {"shape": [2, 4]}}]')
        from app.api import wire
        from app.api.negotiation import Body, Media
        from core.proto.limits import DECODER_MAX_DEPTH

        text = json.dumps({"net": {}, "fetch": [], "inputs": items})
        body = Body(b"", Media.JSON, Media.JSON, Media.JSON.value, text)
        try:
            out.extend(wire.decode(body, netgrad_pb2.RunRequest, DECODER_MAX_DEPTH).inputs)
        except DecodeError as exc:
            raise _in_inputs_file(path, exc) from exc
    out.extend(parse_random(s) for s in randoms)
    return out


def _in_inputs_file(path: str, exc: DecodeError) -> DecodeError:
    """The problems of the ``--inputs`` file's entries (decoded as a RunRequest's
    ``inputs``), pathed in the file (``[0].shap``) and headed by its name, with the hints
    the API gives for them."""
    from dataclasses import replace

    from app.api.hints import with_hints

    def in_file(words: str) -> str:
        return re.sub(r"(?<![\w.\]])inputs(?=\[)", "", words)

    problems = [replace(p, path=in_file(p.path) if p.path else p.path,
                        message=in_file(p.message))
                for p in with_hints("/v1/run", exc.problems)]
    head = (problems[0].message if len(problems) == 1 else
            f"{len(problems)} invalid or unknown fields in its entries")
    return DecodeError(f"{path}: {head}", problems)


def _ys_entries(field: Any, ys: Sequence[str]) -> None:
    for y in ys:
        field.add(blob=y)


# -- requests --------------------------------------------------------------------------------------
def verify_request(ns: argparse.Namespace, net: caffe2_pb2.NetDef, ys: list[str],
                   init_net: caffe2_pb2.NetDef | None) -> netgrad_pb2.VerifyRequest:
    """The ``VerifyRequest`` of ``netgrad verify``'s arguments."""
    req = netgrad_pb2.VerifyRequest(net=net, skip=ns.skip, recompute=ns.recompute,
                                    densify=ns.densify)
    _ys_entries(req.ys, ys)
    if init_net is not None:
        req.init_net.CopyFrom(init_net)
    req.verify.inputs.extend(read_inputs(ns.inputs, ns.random or ()))
    req.verify.mode = ns.mode
    req.verify.check.extend(ns.check or ())
    for name in ("passes", "seed"):
        if getattr(ns, name) is not None:
            setattr(req.verify, name, getattr(ns, name))
    for name in ("step", "atol", "rtol"):
        if getattr(ns, name) is not None:
            setattr(req.verify.tolerances, name, getattr(ns, name))
    return req


def run_request(ns: argparse.Namespace, net: caffe2_pb2.NetDef,
                init_net: caffe2_pb2.NetDef | None) -> netgrad_pb2.RunRequest:
    """The ``RunRequest`` of ``netgrad run``'s arguments."""
    req = netgrad_pb2.RunRequest(net=net, fetch=list(ns.fetch), skip=ns.skip,
                                 recompute=ns.recompute, densify=ns.densify)
    _ys_entries(req.ys, ns.ys or ())
    if init_net is not None:
        req.init_net.CopyFrom(init_net)
    req.inputs.extend(read_inputs(ns.inputs, ns.random or ()))
    return req


# -- local and remote execution --------------------------------------------------------------------
#: Environment variable holding the API key of ``--url`` (``--api-key`` wins).
API_KEY_ENV = "NETGRAD_API_KEY"


def key_headers(api_key: str | None) -> dict[str, str]:
    """``Authorization: Bearer <key>`` for a key, else nothing."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def remote(url: str, path: str, req: Any, cls: type[Any], api_key: str | None = None) -> Any:
    """POST ``req`` as binary protobuf (with ``api_key`` as a bearer token); the ``cls``
    answer.

    Raises:
        CliError: the server refused (its problem document) or could not be reached.
    """
    import httpx

    try:
        r = httpx.post(url.rstrip("/") + path, content=codec.to_binary(req), timeout=600.0,
                       headers={"Content-Type": "application/protobuf",
                                "Accept": "application/protobuf", **key_headers(api_key)})
    except httpx.HTTPError as exc:
        raise CliError("unreachable", f"cannot reach {url}: {exc}") from exc
    if r.status_code != 200:
        raise problem_error(r)
    return codec.from_binary(r.content, cls)


def remote_get(url: str, path: str, params: dict[str, str] | None = None,
               api_key: str | None = None) -> Any:
    """GET a JSON answer.

    Raises:
        CliError: as :func:`remote`.
    """
    import httpx

    try:
        r = httpx.get(url.rstrip("/") + path, params=params, timeout=60.0,
                      headers=key_headers(api_key))
    except httpx.HTTPError as exc:
        raise CliError("unreachable", f"cannot reach {url}: {exc}") from exc
    if r.status_code != 200:
        raise problem_error(r)
    return r.json()


def problem_error(r: Any) -> CliError:
    """A :class:`CliError` of an error answer."""
    try:
        doc = r.json()
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or "errors" not in doc:
        return CliError("http_error", f"server answered {r.status_code}: {r.text[:500]}")
    code = str(doc.get("type", "")).rsplit(":", 1)[-1]
    return CliError(code, f"{doc.get('detail', '')} (HTTP {r.status_code})", doc["errors"])


def verify_local(req: netgrad_pb2.VerifyRequest) -> netgrad_pb2.VerifyResponse:
    """Run the check in this process, as the server's ``/v1/verify`` would."""
    from app.api import wire
    from app.api.verification import _verdict
    from core.verify import verify_net
    from core.verify.init_net import prepare_inputs

    options = wire.verify_options(req.verify)
    options.inputs = prepare_inputs(req.net, options.inputs,
                                    req.init_net if req.HasField("init_net") else None)
    res = verify_net(req.net, wire.ys_value(req.ys), options, skip=req.skip,
                     recompute=req.recompute, densify=req.densify)
    verdict = _verdict(res.report)
    report = wire.report_pb(res.report, [*res.diagnostics, verdict])
    return netgrad_pb2.VerifyResponse(
        report=report, grad_ops=res.grad_ops, grad_map=wire.grad_map_kw(res.grad_map),
        diagnostics=[wire.diagnostic_kw(d) for d in [*res.diagnostics, verdict]])


def run_local(req: netgrad_pb2.RunRequest) -> netgrad_pb2.RunResponse:
    """Run the net in this process, as the server's ``/v1/run`` would."""
    from app.api import wire
    from core.executor.jobs import run_net
    from core.verify.init_net import prepare_inputs

    inputs = prepare_inputs(req.net, wire.input_specs(req.inputs),
                            req.init_net if req.HasField("init_net") else None)
    res = run_net(req.net, inputs, list(req.fetch),
                  ys=wire.ys_value(req.ys) if len(req.ys) else None, skip=req.skip,
                  recompute=req.recompute, densify=req.densify)
    return netgrad_pb2.RunResponse(
        outputs=[netgrad_pb2.BlobValue(blob=b, tensor=wire.tensor_pb(a))
                 for b, a in res.outputs.items()],
        grad_ops=res.grad_ops or (), grad_map=wire.grad_map_kw(res.grad_map or {}),
        diagnostics=[wire.diagnostic_kw(d) for d in res.diagnostics])


def operators_local() -> list[dict[str, Any]]:
    """``GET /v1/operators``' entries, from this process's registry."""
    from core import ops, registry

    ops.load_all()
    return [{"type": e.op_type, "gradient": e.status.value, "has_kernel": e.kernel is not None,
             "doc": e.doc}
            for e in (registry.REGISTRY[n] for n in registry.known_op_types())]


# -- output ----------------------------------------------------------------------------------------
def print_diagnostics(diagnostics: Sequence[Any]) -> None:
    """Warnings and notes to stderr, one line each."""
    for d in diagnostics:
        where = f" at {d.path}" if d.path else ""
        print(f"{d.severity}: {d.code}{where}: {d.message}", file=sys.stderr)


def format_report(res: netgrad_pb2.VerifyResponse, fmt: str) -> str:
    """The verification report: one line per blob (``PASS``/``FAIL``), then the verdict."""
    if fmt == "json":
        return json.dumps(jsonmap.encode(res), ensure_ascii=False, indent=2)
    rep = res.report
    lines = []
    for b in rep.blobs:
        mark = "PASS" if b.passed else "FAIL"
        note = f"  ({b.note})" if b.note else ""
        lines.append(f"{mark} {b.blob}: max abs error {b.max_abs_error:.3g}, max rel error "
                     f"{b.max_rel_error:.3g}, gradient {b.gradient or '(none)'}{note}")
    verdict = "passed" if rep.passed else "FAILED"
    lines.append(f"numeric check ({rep.mode}) {verdict}: {len(rep.blobs)} blobs, "
                 f"atol {rep.atol:g}, rtol {rep.rtol:g}")
    return "\n".join(lines)


def format_outputs(res: netgrad_pb2.RunResponse) -> str:
    """The fetched blobs as JSON ``{blob: {"shape", "dtype", "data"}}``."""
    obj = jsonmap.encode(res)
    return json.dumps(obj["outputs"], ensure_ascii=False, indent=2)


def format_operators(entries: Sequence[dict[str, Any]], fmt: str) -> str:
    """One line per op type (type, gradient status, kernel) or JSON."""
    if fmt == "json":
        return json.dumps({"operators": list(entries)}, ensure_ascii=False, indent=2)
    width = max((len(e["type"]) for e in entries), default=4)
    return "\n".join(f"{e['type']:<{width}}  {e['gradient']:<24}  "
                     f"{'kernel' if e.get('has_kernel') else '-'}" for e in entries)


# -- argument parsers ------------------------------------------------------------------------------
def _common(p: argparse.ArgumentParser, inputs: bool = True) -> None:
    p.add_argument("file", help="the forward NetDef: .pb (binary), .pbtxt or .json")
    p.add_argument("--skip", type=int, default=0,
                   help="ignore the first N ops for the gradient (default: 0)")
    p.add_argument("--recompute", action="store_true",
                   help="re-run producers of values overwritten in place instead of failing "
                        "(default: off)")
    p.add_argument("--densify", action="store_true",
                   help="sum sparse and dense gradients of one blob densely (SparseToDense) "
                        "instead of failing (default: off)")
    if inputs:
        p.add_argument("--init-net", metavar="FILE",
                       help="a Caffe2 init_net (.pb, .pbtxt or .json) run first; the blobs it "
                            "writes are fed to the net (default: none)")
        p.add_argument("--inputs", metavar="FILE",
                       help='a JSON list of inputs, as in the API: [{"blob": "data", '
                            '"random": {"shape": [2, 4]}}, ...] (default: none)')
        p.add_argument("--random", nargs="+", action="extend", metavar="BLOB:D1,D2",
                       help="feed BLOB a random normal tensor of that shape; repeat it or list "
                            "several (default: none)")
    p.add_argument("--url", help="ask this server (e.g. http://127.0.0.1:8000) instead of "
                                 "running locally (default: local)")
    add_api_key(p)


def add_api_key(p: argparse.ArgumentParser) -> None:
    """``--api-key``: the key of a ``--url`` server with API keys."""
    p.add_argument("--api-key", default=os.environ.get(API_KEY_ENV) or None, metavar="KEY",
                   help=f"API key of the --url server, sent as 'Authorization: Bearer KEY' "
                        f"(default: ${API_KEY_ENV}, else none)")


def add_parsers(sub: Any, run_verify: Any, run_run: Any, run_ops: Any) -> None:
    """Register ``verify``, ``run`` and ``ops`` on the ``netgrad`` subparsers."""
    v = sub.add_parser("verify", help="check a net's gradient against finite differences "
                                      "(exit 1 when the check fails)")
    _common(v)
    v.add_argument("--ys", nargs="+", metavar="BLOB",
                   help="outputs of the loss (default: the net's external_output, else the "
                        "first output of its last op)")
    v.add_argument("--mode", choices=("fast", "full"), default="fast",
                   help="fast: a few random directions per input; full: every element "
                        "(default: fast)")
    v.add_argument("--check", nargs="+", metavar="BLOB",
                   help="inputs to check (default: every fed float input)")
    v.add_argument("--passes", type=int, help="fast mode: directions per input (default: 3)")
    v.add_argument("--seed", type=int, help="seed of weights and directions (default: 0)")
    v.add_argument("--step", type=float,
                   help="finite-difference step (default: 1e-6; 1e-3 for float32 outputs)")
    v.add_argument("--atol", type=float, help="absolute tolerance (default: 1e-5)")
    v.add_argument("--rtol", type=float, help="relative tolerance (default: 1e-3)")
    v.add_argument("--format", choices=("text", "json"), default="text",
                   help="report as text lines or the VerifyResponse JSON (default: text)")
    v.set_defaults(func=run_verify)
    r = sub.add_parser("run", help="run a net (with --ys also its gradient) and print blobs")
    _common(r)
    r.add_argument("--fetch", nargs="+", metavar="BLOB", required=True,
                   help="blobs to print, as JSON {blob: {shape, dtype, data}} (required)")
    r.add_argument("--ys", nargs="+", metavar="BLOB",
                   help="also append the gradient ops of these outputs (default: forward only)")
    r.set_defaults(func=run_run)
    o = sub.add_parser("ops", help="list the op types and their gradient status")
    o.add_argument("--status", choices=STATUSES,
                   help="only op types with this gradient status (default: all)")
    o.add_argument("--format", choices=("text", "json"), default="text",
                   help="one line per op type, or JSON (default: text)")
    o.add_argument("--url", help="ask this server instead of the local registry "
                                 "(default: local)")
    add_api_key(o)
    o.set_defaults(func=run_ops)
