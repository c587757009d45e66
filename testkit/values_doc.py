"""Read the ``# --`` documentation comments of values.yaml (helm-docs style) and tabulate them.

A key is documented when the comment block right above it starts with ``# --``. A documented
mapping is one row (its default is the whole mapping: resources, securityContext, …); an
undocumented mapping must document each of its keys. The README and docs/chart.md carry the
table this module builds, between ``<!-- values:start -->`` and ``<!-- values:end -->``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

START = "<!-- values:start -->"
END = "<!-- values:end -->"
_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_./-]+):(?:\s|$)")


@dataclass(frozen=True)
class ValueDoc:
    path: str
    type: str
    default: Any
    description: str


def comments_by_path(text: str) -> dict[str, str]:
    """The ``# --`` description above each key of values.yaml, by dotted path."""
    found: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    block: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            block.append(stripped.lstrip("#").strip())
            continue
        match = _KEY.match(line)
        if not match:
            block = []
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match["key"]))
        path = ".".join(key for _, key in stack)
        if block and block[0].startswith("-- "):
            found[path] = " ".join([block[0][3:], *block[1:]]).strip()
        block = []
    return found


def _type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "object"


def document(values_path: Path) -> tuple[list[ValueDoc], list[str]]:
    """The documented rows, and the dotted paths of values nobody documented."""
    text = values_path.read_text()
    values = yaml.safe_load(text)
    comments = comments_by_path(text)
    rows: list[ValueDoc] = []
    missing: list[str] = []

    def walk(node: dict[str, Any], prefix: str) -> None:
        for key, value in node.items():
            path = f"{prefix}{key}"
            if path in comments:
                rows.append(ValueDoc(path, _type(value), value, comments[path]))
            elif isinstance(value, dict) and value:
                walk(value, f"{path}.")
            else:
                missing.append(path)

    walk(values, "")
    return rows, missing


def leaf_paths(values: dict[str, Any], prefix: str = "") -> list[str]:
    """Every dotted path down to scalars, lists and empty mappings."""
    paths: list[str] = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            paths += leaf_paths(value, f"{path}.")
        else:
            paths.append(path)
    return paths


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(rows: list[ValueDoc]) -> str:
    lines = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    for row in rows:
        default = json.dumps(row.default, separators=(",", ":"), ensure_ascii=False)
        lines.append(
            f"| `{row.path}` | {row.type} | `{_cell(default)}` | {_cell(row.description)} |"
        )
    return "\n".join(lines)


def section(document_text: str) -> str:
    """The text between the markers of a markdown document."""
    start = document_text.index(START) + len(START)
    end = document_text.index(END)
    return document_text[start:end].strip("\n")


def with_section(document_text: str, body: str) -> str:
    start = document_text.index(START) + len(START)
    end = document_text.index(END)
    return f"{document_text[:start]}\n{body}\n{document_text[end:]}"
