"""Each rule has one implementation, and every caller uses it: the re-bind and release rules
(the enrollment's dry run included), "online", the onboarding gates, the default rollout policy,
the quiet window.

Behavioural where behaviour can show it: the rule is replaced by a sentinel wherever it is bound
(``testkit.services.replace_everywhere``) and the Console's services are seen to obey the
sentinel — a second implementation would ignore it. The flows run in Prefect against a Console
over HTTP, so for them (and for what no behaviour shows) the source is read: these scans fail
when a copy appears.

An ``xfail(strict=True)`` here is a rewiring not merged yet; its reason names it. Once merged the
test passes, strict xfail turns that into a failure, and the mark is removed.
"""

from __future__ import annotations

import ast
import functools
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

import rollout_policy
from console.core.settings import ConsoleSettings
from console.errors import ConflictError
from console.services import fleet, published_settings
from console.services.identities import preview_enrollment, release, rotate_credentials
from console.services.onboarding import cluster_onboarding
from console.services.rollouts import planning
from contracts.rollouts import ArtifactRef, RolloutCreate
from contracts.views import AgentFilter, OnboardingStatus
from contracts.vocabulary import AgentStatus, ErrorReason
from contracts.vocabulary.identities import ReleaseOutcome
from rollout_policy import (
    DEFAULT_CRITERION,
    DEFAULT_QUIET_WINDOW_SECONDS,
    DEFAULT_ROLLOUT_POLICY,
    EnrollmentAction,
    EnrollmentDecision,
    PercentGrowth,
    ReleaseDecision,
)
from testkit import REPO
from testkit.services import AgentKey, InProcessConsole, in_process_console, replace_everywhere

CONSOLE = REPO / "console"
FLOWS = REPO / "flows"


@functools.cache
def sources(*roots: Path) -> dict[Path, ast.Module]:
    """Every module under ``roots`` (migrations aside), parsed once per run."""
    found = {
        path: ast.parse(path.read_text(), str(path))
        for root in roots
        for path in sorted(root.rglob("*.py"))
        if "migrations" not in path.parts
    }
    assert found, f"no sources under {roots}: the packages moved, update this test"
    return found


def where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(REPO)}:{getattr(node, 'lineno', '?')}"


async def enrolled(services: InProcessConsole, key: AgentKey | None = None) -> str:
    token = await services.install_token()
    answer, _ = await services.enroll(key or AgentKey("web-1", machine_id="m" * 32), token)
    return answer.agent_id


# -- the re-bind rule: rollout_policy.identities.decide_enrollment --------------------------------


@pytest.mark.parametrize("dry_run", [False, True])
async def test_enrollment_and_its_dry_run_decide_with_decide_enrollment_and_the_quiet_window(
    services: InProcessConsole, monkeypatch: pytest.MonkeyPatch, dry_run: bool
):
    key = AgentKey("web-1", machine_id="m" * 32)
    token = await services.install_token()
    await services.enroll(key, token)
    services.clock.advance(services.settings.identity_quiet_seconds + 1)  # would re-bind
    windows: list[float] = []

    def sentinel(record, claim, *, quiet_window_seconds):
        windows.append(quiet_window_seconds)
        return EnrollmentDecision(
            EnrollmentAction.REFUSE,
            agent_id=record.agent_id if record else None,
            refusal=ErrorReason.AGENT_REVOKED,  # never true here: only the sentinel says it
        )

    replace_everywhere(monkeypatch.setattr, rollout_policy.decide_enrollment, sentinel)
    with pytest.raises(ConflictError) as refused:
        if dry_run:
            request = key.new_key().request(token, services.clock.now)
            await preview_enrollment(services.rt, request)
        else:
            await services.enroll(key.new_key(), token)
    assert refused.value.reason == ErrorReason.AGENT_REVOKED
    assert windows == [services.settings.identity_quiet_seconds]


