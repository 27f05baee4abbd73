"""Issue 12 acceptance: the page at / in a real headless Chromium (Debian chromium, driven by
Playwright's Python package; ``playwright install`` cannot download browsers here).

Opens ``/``, picks the SqueezeNet example, presses Generate, checks that Netron drew both
nets with one op header per op, presses Verify and waits for "passed". Screenshots go to
the test's temporary directory. Also renders ReDoc and checks that it is offline and shows
``<blob>_autogen_grad``. Outside CI the test skips when chromium or playwright is absent;
under CI (``CI`` set, as ``.ci/run`` does) their absence is a failure.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.api.live_server import live_server

CHROMIUM = os.environ.get("NETGRAD_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright Python package is not installed (pip install playwright)"
    if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
        return f"{CHROMIUM} is absent (apt-get install chromium)"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    why = _missing()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"browser test under CI: {why}; .ci/run must install it")
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with live_server({"NETGRAD_WORKERS": "1", "NETGRAD_JOB_TIMEOUT_S": "120"}) as url:
        yield url


def _offline_page(browser: Any, server: str) -> tuple[Any, Any, list[str]]:
    """A page that refuses (and records) every request that leaves the server."""
    context = browser.new_context(viewport={"width": 1400, "height": 2200})
    outside: list[str] = []
    host = urlparse(server).netloc

    def route(r: Any) -> None:
        url = r.request.url
        if urlparse(url).netloc == host or url.startswith(("data:", "blob:")):
            r.continue_()
        else:
            outside.append(url)
            r.abort()

    context.route("**/*", route)
    return context, context.new_page(), outside


def _drawn_ops(frame: Any) -> int:
    """Op headers Netron drew (a chained in-place op has its own header in its node)."""
    count: int = frame.locator("svg g.graph-node .node-item-type").count()
    return count


def test_squeezenet_generate_draw_verify(browser: Any, server: str, tmp_path: Path) -> None:
    context, page, outside = _offline_page(browser, server)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    failed: list[str] = []  # e.g. Netron's init_net.pb beside each predict_net.pb
    context.on("response", lambda r: failed.append(f"{r.status} {r.url}")
               if r.status >= 400 else None)
    page.goto(server + "/")
    page.wait_for_selector("body[data-ready=true]")
    page.select_option("#example", "squeezenet")
    assert page.locator("#net-summary").inner_text().endswith("66 ops")
    page.click("#generate")
    page.wait_for_function("document.getElementById('gradient-count').dataset.ops")
    forward_ops = int(page.locator("#forward-count").get_attribute("data-ops") or 0)
    gradient_ops = int(page.locator("#gradient-count").get_attribute("data-ops") or 0)
    assert forward_ops == 66 and gradient_ops > forward_ops
    counts = {}
    for frame_id, ops in (("forward-view", forward_ops), ("gradient-view", gradient_ops)):
        frame = page.frame_locator(f"#{frame_id}")
        frame.locator("svg g.graph-node").first.wait_for(timeout=60_000)
        page.wait_for_timeout(500)
        counts[frame_id] = _drawn_ops(frame)
        assert counts[frame_id] == ops, (frame_id, counts[frame_id], ops)
    page.screenshot(path=str(tmp_path / "generate.png"), full_page=True)
    page.locator("#forward-view").screenshot(path=str(tmp_path / "forward_netron.png"))
    page.locator("#gradient-view").screenshot(path=str(tmp_path / "gradient_netron.png"))
    page.locator("#gradient-view").hover()  # Netron refuses eval(): scroll with the wheel
    for _ in range(12):
        page.mouse.wheel(0, 2000)
        page.wait_for_timeout(50)
    page.wait_for_timeout(300)
    page.locator("#gradient-view").screenshot(path=str(tmp_path / "gradient_netron_end.png"))
    rows = page.locator("#grad-map tbody tr")
    assert rows.count() > 50
    assert "conv1_w" in page.locator("#grad-map").inner_text()
    page.click("#verify")
    page.wait_for_selector("#verdict:text-matches('passed|failed')", timeout=120_000)
    page.screenshot(path=str(tmp_path / "verify.png"), full_page=True)
    page.locator("#verify-results").screenshot(path=str(tmp_path / "verify_report.png"))
    assert page.locator("#verdict").inner_text() == "passed"
    marks = page.locator("#report tbody td.pass")
    assert marks.count() == 4
    assert not outside, outside
    assert not errors, errors
    assert not failed, failed
    print(f"screenshots in {tmp_path}")
    context.close()


def test_upload_and_errors_in_words(browser: Any, server: str, tmp_path: Path) -> None:
    context, page, outside = _offline_page(browser, server)
    page.goto(server + "/")
    page.wait_for_selector("body[data-ready=true]")
    from api_schemas import caffe2_pb2
    from app.api import docs
    from core.proto import codec

    upload = tmp_path / "mlp_predict_net.pb"
    upload.write_bytes(codec.to_binary(codec.from_json_obj(docs.MLP_NET, caffe2_pb2.NetDef)))
    page.set_input_files("#file", str(upload))  # a binary .pb, parsed by the server
    page.wait_for_selector("#net-summary:text('mlp: 3 ops')")
    assert page.locator("#ys option:checked").all_inner_texts() == ["prob"]
    page.click("#input details summary")
    page.fill("#inputs", "[]")
    page.click("#verify")
    page.wait_for_selector("#error:not([hidden])")
    text = page.locator("#error").inner_text()
    page.locator("#error").screenshot(path=str(tmp_path / "error.png"))
    assert "Bad Request (400)" in text and "`inputs`" in text and "'fc_w'" in text
    assert not outside, outside
    context.close()


def test_redoc_renders_offline(browser: Any, server: str, tmp_path: Path) -> None:
    context, page, outside = _offline_page(browser, server)
    page.goto(server + "/redoc")
    page.wait_for_selector("h1:has-text('netgrad')", timeout=60_000)
    page.wait_for_timeout(1000)
    body = page.locator("body").inner_text()
    page.screenshot(path=str(tmp_path / "redoc.png"))
    assert "<blob>_autogen_grad" in body and "&lt;" not in body
    page.locator("button:has-text('Undecodable body')").first.click()
    page.wait_for_timeout(500)
    expanded = page.locator("body").inner_text()
    page.screenshot(path=str(tmp_path / "redoc_problem.png"))
    assert "urn:netgrad:problem:<code>" in expanded
    assert not outside, outside
    context.close()


def _try_out(page: Any, server: str, operation_id: str) -> Any:
    """Open /docs, expand ``operation_id`` and press "Try it out"; its block's locator."""
    page.goto(server + "/docs")
    op = page.locator(f"#operations-gradients-{operation_id}")
    op.wait_for(timeout=60_000)
    op.locator(".opblock-summary").click()
    op.locator("button.try-out__btn").click()
    return op


