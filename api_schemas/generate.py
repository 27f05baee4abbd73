"""Regenerate ``api_schemas/*_pb2.py`` (and ``.pyi`` stubs) from the ``.proto`` files.

Usage (from the repository root)::

    python -m api_schemas.generate            # rewrite the generated files
    python -m api_schemas.generate --check    # exit 1 if they are stale

Needs the ``dev`` extra (``grpcio-tools``, which bundles ``protoc``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ("api_schemas/caffe2.proto", "api_schemas/netgrad.proto")
GENERATED = (
    "api_schemas/caffe2_pb2.py",
    "api_schemas/caffe2_pb2.pyi",
    "api_schemas/netgrad_pb2.py",
    "api_schemas/netgrad_pb2.pyi",
)


def generate(out_dir: Path) -> None:
    """Run protoc (from grpcio-tools) over the schema files into ``out_dir``.

    Raises:
        RuntimeError: protoc reported an error.
    """
    from grpc_tools import protoc  # type: ignore[import-untyped]

    args = ["protoc", f"-I{ROOT}", f"--python_out={out_dir}", f"--pyi_out={out_dir}", *PROTOS]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed")


def stale_files() -> list[str]:
    """Return the generated files whose committed text differs from a fresh generation."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        return [
            rel
            for rel in GENERATED
            if not (ROOT / rel).exists()
            or (Path(tmp) / rel).read_text() != (ROOT / rel).read_text()
        ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="only report stale files")
    ns = parser.parse_args(argv)
    if ns.check:
        stale = stale_files()
        for rel in stale:
            print(f"stale: {rel}", file=sys.stderr)
        return 1 if stale else 0
    generate(ROOT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
