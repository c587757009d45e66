"""Docs, comments and docstrings say the fact, never a work-tracker reference a reader cannot
look up ("issue N", "session N", "step N" of a plan, N a number), and "seed" means only the nkey
seed or the wave shuffle seed: never the spec ("the chart's page"), never data put straight into a
store or a test double (that is "preload": ``preload_fleet``, ``testkit.preload``).

What broke: ~150 places cited tracker and session numbers, ~50 called the spec a seed, and the
test kit and benchmarks "seeded" stores (``seed_fleet``, ``bench.kube_seed``, ``--no-seed``).
A numbered step is fine where the page it belongs to has that step: a Markdown page's own
numbered list, or one of a page the file names (``docs/<page>.md``)."""

from __future__ import annotations

import io
import os
import re
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = [
    "README.md",
    "prefect.yaml",
    "pyproject.toml",
    ".ci",
    "agent",
    "bench",
    "chart",
    "console",
    "contracts",
    "deploy",
    "docker",
    "docs",
    "flows",
    "rollout_policy",
    "scripts",
    "testkit",
    "tests",
]
SKIP_DIRS = {"__pycache__", ".cache", ".mypy_cache", ".ruff_cache", ".pytest_cache", "node_modules"}
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".html", ".toml", ".txt", ".tpl", ".js", ".sh", ""}
THIS = Path(__file__).resolve()

TRACKER = re.compile(
    r"\b(?:[Ii]ssues?|[Ss]essions?|[Rr]ounds?|[Ii]tems?)\s+\d+|\b(?:High|Medium|Low)\s+\d+\b"
    r"|\b[Ss]teps?-\d+"
)
#: "step N", but not a growth step of a wave policy ("steps 1/10/50", "steps 50 |" in a table).
STEP = re.compile(r"\b[Ss]teps?\s+(\d+)(?![\d/%]| \|)")
PAGE = re.compile(r"\bdocs/([\w-]+\.md)\b")
#: "the seed" bare, as the spec was called; the nkey seed and the wave seed are always named so.
SPEC_SEED = re.compile(r"\bthe seed(?:'s)?\b", re.I)
#: The bare forms that mean the nkey seed or the wave seed, as the code uses them.
KEY_SEED = re.compile(r"\bthe seed (?:signs|is searched)\b|\b(?:never|be|without) the seed\b", re.I)
#: "seed" for data put straight into a store, in prose or in code: neither key nor wave seed is
#: ever "seeded"/"seeding", nor names a helper that fills a store.
DATA_SEED = re.compile(
    r"\bseed(?:ed|ing)|\b_?seed_(?:fleet|agents?|records|failures)\b|\bkube_seed\b|--no-seed\b"
    r"|\bseed it\b",
    re.I,
)


def _files() -> list[Path]:
    found = []
    for root in ROOTS:
        path = REPO / root
        if path.is_file():
            found.append(path)
            continue
        for base, dirs, names in os.walk(path):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
            found += [Path(base, n) for n in names if Path(n).suffix in SUFFIXES]
    return [p for p in found if p.resolve() != THIS]


def _prose(path: Path, text: str) -> list[tuple[int, str]]:
    """The lines a reader reads: all of a page, a Python file's comments and strings."""
    if path.suffix != ".py":
        return list(enumerate(text.splitlines(), 1))
    lines = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.COMMENT, tokenize.STRING):
            lines += [(tok.start[0] + i, s) for i, s in enumerate(tok.string.splitlines())]
    return lines


def _numbered_steps(path: Path, text: str) -> set[str]:
    """The step numbers a reader can find: numbered list items of the page itself (Markdown) or
    of the docs pages the file names."""
    pages = [text] if path.suffix == ".md" else []
    for name in set(PAGE.findall(text)):
        page = REPO / "docs" / name
        if page.is_file():
            pages.append(page.read_text())
    return {m for page in pages for m in re.findall(r"^\s*(\d+)\. ", page, re.M)}


def problems(path: Path, text: str) -> list[str]:
    found = []
    steps: set[str] | None = None
    for number, line in _prose(path, text):
        where = f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}:{number}"
        for m in TRACKER.finditer(line):
            found.append(f"{where}: tracker reference {m.group(0)!r}: state the fact")
        for m in STEP.finditer(line):
            steps = _numbered_steps(path, text) if steps is None else steps
            if m.group(1) not in steps:
                found.append(f"{where}: {m.group(0)!r} is no numbered step of this page")
        allowed = [k.span() for k in KEY_SEED.finditer(line)]
        for m in SPEC_SEED.finditer(line):
            if not any(a <= m.start() and m.end() <= b for a, b in allowed):
                found.append(f'{where}: {m.group(0)!r}: the spec is "the chart\'s page"')
    for number, line in enumerate(text.splitlines(), 1):
        where = f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}:{number}"
        for m in DATA_SEED.finditer(line):
            found.append(f"{where}: {m.group(0)!r}: data put straight into a store is preloaded")
    return found


def test_no_tracker_numbers_and_no_seed_for_the_spec() -> None:
    found = [p for f in _files() for p in problems(f, f.read_text(errors="replace"))]
    assert not found, "\n".join(found)


def test_the_check_finds_what_it_is_for(tmp_path: Path) -> None:
    """The check above would pass on an empty file list: here each kind is caught, and the
    legitimate uses are not."""
    n, seed = 11, "seed"  # built here, so that a grep of the repository finds no example
    bad = tmp_path / "bad.py"
    bad.write_text(
        f'"""Rollouts (issue {n}, High {n}) met the step-{n} goal."""\n'
        f"# The {seed}'s Common Issues row.\n"
        f"X = 1  # session {n} measured it, before step {n}\n"
        f"fleet = {seed}_fleet(kube)  # {seed}ed in a second (bench.kube_{seed}, --no-{seed})\n"
    )
    kinds = "\n".join(problems(bad, bad.read_text()))
    for phrase in (
        f"issue {n}",
        f"High {n}",
        f"step-{n}",
        f"The {seed}'s",
        f"session {n}",
        f"step {n}'",
        f"{seed}_fleet",
        f"{seed}ed",
        f"kube_{seed}",
        f"--no-{seed}",
    ):
        assert phrase in kinds, (phrase, kinds)
    good = tmp_path / "good.md"
    good.write_text(
        "1. Plan.\n2. Apply.\n\nStep 2 applies it; steps 1 to 2 are the flow.\n"
        "The seed signs the nonce; the agent's nkey seed is never logged, never the seed.\n"
        "Waves are deterministic per seed (`random.Random(seed)`). Common Issues, issued 3 times.\n"
        "`RolloutCreate(seed=...)`, `pending_seed`, `nkeys.from_seed(seed)`, `--hypothesis-seed`;\n"
        "data goes in with `preload_fleet(kube)` (`python -m bench.kube_preload --no-preload`).\n"
    )
    assert problems(good, good.read_text()) == []