def test_the_migration_plan_refuses_re_binds_with_the_identity_rules(
    monkeypatch: pytest.MonkeyPatch,
):
    """``rollout_policy.hostdatadir`` plans with ``rebind_refusals`` and ``is_quiet``, not a copy;
    the hostDataDir flow plans with ``plan_hostdatadir_migration`` (read below)."""
    seen: list[str] = []
    real_refusals, real_quiet = rollout_policy.rebind_refusals, rollout_policy.is_quiet

    def refusals(**facts):
        seen.append("rebind_refusals")
        return real_refusals(**facts)

    def quiet(seconds, window):
        seen.append("is_quiet")
        return real_quiet(seconds, window)

    assert replace_everywhere(monkeypatch.setattr, rollout_policy.rebind_refusals, refusals)
    assert replace_everywhere(monkeypatch.setattr, rollout_policy.is_quiet, quiet)
    hd = rollout_policy
    node = hd.MigrationNode(
        name=hd.NodeName("node-1"),
        records=(
            hd.AgentRecord(
                agent_id=hd.AgentId("a1"),
                agent_type=hd.NODE_MONITOR_TYPE,
                last_seen_age_seconds=10.0,
                has_identity_evidence=True,
            ),
        ),
        host_agent_running=True,
        host_identity_readable=True,
    )
    hd.plan_hostdatadir_migration([node], quiet_window_seconds=DEFAULT_QUIET_WINDOW_SECONDS)
    assert {"rebind_refusals", "is_quiet"} <= set(seen)
    flow = (FLOWS / "migration.py").read_text()
    assert "plan_hostdatadir_migration(" in flow


# -- the release rule: rollout_policy.identities.decide_release -----------------------------------


@pytest.mark.parametrize("dry_run", [False, True])
async def test_release_and_its_dry_run_decide_with_decide_release(
    services: InProcessConsole, monkeypatch: pytest.MonkeyPatch, dry_run: bool
):
    agent_id = await enrolled(services)
    services.clock.advance(services.settings.identity_quiet_seconds + 1)  # would release

    def sentinel(record, *, quiet_window_seconds):
        assert quiet_window_seconds == services.settings.identity_quiet_seconds
        return ReleaseDecision(
            record.agent_id, ReleaseOutcome.REFUSED, ErrorReason.IDENTITY_MISMATCH
        )

    replace_everywhere(monkeypatch.setattr, rollout_policy.decide_release, sentinel)
    with pytest.raises(ConflictError) as refused:
        await release(services.rt, services.principal, agent_id, dry_run=dry_run)
    assert refused.value.reason == ErrorReason.IDENTITY_MISMATCH
    assert services.effects.effects == []


def _compares_age_with_a_window(node: ast.Compare) -> bool:
    names = {
        n.id if isinstance(n, ast.Name) else n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Name | ast.Attribute)
    }
    text = ast.unparse(node)
    ages = "seconds_since_seen" in text or "since" in names or "quiet_for" in names
    return ages and any("quiet" in n or "window" in n for n in names)


