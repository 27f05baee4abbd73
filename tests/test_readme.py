"""The README opens with the two set-up commands, CI runs the second, and its examples are real."""

from __future__ import annotations

import json
import re
from pathlib import Path

from fastapi.testclient import TestClient

from app.api import docs
from app.main import create_app
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(README)]


def _setup_commands() -> list[str]:
    lang, body = _blocks()[0]
    assert lang == "sh"
    return [line for line in body.splitlines() if line.strip()]


def test_readme_starts_with_exactly_two_commands() -> None:
    before = README[: README.index("```")]
    assert [line for line in before.splitlines() if line.strip()] == ["# netgrad"]
    serve, test = _setup_commands()
    assert serve.startswith("python3 -m venv .venv && ") and serve.endswith("netgrad serve")
    assert test.startswith("python3 -m venv .venv && ") and "[dev]" in test
    assert test.endswith("python -m pytest")


def test_readme_says_to_restart_the_server_right_after_the_commands() -> None:
    """The second command reinstalls the package under a running first server (which then
    mixes two copies of netgrad): the first paragraph after the commands says to restart it."""
    after = README[README.index("```", README.index("```") + 3) + 3:].lstrip()
    first_paragraph = after.split("\n\n", 1)[0].replace("\n", " ")
    assert "still running" in first_paragraph and "start it again" in first_paragraph
    assert ".venv/bin/netgrad serve" in first_paragraph


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    _, test = _setup_commands()
    assert test in script
    assert "set -euo pipefail" in script
    assert "ruff check" in script and "mypy" in script
    assert (ROOT / ".ci" / "run").stat().st_mode & 0o111


def test_readme_do_example_output_is_what_the_api_answers() -> None:
    sh = next(body for lang, body in _blocks() if lang == "sh" and "do.json" in body)
    request = json.loads(sh.split("<<'JSON'\n", 1)[1].split("\nJSON\n", 1)[0])
    assert request == docs.DO_REQUEST
    outputs = [json.loads(body) for lang, body in _blocks() if lang == "json"]
    with TestClient(create_app(Settings(workers=0))) as client:
        answer = client.post("/v1/gradients/op", json=request).json()
        problem = client.post(
            "/v1/gradients/op",
            json={"op": {"type": "Relu", "input": ["x"], "output": ["y"]}, "g_output": []},
            headers={"X-Request-ID": "readme-1"},
        ).json()
    assert outputs[0] == answer, "README curl output is stale: rerun the example"
    assert outputs[1] == problem


def _top_level_json_fields(desc: object) -> set[str]:
    """The names a JSON request body of ``desc`` takes at its top level (``(json).inline``
    fields contribute their own fields instead of their name)."""
    from api_schemas import netgrad_pb2

    out: set[str] = set()
    for f in desc.fields:  # type: ignore[attr-defined]
        if f.message_type is not None and f.GetOptions().Extensions[netgrad_pb2.json].inline:
            out |= _top_level_json_fields(f.message_type)
        else:
            out.add(f.name)
    return out


def test_readme_endpoint_table_lists_every_request_field() -> None:
    """The endpoint table's request column names exactly the fields the route's message has
    (it had drifted: ``densify`` of /v1/verify and /v1/run was missing)."""
    from app.api.hints import ROUTE_MESSAGES

    rows = {m.group(1): m.group(2) for m in re.finditer(
        r"^\| `POST (/v1/[a-z/]+)` \| `\{([^}]*)\}`", README, re.MULTILINE)}
    checked = 0
    for route in ("/v1/gradients/op", "/v1/gradients/net", "/v1/verify", "/v1/run"):
        listed = {name.strip().rstrip("?") for name in rows[route].split(",")}
        assert listed == _top_level_json_fields(ROUTE_MESSAGES[route]), route
        checked += 1
    assert checked == 4


def test_readme_while_example_output_is_what_the_api_answers() -> None:
    """The hand-built While loop (walkthrough, stop 23: the README had none) runs as shown."""
    import ast

    sh = next(body for lang, body in _blocks() if lang == "sh" and "while.json" in body)
    request = json.loads(sh.split("<<'JSON'\n", 1)[1].split("\nJSON\n", 1)[0])
    section = README[README.index("## Example: a `While` loop built by hand"):]
    shown = next(body for lang, body in FENCE.findall(section) if lang == "text")
    with TestClient(create_app(Settings(workers=1))) as client:
        r = client.post("/v1/run", json=request)
    assert r.status_code == 200, r.text
    assert r.json()["outputs"] == ast.literal_eval(shown.strip())


def test_readme_settings_table_names_every_setting_with_its_default() -> None:
    """Each ``Settings`` field is a ``NETGRAD_*`` row of the README's settings table, and
    the row shows the field's default."""
    table = README.split("## Settings", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `NETGRAD_")]
    for name, field in Settings.model_fields.items():
        var = f"`NETGRAD_{name.upper()}`"
        row = next((r for r in rows if var in r.split("|")[1]), None)
        assert row is not None, f"{var} is not in the README's settings table"
        default = field.default
        shown = {True: "1", False: "0", None: "unset", "": "unset"}.get(default, default)
        if isinstance(default, float) and default.is_integer():
            shown = int(default)
        assert f"`{shown}`" in row.split("|")[2] or shown == "unset", (var, shown, row)