def _execute(page: Any, op: Any) -> str:
    """Press "Execute" in the block ``op`` and return the live response's text."""
    op.locator("button.execute").click()
    op.locator(".live-responses-table").wait_for()
    page.wait_for_timeout(300)
    text: str = op.locator(".live-responses-table").inner_text()
    return text


def test_swagger_offers_json_only_and_renders_offline(browser: Any, server: str,
                                                      tmp_path: Path) -> None:
    context, page, outside = _offline_page(browser, server)
    op = _try_out(page, server, "gradientsNet")
    media = op.locator(".body-param-content-type select")
    assert media.locator("option").all_inner_texts() == ["application/json"]
    text = _execute(page, op)
    page.screenshot(path=str(tmp_path / "swagger.png"), full_page=False)
    assert "200" in text and "fc_w_grad" in text
    assert not outside, outside
    context.close()


def test_swagger_asks_for_a_text_format_answer(browser: Any, server: str,
                                               tmp_path: Path) -> None:
    """The answer's media type picked in "Try it out" is sent as Accept: text/x-protobuf,
    and the text-format answer is shown (binary types stay out of the page)."""
    context, page, outside = _offline_page(browser, server)
    op = _try_out(page, server, "gradientsNet")
    answer = op.locator(".response-control-media-type select").first
    assert answer.locator("option").all_inner_texts() == ["application/json",
                                                          "text/x-protobuf"]
    answer.select_option("text/x-protobuf")
    text = _execute(page, op)
    page.screenshot(path=str(tmp_path / "swagger-text.png"), full_page=False)
    assert "text/x-protobuf; charset=utf-8" in text, text
    assert 'grad_ops {' in text and 'output: "fc_w_grad"' in text, text
    assert not outside, outside
    context.close()


MIXED_NET = {"name": "mixed", "op": [
    {"type": "Gather", "input": ["E", "I"], "output": ["G"]},
    {"type": "Relu", "input": ["E"], "output": ["R"]},
    {"type": "ReduceSum", "input": ["G"], "output": ["Gs"],
     "arg": [{"name": "keepdims", "i": 0}]},
    {"type": "ReduceSum", "input": ["R"], "output": ["Rs"],
     "arg": [{"name": "keepdims", "i": 0}]},
    {"type": "Add", "input": ["Gs", "Rs"], "output": ["loss"]},
]}
MIXED_INPUTS = [
    {"blob": "E", "random": {"shape": [4, 3], "distribution": "away_from_zero", "seed": 3}},
    {"blob": "I", "tensor": {"shape": [2], "dtype": "int32", "data": [0, 2]}},
]


def test_paste_and_upload_json_then_verify_with_densify(browser: Any, server: str,
                                                         tmp_path: Path) -> None:
    """A JSON net pasted or uploaded as ``.json`` loads; Verify sends the densify box."""
    import json

    context, page, outside = _offline_page(browser, server)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server + "/")
    page.wait_for_selector("body[data-ready=true]")
    page.fill("#source", json.dumps(MIXED_NET, indent=1))
    page.click("#load")
    page.wait_for_selector("#net-summary:text('mixed: 5 ops')")
    assert page.locator("#error").is_hidden()
    assert page.locator("#ys option:checked").all_inner_texts() == ["loss"]

    from app.api import docs

    upload = tmp_path / "mlp.json"
    upload.write_text(json.dumps(docs.MLP_NET))
    page.set_input_files("#file", str(upload))
    page.wait_for_selector("#net-summary:text('mlp: 3 ops')")
    assert page.locator("#ys option:checked").all_inner_texts() == ["prob"]
    assert page.locator("#error").is_hidden()

    page.fill("#source", json.dumps(MIXED_NET))
    page.click("#load")
    page.wait_for_selector("#net-summary:text('mixed: 5 ops')")
    page.click("#input details summary")
    page.fill("#inputs", json.dumps(MIXED_INPUTS))
    page.click("#verify")  # without densify: Caffe2's error, in words
    page.wait_for_selector("#error:not([hidden])", timeout=120_000)
    assert "densify" in page.locator("#error").inner_text()
    page.check("#densify")
    page.click("#verify")
    page.wait_for_selector("#verdict:text-matches('passed|failed')", timeout=120_000)
    page.screenshot(path=str(tmp_path / "verify_densify.png"), full_page=True)
    assert page.locator("#verdict").inner_text() == "passed"
    assert page.locator("#error").is_hidden()
    assert "E" in page.locator("#report").inner_text()
    assert not outside, outside
    assert not errors, errors
    context.close()
