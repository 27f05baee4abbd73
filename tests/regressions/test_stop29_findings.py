"""Stop 29 findings: the command line's error report, and what the review found."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app import cli


def test_one_problem_is_not_printed_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    net = tmp_path / "net.json"
    net.write_text(json.dumps({"op": [{"type": "Reluu", "input": ["x"], "output": ["y"]}]}))
    assert cli.main(["grad", str(net), "--ys", "y"]) == 1
    err = capsys.readouterr().err
    assert err.count("Unknown operator type 'Reluu'") == 1, err
    assert "  - unknown_operator at op[0]:Reluu\n" in err


def test_two_problems_keep_their_own_words(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                           ) -> None:
    ops = [{"type": "Reluu", "input": ["x"], "output": ["y"]},
           {"type": "Sigmoidd", "input": ["y"], "output": ["z"]}]
    net = tmp_path / "net.json"
    net.write_text(json.dumps({"op": ops}))
    assert cli.main(["grad", str(net), "--ys", "z"]) == 1
    err = capsys.readouterr().err
    assert "at op[0]:Reluu: Unknown operator type 'Reluu'" in err
    assert "at op[1]:Sigmoidd: Unknown operator type 'Sigmoidd'" in err


@pytest.mark.parametrize(("ys", "hint"), [("y", True), (1e-7, False), (True, False), (3, False)])
def test_a_list_hint_is_given_only_for_a_value_the_list_would_take(ys: object, hint: bool
                                                                   ) -> None:
    """``ys: "y"`` gets ``["y"]``; ``ys: 3`` does not get ``[3]``, which is refused too."""
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.settings import Settings

    op = {"type": "Relu", "input": ["x"], "output": ["y"]}
    with TestClient(create_app(Settings(workers=0))) as c:
        r = c.post("/v1/gradients/net", json={"net": {"op": [op]}, "ys": ys})
    assert r.status_code == 400
    (e,) = r.json()["errors"]
    assert e["path"] == "ys"
    assert ("a list of it" in e["message"]) is hint, e["message"]


@pytest.mark.parametrize(("route", "body", "field", "words"), [
    ("/v1/run", {"net": {"op": []}}, "fetch", "Blobs to return, in this order."),
    ("/v1/gradients/op", {"g_output": ["g"]}, "op", "The forward op"),
    ("/v1/run", {"fetch": ["y"]}, "net", "The forward net."),
])
def test_a_missing_required_field_says_what_it_holds(route: str, body: dict[str, object],
                                                      field: str, words: str) -> None:
    """The field's description comes from its ``.proto`` comment (the generated schema)."""
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.settings import Settings

    with TestClient(create_app(Settings(workers=0))) as c:
        r = c.post(route, json=body)
    assert r.status_code == 400
    (e,) = [e for e in r.json()["errors"] if e["path"] == field]
    assert e["message"].startswith(f"{field}: field required; what it holds: {words}"), e
