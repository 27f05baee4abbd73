"""Swagger UI in a real browser (Debian's chromium, driven by Playwright): with API keys on,
"Authorize" takes a key and "Try it out" then gets a 200; without the key the same call is
a 401. Skips where Playwright or chromium is absent (``.ci/run`` installs them with the
browser tests of the web page)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from app import auth
from tests.ops.server import serve

CHROMIUM = os.environ.get("NETGRAD_CHROMIUM", "/usr/bin/chromium")

sync_api = pytest.importorskip("playwright.sync_api", reason="needs Playwright (browser tests)")
if not (Path(CHROMIUM).exists() or shutil.which("chromium")):
    pytest.skip("needs Debian's chromium", allow_module_level=True)

OP_ID = "operations-gradients-gradientsOp"


def _try_it_out(page: object) -> str:
    """Expand POST /v1/gradients/op, run its example, return the status Swagger shows."""
    p = page  # playwright Page (typed loosely: the package is optional)
    block = p.locator(f"#{OP_ID}")  # type: ignore[attr-defined]
    if not block.locator(".try-out__btn").is_visible():
        block.locator(".opblock-summary").first.click()
    button = block.locator(".try-out__btn")
    if "cancel" not in (button.text_content() or "").lower():
        button.click()
    clear = block.locator(".btn-clear")
    if clear.count() and clear.first.is_visible():  # drop the previous answer first
        clear.first.click()
        block.locator(".live-responses-table").wait_for(state="detached", timeout=10_000)
    block.locator(".execute").click()
    status = block.locator(".live-responses-table tbody .response-col_status").first
    status.wait_for(timeout=20_000)
    return (status.text_content() or "").strip()


def test_authorize_then_try_it_out(tmp_path: Path) -> None:
    keys = tmp_path / "keys.txt"
    key = auth.add_key(keys, "browser")
    env = {"NETGRAD_API_KEYS_FILE": str(keys)}
    with serve(tmp_path, env) as server, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(server.url + "/docs")
            page.locator(f"#{OP_ID}").wait_for(timeout=30_000)
            # Before authorizing: the call goes out without a key.
            assert _try_it_out(page).startswith("401")
            page.locator("button.authorize").first.click()
            modal = page.locator(".modal-ux")
            modal.wait_for()
            box = modal.locator(".auth-container").filter(has_text="X-API-Key")
            box.locator("input").fill(key)
            box.locator("button.authorize").click()
            modal.locator("button.btn-done").first.click()
            assert _try_it_out(page).startswith("200")
        finally:
            browser.close()
