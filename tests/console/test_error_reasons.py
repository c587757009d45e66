"""Every error the Console raises carries an ``ErrorReason`` member: no reason is a free string
(``tests/contracts/test_vocabulary.py`` checks the values; this checks the spelling)."""

import ast
from pathlib import Path

import pytest

from console.errors import ConflictError, ConsoleError
from console.web.errors import PageError
from contracts.vocabulary import ErrorReason

CONSOLE = Path(__file__).resolve().parents[2] / "console"
ERRORS = {
    "BadRequestError",
    "UnauthorizedError",
    "ForbiddenError",
    "NotFoundError",
    "ConflictError",
    "PayloadTooLargeError",
    "GatewayTimeoutError",
    "ConsoleError",
    "EnrollmentConflictError",
}
# Where the reason sits among the positional arguments.
REASON_AT = {**dict.fromkeys(ERRORS, 0), "PageError": 1, "SignInRequired": 1, "error_page": 2}


def _is_text(node: ast.AST | None) -> bool:
    return isinstance(node, ast.JoinedStr) or (
        isinstance(node, ast.Constant) and isinstance(node.value, str)
    )


def _free_reasons() -> list[str]:
    found = []
    for path in sorted(CONSOLE.rglob("*.py")):
        where = path.relative_to(CONSOLE)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                at = REASON_AT.get(name or "")
                if at is not None and len(node.args) > at and _is_text(node.args[at]):
                    found.append(f"{where}:{node.lineno} {name}")
                found += [
                    f"{where}:{node.lineno} {name}(reason=…)"
                    for kw in node.keywords
                    if kw.arg == "reason" and name in REASON_AT and _is_text(kw.value)
                ]
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "reason":
                        leaves = [v for v in ast.walk(value) if _is_text(v)]
                        found += [f"{where}:{node.lineno} {{'reason': …}}" for _ in leaves[:1]]
    return found


def test_no_console_error_carries_a_free_string_reason() -> None:
    assert _free_reasons() == []


def test_the_scan_sees_a_free_string() -> None:
    sample = 'raise ConflictError("name_in_use", "x")\nbody = {"reason": "oops"}\n'
    tree = ast.parse(sample)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert _is_text(calls[0].args[0])
    dicts = [n for n in ast.walk(tree) if isinstance(n, ast.Dict)]
    assert _is_text(dicts[0].values[0])


def test_errors_keep_the_member_and_refuse_an_unknown_reason() -> None:
    err = ConflictError(ErrorReason.NAME_IN_USE, "held")
    assert err.reason is ErrorReason.NAME_IN_USE and err.status == 409
    assert PageError(415, ErrorReason.UNSUPPORTED_FORM, "x").reason is ErrorReason.UNSUPPORTED_FORM
    with pytest.raises(ValueError):
        ConsoleError("not_a_reason", "x")  # type: ignore[arg-type]
