"""Each word of the shared vocabulary, and each shape, has one home, and every caller uses it:
the rollout events and terminal states (``rollout_policy``), the API scopes
(``contracts.vocabulary.Scope``), the ``k=v`` label syntax (``contracts.bounds.parse_labels``),
the agent-list filter (``contracts.views.AgentFilter``), the token columns
(``console.models``' token bases) and the check of an agent's signed request
(``console.services.enrollment.check_signed``).

The source is read: these scans fail when a second definition or a caller spelling the words
itself appears. Each scan is shown to find a planted copy, so none passes by seeing nothing.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from contracts.vocabulary import RolloutState, Scope
from rollout_policy import TERMINAL_STATES, EventKind
from testkit import REPO

CONSOLE = REPO / "console"
FLOWS = REPO / "flows"
TEMPLATES = CONSOLE / "templates"


def _python(*roots: Path) -> dict[Path, ast.Module]:
    found = {
        path: ast.parse(path.read_text(), str(path))
        for root in roots
        for path in sorted(root.rglob("*.py"))
        if "migrations" not in path.parts
    }
    assert found, f"no sources under {roots}: the packages moved, update this test"
    return found


def _where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(REPO)}:{getattr(node, 'lineno', '?')}"


def _strings(node: ast.AST) -> set[str]:
    return {
        n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


# -- rollout events and terminal states: rollout_policy.events and rollout_policy.states ---------

_EVENTS = {e.value for e in EventKind} - {"fail"}  # "fail" is also a check's result elsewhere
_TERMINAL = {s.value for s in TERMINAL_STATES} - {"failed"}  # a target's and a count's too


def _spelled_rollout_words(path: Path, tree: ast.Module) -> list[str]:
    """A comparison with an event's or a terminal state's text (``action == "abort"``,
    ``state in ("succeeded", "aborted")``), or a rollout move asked for by its text
    (``transition(…, "resume")``, ``decide(id, "abort")``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            if _strings(node) & (_EVENTS | _TERMINAL):
                found.append(_where(path, node))
        elif isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in (
            "transition",
            "decide",
            "_decide",
        ):
            if any(isinstance(a, ast.Constant) and a.value in _EVENTS for a in node.args) or any(
                isinstance(k.value, ast.Constant) and k.value.value in _EVENTS
                for k in node.keywords
            ):
                found.append(_where(path, node))
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            # a tuple of the words: ``FINAL_STATES = ("succeeded", "aborted", "failed")``
            value = node.value
            if (
                isinstance(value, ast.Tuple | ast.Set | ast.List)
                and len(_strings(value) & (_EVENTS | _TERMINAL | {"failed", "fail"})) >= 2
            ):
                found.append(_where(path, node))
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "Literal":
            if _strings(node) & _EVENTS:
                found.append(_where(path, node))
    return found


def test_the_console_and_the_flows_spell_no_rollout_event_or_terminal_state():
    offenders = [
        spot
        for path, tree in _python(CONSOLE, FLOWS).items()
        for spot in _spelled_rollout_words(path, tree)
    ]
    assert offenders == []


def test_the_rollout_words_scan_finds_a_copy():
    planted = ast.parse(
        'if action == "abort": ...\n'
        'final = state in ("succeeded", "aborted")\n'
        'FINAL_STATES = ("succeeded", "aborted", "failed")\n'
        'transition(rt, p, rid, "resume")\n'
        'console.decide(r.id, "complete")\n'
        'RolloutAction = Literal["pause", "resume"]\n'
    )
    assert len(_spelled_rollout_words(REPO / "planted.py", planted)) == 6
    fine = ast.parse(
        "if action == EventKind.ABORT: ...\n"
        "final = state in TERMINAL_STATES\n"
        "console.decide(r.id, EventKind.RESUME)\n"
    )
    assert _spelled_rollout_words(REPO / "fine.py", fine) == []


_STATE_WORDS = "|".join(sorted({s.value for s in RolloutState} | {e.value for e in EventKind}))
_TEMPLATE_SPELLING = re.compile(
    rf"state(\.value)?\s*(==|!=|in)\s*\(?\s*'({_STATE_WORDS})'"  # state.value == 'stalled'
    rf"|/rollouts/\{{\{{ rollout\.id \}}\}}/({_STATE_WORDS})\""  # action=".../resume"
)


def _template_spellings(text: str) -> list[str]:
    return [m.group(0) for m in _TEMPLATE_SPELLING.finditer(text)]


def test_the_rollout_page_takes_states_and_moves_from_the_view():
    """The page decides with the state machine's answers (``final``, ``halted``, ``moves``) and
    the enums the view gives it (``State``, ``Event``), never with a state's or a move's text."""
    offenders = {
        str(path.relative_to(REPO)): found
        for path in sorted(TEMPLATES.rglob("*.html"))
        if (found := _template_spellings(path.read_text()))
    }
    assert offenders == {}
    planted = (
        "{% if rollout.state.value in ('stalled', 'paused') %}"
        '<form action="/rollouts/{{ rollout.id }}/resume">'
    )
    assert len(_template_spellings(planted)) == 2


# -- API scopes: contracts.vocabulary.Scope -------------------------------------------------------

_SCOPE_TEXT = {s.value for s in Scope}


def _scope_spellings(path: Path, tree: ast.Module) -> list[str]:
    """A scope's text (``"tokens:write"``), or a second enum or list of the scopes."""
    found = [
        _where(path, node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in _SCOPE_TEXT
    ]
    found += [
        _where(path, node)
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.name == "Scope"
    ]
    return found


def test_scopes_are_spelled_once_in_the_vocabulary():
    offenders = [
        spot
        for path, tree in _python(REPO / "console", REPO / "flows", REPO / "contracts").items()
        if path != REPO / "contracts" / "vocabulary" / "scopes.py"
        for spot in _scope_spellings(path, tree)
    ]
    assert offenders == []
    pages = {
        str(path.relative_to(REPO))
        for path in sorted(TEMPLATES.rglob("*.html"))
        if any(f"'{s}'" in path.read_text() or f'"{s}"' in path.read_text() for s in _SCOPE_TEXT)
    }
    assert pages == set(), "pages ask viewer.can(Scope.…)"
    planted = ast.parse('WORKER = ("agents:read",)\nclass Scope(StrEnum): ...\n')
    assert len(_scope_spellings(REPO / "planted.py", planted)) == 2


# -- the check of an agent's signed request: console.services.enrollment.check_signed --------------


def test_one_check_judges_an_agents_signed_request():
    """Freshness and possession were checked twice in the enrollment service, answering 400 in
    one place and 401 in the other; ``check_signed`` is the one check, and the only function of
    the Console that names the clock-skew refusal."""
    trees = _python(CONSOLE).values()
    stale = [
        node
        for tree in trees
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        and any("STALE_SIGNATURE" in ast.unparse(n) for n in ast.walk(node))
    ]
    assert [f.name for f in stale] == ["check_signed"]
    verifying = {
        f.name
        for tree in trees
        for f in ast.walk(tree)
        if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
        for n in ast.walk(f)
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "verify"
    }
    assert "check_signed" in verifying
    skew_checks = [
        _where(path, node)
        for path, tree in _python(CONSOLE).items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and "skew" in ast.unparse(node)
        and "signed_at" in ast.unparse(node)
    ]
    assert len(skew_checks) == 1, f"one freshness comparison (check_signed's): {skew_checks}"


# -- the k=v label syntax: contracts.bounds.parse_labels -------------------------------------------


def _label_parsers(path: Path, tree: ast.Module) -> list[str]:
    """Text cut at ``=`` (``item.partition("=")``, ``label.split("=", 1)``): a label reader."""
    return [
        _where(path, node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("partition", "split", "rpartition", "rsplit")
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == "="
    ]


def test_one_reader_of_the_label_syntax():
    offenders = [
        spot
        for path, tree in _python(CONSOLE, FLOWS, REPO / "agent", REPO / "contracts").items()
        if path != REPO / "contracts" / "bounds.py"
        for spot in _label_parsers(path, tree)
    ]
    assert offenders == []
    planted = ast.parse(
        'k, _, v = item.partition("=")\npairs = dict(x.split("=", 1) for x in xs)\n'
    )
    assert len(_label_parsers(REPO / "planted.py", planted)) == 2


# -- the agent-list filter: contracts.views.AgentFilter --------------------------------------------

_FILTER_FIELDS = {"agent_type", "status", "version", "name", "flag", "label"}


def _filter_declarations(path: Path, tree: ast.Module) -> list[str]:
    """A function taking three or more of the filter's fields one by one, or a second class of
    that name: the filter declared again. A command line's options are its own surface (typer
    declares each): commands are left out."""
    found = []
    for node in ast.walk(tree):
        command = isinstance(node, ast.FunctionDef) and any(
            "command" in ast.unparse(d) for d in node.decorator_list
        )
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not command:
            args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            if len({a.arg for a in args} & _FILTER_FIELDS) >= 3:
                found.append(_where(path, node))
        elif isinstance(node, ast.ClassDef) and node.name == "AgentFilter":
            found.append(_where(path, node))
    return found


def test_the_agent_list_filter_is_declared_once():
    """The route, the service, its query helper, the flows' client and the web page each
    declared the filter's parameters; all now take ``AgentFilter``."""
    offenders = [
        spot
        for path, tree in _python(CONSOLE, FLOWS).items()
        for spot in _filter_declarations(path, tree)
    ]
    assert offenders == []
    planted = ast.parse(
        "def agents(self, *, agent_type=None, status=None, name=None, flag=None): ...\n"
        "class AgentFilter(BaseModel): ...\n"
    )
    assert len(_filter_declarations(REPO / "planted.py", planted)) == 2


# -- the token columns: console.models.TokenBase and console.schemas.TokenPublic -------------------

_TOKEN_COLUMNS = {"token_hash", "prefix", "last_used_at", "parent_id"}


def _token_column_homes(tree: ast.Module) -> dict[str, list[str]]:
    homes: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    if item.target.id in _TOKEN_COLUMNS:
                        homes.setdefault(item.target.id, []).append(node.name)
    return homes


def test_the_token_columns_are_spelled_once_per_family():
    """The install-token and API-token tables, and their answers, copied the token columns
    field by field; each family now has one base (``TokenBase``, ``TokenPublic``)."""
    for module, base in (("models.py", "TokenBase"), ("schemas.py", "TokenPublic")):
        homes = _token_column_homes(_python(CONSOLE)[CONSOLE / module])
        assert homes and all(classes == [base] for classes in homes.values()), (module, homes)
    planted = ast.parse(
        "class A(SQLModel):\n    prefix: str\nclass B(SQLModel):\n    prefix: str\n"
    )
    assert _token_column_homes(planted) == {"prefix": ["A", "B"]}
