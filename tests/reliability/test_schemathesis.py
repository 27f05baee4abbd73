"""On demand: schemathesis over the OpenAPI document, 10,000 cases, 0 5xx, 0 violations.

Run with ``NETGRAD_SCHEMATHESIS=1`` (needs ``pip install schemathesis``). The server runs on
127.0.0.1 with two workers; checks: no server error, status codes, content types, response
headers and bodies as declared. Schemathesis' coverage phase alone generates some 18,000
cases for this document; ``--max-examples`` (``NETGRAD_SCHEMATHESIS_EXAMPLES``, 100 per
operation) adds the fuzzing phase; the test asks for at least ``NETGRAD_SCHEMATHESIS_CASES``
(10,000) cases in all, every one passed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.reliability.common import live, record

CASES = int(os.environ.get("NETGRAD_SCHEMATHESIS_CASES", "10000"))
EXAMPLES = int(os.environ.get("NETGRAD_SCHEMATHESIS_EXAMPLES", "100"))
CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,"
          "response_headers_conformance,response_schema_conformance")


@pytest.mark.skipif(os.environ.get("NETGRAD_SCHEMATHESIS") != "1",
                    reason="on demand: NETGRAD_SCHEMATHESIS=1")
@pytest.mark.timeout(7200)
def test_schemathesis_finds_no_server_error_and_no_schema_violation() -> None:
    pytest.importorskip("schemathesis")
    exe = Path(sys.executable).with_name("schemathesis")
    with live({"NETGRAD_WORKERS": "2"}) as server, tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        proc = subprocess.run(
            [str(exe), "run", server.url + "/openapi.json", "--checks", CHECKS,
             "--max-examples", str(EXAMPLES), "--seed", "14", "--workers", "2",
             "--phases", "examples,coverage,fuzzing", "--no-shrink",
             "--report", "ndjson", "--report-ndjson-path", str(report)],
            capture_output=True, text=True, timeout=7000, cwd=tmp,  # its cache stays there
        )
        summary = proc.stdout[-3000:]
        events = [json.loads(line) for line in report.read_text().splitlines() if line.strip()]
        log = server.log_text()
    found = re.search(r"(\d+) generated, (\d+) passed", summary)
    generated, passed = (int(found.group(1)), int(found.group(2))) if found else (0, 0)
    record("schemathesis", {"exit": proc.returncode, "events": len(events),
                            "generated": generated, "passed": passed,
                            "summary": summary.splitlines()[-15:]})
    assert proc.returncode == 0, summary + proc.stderr[-2000:]
    assert generated >= CASES and passed == generated, summary
    assert "Traceback" not in log
