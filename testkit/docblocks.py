"""The runnable shell blocks of README.md and docs/*.md, and the output they quote.

The convention (docs/testing.md):

- ``<!-- runnable: NAME [needs=console] -->`` on the line before a fenced ``sh`` block marks it
  runnable. Blocks of one page with the same NAME are one script, in page order, so a page can
  explain between its steps. ``needs=console``: the script expects a running Console, as the
  README's by-hand block leaves one (``CONSOLE``, ``TOKEN``, and ``SIGNING_KEY`` whose public
  half the Console trusts).
- ``<!-- output: NAME -->`` before a fenced block quotes what the script prints: each non-empty
  line must be a whole line of its stdout or stderr, ``…`` standing for any text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["DocScript", "doc_scripts", "missing_lines"]

_RUNNABLE = re.compile(
    r"^<!-- runnable: ([\w-]+)((?: [\w-]+=[\w,-]+)*) -->\n```sh\n(.*?)^```", re.S | re.M
)
_OUTPUT = re.compile(r"^<!-- output: ([\w-]+) -->\n```\w*\n(.*?)^```", re.S | re.M)
_MARKER = re.compile(r"^<!-- (runnable|output):", re.M)


@dataclass
class DocScript:
    page: Path
    name: str
    needs: frozenset[str] = frozenset()
    blocks: list[str] = field(default_factory=list)
    expected: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.page.name}:{self.name}"

    @property
    def body(self) -> str:
        return "\n".join(self.blocks)


def _options(text: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in text.split())


def doc_scripts(pages: list[Path]) -> list[DocScript]:
    """Every runnable script of these pages, with the lines its page says it prints. A marker
    that does not sit right before a fenced block, or output quoted for no script, raises."""
    found: list[DocScript] = []
    for page in pages:
        text = page.read_text()
        scripts: dict[str, DocScript] = {}
        for name, options, body in _RUNNABLE.findall(text):
            script = scripts.setdefault(name, DocScript(page, name))
            script.needs |= frozenset(_options(options).get("needs", "").split(",")) - {""}
            script.blocks.append(body)
        for name, quoted in _OUTPUT.findall(text):
            if name not in scripts:
                raise ValueError(f"{page}: output quoted for {name!r}, which no block runs")
            scripts[name].expected += [ln.rstrip() for ln in quoted.splitlines() if ln.strip()]
        markers = len(_MARKER.findall(text))
        parsed = len(_RUNNABLE.findall(text)) + len(_OUTPUT.findall(text))
        if markers != parsed:
            raise ValueError(f"{page}: a runnable/output marker is not right before its block")
        found += scripts.values()
    return found


def _pattern(line: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in line.split("…")))


def missing_lines(expected: list[str], output: str) -> list[str]:
    """The quoted lines no line of ``output`` is (``…`` matching any text)."""
    lines = [ln.rstrip() for ln in output.splitlines()]
    return [want for want in expected if not any(_pattern(want).fullmatch(line) for line in lines)]
