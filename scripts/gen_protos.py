"""Generate tubespark's protobuf modules from protos/ with one pinned protoc, or check they are current.

Why a script: the generated ``*_pb2.py`` files are committed (so installing tubespark needs no protoc),
which means they can drift from ``protos/``. CI runs ``--check`` to catch that; the pin keeps the output
byte-stable across machines.

    python scripts/gen_protos.py          # regenerate tubespark/tubemq/wire/pb/
    python scripts/gen_protos.py --check  # exit 1 if the committed modules differ from protos/
"""

from __future__ import annotations

import argparse
import filecmp
import importlib.metadata
import sys
import tempfile
from pathlib import Path

PINNED_GRPCIO_TOOLS = "1.85.1"
ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "protos"
OUT_DIR = ROOT / "tubespark" / "tubemq" / "wire" / "pb"
HEADER = '"""Generated from protos/ by scripts/gen_protos.py. Do not edit."""\n'


def generate(into: Path) -> list[Path]:
    """Run the pinned protoc on every .proto and return the files written."""
    installed = importlib.metadata.version("grpcio-tools")
    if installed != PINNED_GRPCIO_TOOLS:
        sys.exit(f"grpcio-tools {PINNED_GRPCIO_TOOLS} is required (found {installed}): "
                 f"pip install grpcio-tools=={PINNED_GRPCIO_TOOLS}")
    from grpc_tools import protoc

    protos = sorted(PROTO_DIR.glob("*.proto"))
    args = ["protoc", f"-I{PROTO_DIR}", f"--python_out={into}", f"--pyi_out={into}"]
    if protoc.main(args + [str(p) for p in protos]) != 0:
        sys.exit("protoc failed")
    (into / "__init__.py").write_text(HEADER)
    return sorted(into.iterdir())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    opts = parser.parse_args()
    if not opts.check:
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        for stale in OUT_DIR.glob("*_pb2.py*"):
            stale.unlink()
        for path in generate(OUT_DIR):
            print(f"wrote {path.relative_to(ROOT)}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = {p.name: p for p in generate(Path(tmp))}
        committed = {p.name: p for p in OUT_DIR.iterdir() if p.is_file()}
        drift = sorted(set(fresh) ^ set(committed))
        drift += [n for n in sorted(set(fresh) & set(committed))
                  if not filecmp.cmp(fresh[n], committed[n], shallow=False)]
    if drift:
        print("generated protobuf modules are out of date: " + ", ".join(drift))
        print("run: python scripts/gen_protos.py")
        return 1
    print("generated protobuf modules match protos/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
