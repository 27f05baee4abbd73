"""``GET /``: the web page that draws a net and its gradient; its helper routes; ReDoc.

The page (``app/static/index.html`` + ``page.js``) calls the public API
(``/v1/gradients/net``, ``/v1/verify``) and these helpers, none of them part of the API
(``include_in_schema=False``):

* ``GET /ui/examples`` - the example nets (:mod:`app.ui.examples`);
* ``POST /ui/parse`` - a ``.pb`` / ``.pbtxt`` / ``.json`` NetDef file to its JSON form and
  blob names (the browser cannot read protobuf itself);
* ``POST /ui/nets`` and ``GET /ui/nets/{id}/predict_net.pb`` - a net stored by content hash
  (a bounded in-memory cache, :mod:`app.ui.nets`) and served as a Caffe2 ``predict_net.pb``
  for Netron, which opens a model by URL (``/netron/index.html?url=...``) and also asks for
  the ``init_net.pb`` beside it (an empty NetDef here);
* ``/netron/...`` - Netron's browser viewer, served from the ``netron`` package's own
  directory: nothing is fetched from a CDN. Its ``index.html`` is served with version
  ``0.0.0`` and a ``consent`` cookie, which keeps the viewer from phoning home (no
  telemetry, no consent prompt, no update nag);
* ``GET /redoc`` - ReDoc from the local bundle, with its sidebar logo taken from here
  instead of its CDN.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, Response

from api_schemas import caffe2_pb2
from app.api.negotiation import json_bytes
from app.errors import ProblemError
from app.ui import nets
from app.ui.examples import examples
from core.errors import DecodeError
from core.proto import codec

router = APIRouter(include_in_schema=False)

STATIC = Path(__file__).resolve().parents[2] / "static"
#: Files of the page itself.
PAGE_FILES = {"page.js": "text/javascript", "page.css": "text/css"}
#: The page's files, read once at import (13 KB): a reinstall of the package under a
#: running server (the README's second command) cannot take them away.
_PAGE = {name: (STATIC / name).read_bytes() for name in ("index.html", *PAGE_FILES)}
REDOC_LOGO_CDN = "https://cdn.redoc.ly/redoc/logo-mini.svg"
LOCAL_LOGO = "/static-offline-docs/favicon.png"


def netron_dir() -> Path | None:
    """The directory of the installed ``netron`` package's viewer, or ``None`` if absent."""
    try:
        import netron
    except ImportError:
        return None
    path = Path(netron.__file__).resolve().parent
    return path if (path / "index.html").is_file() else None


@router.get("/")
def page() -> Response:
    """The page: pick or upload a net, generate its gradient, see both drawn, verify."""
    return Response(_PAGE["index.html"], media_type="text/html")


@router.get("/ui/static/{name}")
def page_file(name: str) -> Response:
    """The page's script and style."""
    if name not in PAGE_FILES:
        raise ProblemError(404, "not_found", f"no page file {name!r}")
    return Response(_PAGE[name], media_type=PAGE_FILES[name])


@router.get("/ui/examples")
def example_nets() -> Response:
    """Name -> ``{"title", "net", "ys", "verify"}`` of each example net, plus whether
    Netron is installed (``netron``: the page then draws the nets)."""
    body = {"netron": netron_dir() is not None, "examples": examples()}
    return Response(json_bytes(body), media_type="application/json")


def _parse_net(data: bytes, content_type: str) -> caffe2_pb2.NetDef:
    media = content_type.split(";", 1)[0].strip().lower()
    if media in ("application/protobuf", "application/x-protobuf", "application/octet-stream"):
        return codec.from_binary(data, caffe2_pb2.NetDef)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"the file is not UTF-8 text: {exc}") from exc
    if media == "application/json":
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DecodeError(f"the file is not valid JSON: {exc}") from exc
        except RecursionError as exc:
            raise DecodeError("the JSON file is nested too deeply") from exc
        except ValueError as exc:  # an integer of more digits than Python converts
            raise DecodeError(f"the file is not valid JSON: {exc}") from exc
        if isinstance(obj, dict) and "net" in obj and "op" not in obj:
            obj = obj["net"]  # a request file: take its net
        return codec.from_json_obj(obj, caffe2_pb2.NetDef)
    if media in ("text/x-protobuf", "text/plain"):
        return codec.from_text(text, caffe2_pb2.NetDef)
    raise ProblemError(415, "unsupported_media_type",
                       "send the NetDef file as application/protobuf (.pb), text/x-protobuf "
                       "(.pbtxt) or application/json (.json)")


