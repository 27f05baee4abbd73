"""The committed ``api_schemas/*_pb2.py`` files match a fresh ``python -m api_schemas.generate``."""

from __future__ import annotations

import pytest


def test_generated_code_is_fresh() -> None:
    pytest.importorskip("grpc_tools", reason="needs the dev extra (grpcio-tools)")
    from api_schemas.generate import stale_files

    stale = stale_files()
    assert not stale, f"regenerate with `python -m api_schemas.generate`; stale: {stale}"
