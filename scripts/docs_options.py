"""Write the documentation site's option tables from the option definitions, or check they are current.

Why a script: the tables are the user's reference and the definitions are the code's, so one is made
from the other. Each table sits between ``<!-- NAME:begin ... -->`` and ``<!-- NAME:end -->`` in
docs/reference/options.md (the site's Options page); tests/unit/spark/test_options.py fails when one is stale.

    python scripts/docs_options.py          # rewrite the tables in docs/reference/options.md
    python scripts/docs_options.py --check  # exit 1 if a table differs from the definitions
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

from tubespark.rocketmq.spark import options as rocketmq
from tubespark.spark.options import shared_option_table
from tubespark.tank.spark import options as tank
from tubespark.tubemq.spark import options as tubemq

PAGE = Path(__file__).resolve().parent.parent / "docs" / "reference" / "options.md"
"""The page holding every option table (its links are relative to docs/reference/)."""
CHECKED_BY = "tests/unit/spark/test_options.py"

BLOCKS: dict[str, tuple[str, Callable[[], str]]] = {
    "shared-options": ("tubespark/spark/options.py",
                       lambda: shared_option_table([tubemq.OPTIONS, tank.OPTIONS, rocketmq.OPTIONS])),
    "tubemq-options": ("tubespark/tubemq/spark/options.py", tubemq.option_table),
    "tank-options": ("tubespark/tank/spark/options.py", tank.option_table),
    "rocketmq-options": ("tubespark/rocketmq/spark/options.py", rocketmq.option_table),
}
"""Block name -> (the module defining its options, the function rendering the table)."""


def _block(name: str) -> re.Pattern[str]:
    """A whole block: its begin marker line, the table (group 1, absent in an empty block), its end marker."""
    return re.compile(rf"<!-- {name}:begin\b[^\n]*-->\n(?:(.*?)\n)?<!-- {name}:end -->", re.S)


def block(name: str, table: str) -> str:
    """Block ``name`` holding ``table``, its begin marker naming the definitions and the check."""
    return (f"<!-- {name}:begin (generated from {BLOCKS[name][0]} by scripts/docs_options.py; {CHECKED_BY} "
            f"checks it) -->\n{table}\n<!-- {name}:end -->")


def tables(page: str) -> dict[str, str]:
    """The current content of every block in ``page`` (a missing block is left out)."""
    found = {}
    for name in BLOCKS:
        match = _block(name).search(page)
        if match:
            found[name] = match.group(1) or ""
    return found


def generated(page: str) -> str:
    """``page`` with every block's marker and table made from the definitions (ValueError: a block is missing)."""
    for name, (_, render) in BLOCKS.items():
        match = _block(name).search(page)
        if match is None:
            raise ValueError(f"{PAGE.name} has no {name} block (<!-- {name}:begin ... --> ... <!-- {name}:end -->)")
        start, end = match.span()
        page = page[:start] + block(name, render()) + page[end:]
    return page


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the tables are stale")
    args = parser.parse_args(argv)
    current = PAGE.read_text()
    wanted = generated(current)
    if wanted == current:
        return 0
    if args.check:
        print("docs/reference/options.md's option tables are stale: run python scripts/docs_options.py",
              file=sys.stderr)
        return 1
    PAGE.write_text(wanted)
    print("docs/reference/options.md's option tables rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
