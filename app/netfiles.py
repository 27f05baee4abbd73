"""Reading the NetDef files of the ``netgrad`` command (:mod:`app.cli`): binary ``.pb``,
text ``.pbtxt``/``.txt``/``.prototxt`` and ``.json``, their problems located as the HTTP API
locates a body's (README, Encodings), and request bodies saved for the HTTP API told apart.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from api_schemas import caffe2_pb2
from core.errors import DecodeError
from core.proto import codec


def load_net(path: Path) -> caffe2_pb2.NetDef:
    """Read a NetDef from ``.pb``, ``.pbtxt``/``.txt`` or ``.json``.

    A request body saved for the HTTP API (a NetGradientRequest, VerifyRequest, RunRequest,
    JobRequest or OpGradientRequest) is refused with the route it belongs to.

    Raises:
        DecodeError: the file does not parse in the format its extension names.
        OSError: the file cannot be read.
    """
    suffix = path.suffix.lower()
    net_ops = False  # (a JSON file with a list of ops: a NetDef, whatever else it holds)
    try:
        if suffix in (".pbtxt", ".txt", ".prototxt"):
            text = _read_text(path)
            _refuse_empty(path, re.sub(r"(?m)#.*$", "", text).strip())  # (or comments only)
            if re.match(r'\s*[{\[]\s*"', text):  # (JSON saved under a text name)
                raise DecodeError.at(f"{path}: the file holds JSON, not protobuf text format: "
                                     "name it .json", code="invalid_field")
            return codec.from_text(text, caffe2_pb2.NetDef)
        if suffix == ".json":
            obj = _read_json(path)
            net_ops = isinstance(obj, dict) and isinstance(obj.get("op"), list)
            if isinstance(obj, dict) and "g_output" in obj and not net_ops:
                raise DecodeError(f"{path}: {_request_file('OpGradientRequest')}")
            return codec.from_json_obj(obj, caffe2_pb2.NetDef)
    except DecodeError as exc:
        unknown = {p.path for p in exc.problems if p.code == "unknown_field"}
        if "net" in unknown:  # (a request body saved for the HTTP API)
            raise DecodeError(f"{exc.message}; {_request_file(None)}", exc.problems) from exc
        if "g_output" in unknown and net_ops:
            raise DecodeError(f"{exc.message}; a NetDef has no g_output (an "
                              "OpGradientRequest of one op has): remove it, and name the "
                              "outputs to differentiate with --ys", exc.problems) from exc
        if "g_output" in unknown:
            raise DecodeError(f"{exc.message}; {_request_file('OpGradientRequest')}",
                              exc.problems) from exc
        raise
    data = path.read_bytes()
    _refuse_empty(path, data)
    try:
        net = codec.from_binary(data, caffe2_pb2.NetDef)
    except DecodeError as exc:
        kind = _binary_request(data)
        if kind is not None:
            raise DecodeError(f"{path}: {_request_file(kind)}") from exc
        raise
    if not any(op.type for op in net.op):
        # (a request's `net` reads as a NetDef's name, its `ys` or `inputs` as ops without
        # a type, its `fetch` as the net's type)
        kind = _binary_request(data)
        if kind is not None:
            raise DecodeError(f"{path}: {_request_file(kind)}")
    return net


def named(path: Path | str, exc: DecodeError) -> DecodeError:
    """``exc`` with its headline naming the file it was read from (its problems unchanged),
    for a command that reads more than one file (``--init-net``, ``--inputs``)."""
    if exc.message.startswith(f"{path}: "):
        return exc
    return DecodeError(f"{path}: {exc.message}", exc.problems)


def _read_text(path: Path) -> str:
    """The text of a ``.pbtxt`` file (a byte-order mark dropped); a byte that is not UTF-8
    is located as the HTTP API locates it in a text body (names are UTF-8, spec §1).

    Raises:
        DecodeError: the file is not UTF-8.
        OSError: the file cannot be read.
    """
    data, bom = _bytes(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, bom, exc, "save it as UTF-8 text, or give a binary NetDef the "
                        ".pb extension", text_format=True) from exc


def _read_json(path: Path) -> Any:
    """The JSON value of the file at ``path`` (a byte-order mark dropped), its problems
    located as the HTTP API locates them (README, Encodings): the field path and op of a
    byte that is not UTF-8 or of a syntax error, with advice for the common slips.

    Raises:
        DecodeError: the file is empty or not UTF-8 JSON.
        OSError: the file cannot be read.
    """
    from app.api.bodypaths import syntax_place

    data, bom = _bytes(path)
    _refuse_empty(path, data.strip())
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, bom, exc, "save it as UTF-8 text") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        (where, op_index, op_type), advice = syntax_place(text, exc, caffe2_pb2.NetDef)
        head = text.lstrip()[:64]
        if not advice and head[:1].isalpha() and ("{" in head or ":" in head):
            advice = "; the file looks like protobuf text format: name it .pbtxt"
        at = f" in {where}" if where else ""
        raise DecodeError.at(f"{path}: not valid JSON: {exc}{at}{advice}", code="invalid_json",
                             path=where, op_index=op_index, op_type=op_type) from exc
    except (ValueError, RecursionError) as exc:  # (>4300-digit ints, nesting)
        raise DecodeError(f"{path}: not valid JSON: {exc}") from exc


def _bytes(path: Path) -> tuple[bytes, int]:
    """The file's bytes without a UTF-8 byte-order mark, and the mark's length (0 or 3)."""
    data = path.read_bytes()
    bom = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    return data[bom:], bom


def _not_utf8(path: Path, bom: int, exc: UnicodeDecodeError, todo: str,
              text_format: bool = False) -> DecodeError:
    """The problem of a file byte that is not UTF-8, with its field path and op."""
    from app.api.bodypaths import bad_byte_place

    where, op_index, op_type = bad_byte_place("", exc, caffe2_pb2.NetDef, text_format)
    at = f", in {where}" if where else ""
    return DecodeError.at(f"{path}: not UTF-8 (byte {bom + exc.start}{at}: {exc.reason}); "
                          f"{todo}", code="invalid_utf8", path=where, op_index=op_index,
                          op_type=op_type)


def _refuse_empty(path: Path, content: object) -> None:
    """An empty file (or one of blanks only) parses as an empty NetDef: refuse it instead.

    Raises:
        DecodeError: ``content`` is empty.
    """
    if not content:
        raise DecodeError(f"{path}: the file is empty; give a NetDef (binary .pb, text "
                          ".pbtxt or .json)")


#: The route of each request message.
_ROUTES = {"NetGradientRequest": "/v1/gradients/net", "VerifyRequest": "/v1/verify",
           "RunRequest": "/v1/run", "JobRequest": "/v1/jobs",
           "OpGradientRequest": "/v1/gradients/op"}


def _request_file(kind: str | None) -> str:
    """What to do with a request message ``kind`` (``None``: a request with a ``net``) given
    where this command reads a bare NetDef."""
    if kind == "OpGradientRequest":
        return ("the file holds an OpGradientRequest (one op and its g_output), and this "
                "command reads a NetDef: POST the file to /v1/gradients/op, or write the op "
                "into a NetDef file ({\"op\": [<the op>]}) and name its outputs with --ys")
    what = f"a {kind}" if kind else "a request message (with `net`)"
    where = (f"POST the whole file to {_ROUTES[kind]}" if kind else
             "POST the whole file to its route (/v1/gradients/net, /v1/verify, /v1/run or "
             "/v1/jobs)")
    return (f"the file holds {what}, and this command reads a bare NetDef: keep only what "
            f"is inside `net` (and name the outputs with --ys), or {where}")


def _binary_request(data: bytes) -> str | None:
    """The netgrad.v1 request message binary ``data`` reads as, with typed ops in its net
    (or op), or ``None``."""
    from api_schemas import netgrad_pb2

    for cls in (netgrad_pb2.NetGradientRequest, netgrad_pb2.VerifyRequest,
                netgrad_pb2.RunRequest, netgrad_pb2.JobRequest, netgrad_pb2.OpGradientRequest):
        try:
            req: Any = codec.from_binary(data, cls)
        except DecodeError:
            continue
        if cls is netgrad_pb2.OpGradientRequest:
            if req.op.type:
                return cls.DESCRIPTOR.name
            continue
        inner = req
        if cls is netgrad_pb2.JobRequest:
            kind = req.WhichOneof("job")
            inner = getattr(req, kind) if kind else None
        if inner is not None and any(op.type for op in inner.net.op):
            return str(cls.DESCRIPTOR.name)
    return None