def test_the_flows_ask_the_console_to_release_and_never_judge_quiet_themselves():
    offenders = [
        where(path, node)
        for path, tree in sources(FLOWS).items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare) and _compares_age_with_a_window(node)
    ]
    assert offenders == []
    calls = [
        node
        for node in ast.walk(ast.parse((FLOWS / "identity_release.py").read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "release_identity"
    ]
    assert calls, "identity-release calls the Console's release-identity"
    assert all(any(k.arg == "dry_run" for k in call.keywords) for call in calls), (
        "and passes its dry run to the Console, which decides"
    )


# -- "online": rollout_policy.identities.is_online ------------------------------------------------


async def test_status_planning_and_rotation_use_is_online(
    services: InProcessConsole, monkeypatch: pytest.MonkeyPatch
):
    agent_id = await enrolled(services)  # online by every clock
    replace_everywhere(monkeypatch.setattr, rollout_policy.is_online, lambda *a, **k: False)
    shown = await fleet.get_agent(services.rt, services.principal, agent_id)
    assert shown.status == AgentStatus.OFFLINE
    # the fleet list filters in SQL by the same rule's instant: rollout_policy's online_cutoff
    replace_everywhere(
        monkeypatch.setattr,
        rollout_policy.online_cutoff,
        lambda now, **k: now + timedelta(days=1),
    )
    listed = await fleet.list_agents(
        services.rt, services.principal, AgentFilter(status=AgentStatus.OFFLINE)
    )
    assert [a.id for a in listed.items] == [agent_id]
    rollout = await planning.create(
        services.rt,
        services.principal,
        RolloutCreate(artifact=ARTIFACT, start_flow=False),
    )
    assert [e.reason for e in rollout.exclusions] == ["offline"]
    with pytest.raises(ConflictError) as refused:
        await rotate_credentials(services.rt, services.principal, agent_id)
    assert refused.value.reason == "agent_offline"


def test_no_second_online_rule_compares_an_age_with_the_stale_timeout():
    offenders = [
        where(path, node)
        for path, tree in sources(CONSOLE, FLOWS).items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and any(age in ast.unparse(node) for age in ("last_seen", "last_heartbeat", "since_seen"))
        and "stale" in ast.unparse(node)
        and path.name != "agent_records.py"  # the one Console definition until the rewiring
    ]
    assert offenders == []


# -- the onboarding gates: console.services.onboarding ---------------------------------------------


async def test_the_onboarding_service_is_what_both_adapters_serve(
    services: InProcessConsole, monkeypatch: pytest.MonkeyPatch
):
    from console.schemas import ClusterCreate
    from console.services import clusters, onboarding

    await clusters.register_cluster(services.rt, services.principal, ClusterCreate(name="eu"))
    marker = OnboardingStatus(  # no real "eu" answers this: only the replaced rule does
        slug="sentinel", checks=[], done=True, node_agents=42, nodes=None, tokens_usable=7
    )
    monkeypatch.setattr(onboarding, "onboarding_status", lambda *a, **k: marker)
    served = await cluster_onboarding(services.rt, services.principal, "eu", backend_url="x")
    assert served.model_dump(exclude={"warnings"}) == marker.model_dump()
    callers = {
        str(path.relative_to(CONSOLE))
        for path, tree in sources(CONSOLE).items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("cluster_onboarding")
    }
    assert {"api/routes/clusters.py", "web/routes/clusters.py"} <= callers
    computing = {
        str(path.relative_to(CONSOLE))
        for path, tree in sources(CONSOLE).items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("onboarding_status")
    }
    assert computing == {"services/onboarding.py"}


def test_enrollment_check_reads_the_gates_from_the_console():
    client = (FLOWS / "console_client.py").read_text()
    assert "/onboarding" in client, "the Console client reads the onboarding endpoint"
    check = ast.parse((FLOWS / "enrollment_check.py").read_text())
    looked_up = {
        node.value
        for node in ast.walk(check)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    assert not {"leader", "sync_interval_seconds", "first_inventory_at"} & looked_up, (
        "the flow reads facts of the records to decide a gate"
    )


# -- the default rollout policy: rollout_policy.defaults ------------------------------------------

ARTIFACT = ArtifactRef(
    version="0.9.0", url="http://artifacts.invalid/a.pyz", sha256="0" * 64, signature="s" * 43
)


def test_the_api_defaults_are_the_default_policy():
    body = RolloutCreate(artifact=ARTIFACT)
    policy = DEFAULT_ROLLOUT_POLICY
    (criterion,) = body.criteria
    assert body.waves.canary_size == policy.waves.canary_size
    assert PercentGrowth(tuple(body.waves.percentages or ())) == policy.waves.growth
    assert (
        criterion.failure_type,
        criterion.threshold_percent,
        criterion.min_executed,
        criterion.action,
    ) == (
        DEFAULT_CRITERION.failure_type,
        DEFAULT_CRITERION.threshold_percent,
        DEFAULT_CRITERION.min_executed,
        DEFAULT_CRITERION.action,
    )
    assert body.wave_timeout_seconds == policy.wave_timeout_seconds


def _web_form_body(**cleared: str) -> RolloutCreate:
    from console.web import rollout_form as form

    values = form.defaults(SimpleNamespace(settings=ConsoleSettings()))
    values.update(source="reference", **ARTIFACT.model_dump())
    for name, value in cleared.items():
        if name == "min_executed":
            values["criteria"][0]["min_executed"] = value
        else:
            values[name] = value
    body, errors = form.parse(values, [])
    assert body is not None and errors == {}
    return body


def test_the_untouched_web_form_asks_for_the_default_policy():
    api = RolloutCreate(artifact=ARTIFACT)
    web = _web_form_body()
    assert web.waves == api.waves
    assert web.criteria == api.criteria
    assert web.wave_timeout_seconds == api.wave_timeout_seconds


def test_a_cleared_web_form_field_falls_back_to_the_default_policy_not_a_copy():
    api = RolloutCreate(artifact=ARTIFACT)
    web = _web_form_body(min_executed="")
    assert web.criteria == api.criteria
    for module in ("routes/rollouts.py", "rollout_form.py"):
        text = (CONSOLE / "web" / module).read_text()
        assert "1, 10, 50, 100" not in text, "the percentages are rendered from the defaults"


# -- the quiet window: DEFAULT_QUIET_WINDOW_SECONDS and PROXIMA_IDENTITY_QUIET_SECONDS -------------


def test_the_console_setting_defaults_to_the_one_constant():
    field = ConsoleSettings.model_fields["identity_quiet_seconds"]
    assert field.default == DEFAULT_QUIET_WINDOW_SECONDS


async def test_the_services_and_the_published_settings_follow_the_console_setting(
    console_schema: Path, monkeypatch: pytest.MonkeyPatch
):
    with in_process_console(
        console_schema, monkeypatch.setattr, identity_quiet_seconds=7.0
    ) as services:
        published = published_settings.published_settings(services.rt, services.principal)
        assert published.quiet_window_seconds == 7.0
        agent_id = await enrolled(services)
        services.clock.advance(7)
        with pytest.raises(ConflictError):
            await release(services.rt, services.principal, agent_id, dry_run=True)
        services.clock.advance(0.5)
        shown = await release(services.rt, services.principal, agent_id, dry_run=True)
        assert shown.status == AgentStatus.RELEASED


def _names_the_window(name: str) -> bool:
    """A quiet-named parameter, field or keyword holds the window, unless it names an age: how
    long a record has been quiet (``quiet_for``, ``quiet_since``) is a fact formatted into a
    message, not the rule's number."""
    name = name.lower()
    return "quiet" in name and not name.endswith(("_for", "_since"))


def _quiet_literals(path: Path, tree: ast.Module) -> list[str]:
    """A number written for the quiet window: a quiet-named parameter's, field's or keyword's
    numeric default (``quiet_seconds: float = 300``, ``Field(default=300.0)``, ``quiet=300``),
    fallbacks included (``quiet = configured or 300``)."""
    found = []

    def numeric(node: ast.AST | None) -> bool:
        return any(
            isinstance(n, ast.Constant) and type(n.value) in (int, float)
            for n in ast.walk(node or ast.Constant(None))
        )

    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args.posonlyargs + node.args.args
            positional = args[len(args) - len(node.args.defaults) :]
            pairs = list(zip(positional, node.args.defaults, strict=True))
            pairs += [
                (a, d)
                for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True)
                if d is not None
            ]
            found += [where(path, d) for a, d in pairs if _names_the_window(a.arg) and numeric(d)]
        elif isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(_names_the_window(ast.unparse(t)) for t in targets) and numeric(node.value):
                found.append(where(path, node))
        elif isinstance(node, ast.keyword) and node.arg and _names_the_window(node.arg):
            if numeric(node.value):
                found.append(where(path, node.value))
    return found


def test_no_literal_quiet_window_in_the_console_or_the_flows():
    offenders = [
        spot
        for path, tree in sources(CONSOLE, FLOWS).items()
        for spot in _quiet_literals(path, tree)
    ]
    assert offenders == []


def test_the_quiet_window_scan_finds_a_copy():
    """The scan above is not vacuous: it sees each way of writing the number down."""
    planted = ast.parse(
        "def f(quiet_seconds: float = 300): ...\n"
        "QUIET = 300\n"
        "class S:\n    identity_quiet_seconds: float = Field(default=300.0)\n"
        "g(quiet_window_seconds=300)\n"
        "quiet_seconds = settings.identity_quiet_seconds or 300\n"
    )
    assert len(_quiet_literals(REPO / "planted.py", planted)) == 5
    fine = ast.parse(
        "def f(quiet_seconds: float = DEFAULT): ...\n"
        "quiet_for = held.seconds_since_seen or 0.0  # an age for a message\n"
    )
    assert _quiet_literals(REPO / "fine.py", fine) == []


def test_each_error_of_the_web_rollout_form_lands_on_the_field_it_was_typed_in():
    """What broke: the form listed the API model's errors at the top, one line per location
    (`criteria.0.threshold_count: …`), far from the inputs. Each is now drawn beside its field;
    a criterion's error finds its form row even when an empty row before it was left out."""
    from console.web import rollout_form as form

    values = form.defaults(SimpleNamespace(settings=ConsoleSettings()))
    values.update(source="reference", **ARTIFACT.model_dump())
    values.update(sha256="beef", labels="tier", percentages="50, 150", wave_timeout_seconds="0")
    values["criteria"][0].update(threshold_percent="", threshold_count="")  # row 0 left empty
    values["criteria"][1].update(threshold_count="0")
    body, errors = form.parse(values, [])
    assert body is None
    assert set(errors) == {
        "sha256",
        "labels",
        "percentages",
        "wave_timeout_seconds",
        "c1_threshold_count",
    }
    assert errors["labels"] == ["'tier' is not key=value."]
    assert all(field in form.FIELD_IDS for field in errors)

    hosted = form.defaults(SimpleNamespace(settings=ConsoleSettings()))
    body, errors = form.parse(hosted, [])
    assert body is None and errors == {
        "hosted": ["Pick a hosted build, or enter a reference below."]
    }
