"""The page's helper routes: parsing net files, keeping nets for Netron, Netron's files."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api_schemas import caffe2_pb2
from app.api import docs
from app.api.routes import ui
from app.main import create_app
from app.settings import Settings
from core.proto import codec
from tests.api.helpers import assert_problem

MLP = codec.from_json_obj(docs.MLP_NET, caffe2_pb2.NetDef)


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(workers=0)), raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize(("content_type", "data"), [
    ("application/protobuf", codec.to_binary(MLP)),
    ("text/x-protobuf", codec.to_text(MLP).encode()),
    ("application/json", json.dumps(docs.MLP_NET).encode()),
    ("application/json", json.dumps(docs.NET_REQUEST).encode()),  # a request file: its net
])
def test_parse_every_format(client: TestClient, content_type: str, data: bytes) -> None:
    r = client.post("/ui/parse", content=data, headers={"Content-Type": content_type})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["blobs"] == ["fc", "prob"] and body["default_ys"] == ["prob"]
    assert codec.from_json_obj(body["net"], caffe2_pb2.NetDef) == MLP


def test_parse_garbage_is_a_problem(client: TestClient) -> None:
    r = client.post("/ui/parse", content=b"net { op { typ", headers={
        "Content-Type": "text/x-protobuf"})
    assert_problem(r, 400)


def test_kept_net_is_served_as_predict_net_pb(client: TestClient) -> None:
    r = client.post("/ui/nets", json=docs.MLP_NET)
    kept = r.json()
    assert kept["ops"] == 3 and kept["url"].endswith("/predict_net.pb")
    assert client.post("/ui/nets", json=docs.MLP_NET).json()["id"] == kept["id"]  # by content
    pb = client.get(kept["url"])
    assert pb.status_code == 200 and caffe2_pb2.NetDef.FromString(pb.content) == MLP
    init = client.get(kept["url"].replace("predict_net", "init_net"))  # Netron asks for it
    assert init.status_code == 200 and caffe2_pb2.NetDef.FromString(init.content) == \
        caffe2_pb2.NetDef()
    assert_problem(client.get(kept["url"].replace("predict_net", "other_net")), 404)
    assert_problem(client.get("/ui/nets/0000000000000000/init_net.pb"), 404)
    assert_problem(client.get("/ui/nets/0000000000000000/predict_net.pb"), 404)


def test_netron_is_served_without_telemetry(client: TestClient) -> None:
    r = client.get("/netron/index.html")
    assert r.status_code == 200
    assert '<meta name="version" content="0.0.0">' in r.text  # not "packaged": no telemetry
    assert '<meta name="date" content="">' in r.text  # no "please update" nag
    assert "consent=" in r.headers["set-cookie"]  # no consent prompt (and no ipinfo call)
    assert client.get("/netron/caffe2.js").status_code == 200
    assert_problem(client.get("/netron/../../app/main.py"), 404)
    assert_problem(client.get("/netron/%2e%2e/netron/../../../etc/passwd"), 404)


def test_page_degrades_without_netron(client: TestClient,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ui, "netron_dir", lambda: None)
    assert client.get("/ui/examples").json()["netron"] is False
    body = assert_problem(client.get("/netron/index.html"), 404)
    assert "pip install netron" in body["detail"]
    assert client.get("/").status_code == 200


def test_examples_are_runnable_requests(client: TestClient) -> None:
    examples = client.get("/ui/examples").json()["examples"]
    assert {"squeezenet", "mlp", "if_tutorial"} <= set(examples)
    for name, ex in examples.items():
        r = client.post("/v1/gradients/net", json={"net": ex["net"], "ys": ex["ys"]})
        assert r.status_code == 200, (name, r.text[:300])
    assert len(examples["squeezenet"]["net"]["op"]) == 66


def test_page_files_survive_a_reinstall_under_the_running_server(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Walkthrough finding: the README's second command reinstalls netgrad under a running
    first server; the page's files, read at start, are still served (GET / gave a 500)."""
    monkeypatch.setattr(ui, "STATIC", tmp_path / "gone")  # the installed copy removed
    for path, words in (("/", "<html"), ("/ui/static/page.js", "fetch(")):
        r = client.get(path)
        assert r.status_code == 200 and words in r.text, path


def test_the_server_imports_every_module_at_start_up() -> None:
    """A reinstall under a running server (the README's second command) removed or replaced
    modules that were first imported inside a function on a later request: 500s. Every
    module of netgrad is loaded when the server starts (walkthrough, stop 21)."""
    import importlib
    import pkgutil
    import sys

    from app import main

    # (modules only ever imported inside functions; other tests may have imported them)
    lazy = ["app.api.bodypaths", "app.api.record_examples"]
    for name in lazy:
        sys.modules.pop(name, None)
    with TestClient(main.create_app(Settings(workers=0))):
        assert all(name in sys.modules for name in lazy)
        for pkg in main.PACKAGES:
            root = importlib.import_module(pkg)
            names = [i.name for i in pkgutil.walk_packages(root.__path__, pkg + ".")]
            assert names, pkg
            missing = [n for n in names if n not in sys.modules]
            assert missing == [], missing