async def _bounded_body(request: Request, message: str) -> bytes:
    """The body, read only up to ``nets.MAX_NET_BYTES`` (413 past it, rest unread).

    Raises:
        ProblemError: 413 ``body_too_large`` (``message`` formatted with the limit).
    """
    parts: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > nets.MAX_NET_BYTES:
            raise ProblemError(413, "body_too_large", message.format(nets.MAX_NET_BYTES))
        parts.append(chunk)
    return b"".join(parts)


def _blobs(net: caffe2_pb2.NetDef) -> list[str]:
    seen: dict[str, None] = {}
    for op in net.op:
        for name in op.output:
            seen.setdefault(name, None)
    return list(seen)


@router.post("/ui/parse")
async def parse(request: Request) -> Response:
    """A NetDef file (binary, text format or JSON) -> ``{"net", "blobs", "default_ys"}``."""
    data = await _bounded_body(request, "net files up to {} bytes are accepted here")
    net = _parse_net(data, request.headers.get("content-type", ""))
    blobs = _blobs(net)
    default = list(net.external_output) or blobs[-1:]
    body = {"net": codec.to_json_obj(net), "blobs": blobs, "default_ys": default}
    return Response(json_bytes(body), media_type="application/json")


@router.post("/ui/nets")
async def store_net(request: Request) -> Response:
    """Keep a NetDef (JSON body) for Netron: ``{"id", "ops", "url"}``."""
    data = await _bounded_body(request, "nets up to {} bytes are kept for drawing")
    net = _parse_net(data, request.headers.get("content-type", "application/json"))
    key = nets.store(net)
    body = {"id": key, "ops": len(net.op), "url": f"/ui/nets/{key}/predict_net.pb"}
    return Response(json_bytes(body), media_type="application/json")


@router.get("/ui/nets/{key}/{name}")
def stored_net(key: str, name: str) -> Response:
    """A kept net as binary ``predict_net.pb``; ``init_net.pb`` (which Netron asks for next
    to a predict net, for its weights) is an empty NetDef: the page draws no weights. 404
    for anything else."""
    if name == "init_net.pb" and nets.load(key) is not None:
        return Response(b"", media_type="application/octet-stream")  # an empty NetDef
    data = nets.load(key) if name == "predict_net.pb" else None
    if data is None:
        raise ProblemError(404, "not_found", f"no net {key}/{name} is kept (generate again)")
    return Response(data, media_type="application/octet-stream")


@cache
def _netron_index(directory: str) -> str:
    text = (Path(directory) / "index.html").read_text(encoding="utf-8")
    text = re.sub(r'<meta name="version" content="[^"]*">',
                  '<meta name="version" content="0.0.0">', text)
    return re.sub(r'<meta name="date" content="[^"]*">', '<meta name="date" content="">', text)


@router.get("/netron/{path:path}")
def netron_file(path: str) -> Response:
    """Netron's viewer files, from the installed ``netron`` package (see the module doc)."""
    directory = netron_dir()
    if directory is None:
        raise ProblemError(404, "netron_not_installed",
                           "the net viewer needs the netron package: pip install netron")
    if path in ("", "index.html"):
        response = HTMLResponse(_netron_index(str(directory)))
        response.set_cookie("consent", "netgrad", path="/netron", samesite="strict")
        return response
    target = (directory / path).resolve()
    if directory not in target.parents or not target.is_file():
        raise ProblemError(404, "not_found", f"no Netron file {path!r}")
    return FileResponse(target)


REDOC_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>netgrad - ReDoc</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="shortcut icon" href="/static-offline-docs/favicon.png">
<style>body { margin: 0; padding: 0; }</style></head>
<body><redoc spec-url="/openapi.json"></redoc>
<script src="/ui/redoc.standalone.js"></script></body></html>
"""


@router.get("/redoc")
def redoc() -> HTMLResponse:
    """ReDoc, every asset served here."""
    return HTMLResponse(REDOC_PAGE)


@cache
def _redoc_script() -> bytes:
    import fastapi_offline

    path = Path(fastapi_offline.__file__).parent / "static" / "redoc.standalone.js"
    return path.read_text(encoding="utf-8").replace(REDOC_LOGO_CDN, LOCAL_LOGO).encode()


@router.get("/ui/redoc.standalone.js")
def redoc_script() -> Response:
    """fastapi-offline's ReDoc bundle, its one CDN image pointed here."""
    return Response(_redoc_script(), media_type="text/javascript")
