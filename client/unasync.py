"""Write `arengine_client/_sync.py` (`Client`) from `arengine_client/_async.py` (`AsyncClient`).

Each call of the client is written once, as a coroutine; the blocking client is the same code
with `async` and `await` taken out and each asynchronous name replaced by its blocking twin
(httpcore's way: a few whole-word substitutions, no parser).

    python client/unasync.py          # rewrite _sync.py
    python client/unasync.py --check  # exit 1 if _sync.py is not what it would write
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent / "arengine_client"
SOURCE = PACKAGE / "_async.py"
TARGET = PACKAGE / "_sync.py"

SUBSTITUTIONS = (
    (r"^import asyncio\n", ""),
    (r"\bfrom websockets\.asyncio\.client import\b", "from websockets.sync.client import"),
    (r"\bawait asyncio\.sleep\(", "time.sleep("),
    (r"\basync def\b ", "def "),
    (r"\basync with\b ", "with "),
    (r"\basync for\b ", "for "),
    (r"\bawait ", ""),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\baclose\b", "close"),
    (r"\baread\b", "read"),
    (r"\baiter_", "iter_"),
    (r"\bAsync(BaseTransport|Background|Chunks|Client|Iterator)\b", r"\1"),
)
"""Pattern and replacement, applied in this order to the whole source."""

HEADER = "# Generated from _async.py by client/unasync.py: edit that file and run the script.\n"


def generate(source: str) -> str:
    """The blocking module for the asynchronous module's source."""
    for pattern, replacement in SUBSTITUTIONS:
        source = re.sub(pattern, replacement, source, flags=re.MULTILINE)
    return HEADER + source


def main(argv: list[str]) -> int:
    expected = generate(SOURCE.read_text(encoding="utf-8"))
    if "--check" in argv:
        if TARGET.read_text(encoding="utf-8") != expected:
            print(f"{TARGET} is out of date: run python {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(expected, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
