"""The onboarding gates of one cluster, in-process: enrollment, first heartbeat, first
inventory — what the wizard and ``GET /api/v1/clusters/{slug}/onboarding`` both serve."""

from console.schemas import ClusterCreate, OnboardingStatus
from console.services import clusters, tokens
from console.services.onboarding import cluster_onboarding
from contracts.inventory import InventorySnapshot
from contracts.vocabulary import AgentType
from testkit.services import AgentKey, InProcessConsole

BACKEND = "https://console.invalid"


async def register(services: InProcessConsole, name: str = "Prod EU") -> tuple[str, str]:
    """A registered cluster and one install token for it: (slug, token)."""
    cluster = await clusters.register_cluster(
        services.rt, services.principal, ClusterCreate(name=name)
    )
    token = await tokens.create_cluster_install_token(services.rt, services.principal, cluster.slug)
    return cluster.slug, token.token


async def gates(services: InProcessConsole, slug: str) -> OnboardingStatus:
    return await cluster_onboarding(services.rt, services.principal, slug, backend_url=BACKEND)


def passed(status: OnboardingStatus) -> dict[str, bool]:
    return {c.key: c.ok for c in status.checks}


async def test_a_new_cluster_has_every_gate_pending(services: InProcessConsole):
    slug, _ = await register(services)
    status = await gates(services, slug)
    assert passed(status) == {"enrollment": False, "heartbeat": False, "inventory": False}
    assert not status.done and status.tokens_usable == 1
    enrollment = status.checks[0]
    assert enrollment.causes, "a pending gate says what to check"


async def test_the_gates_pass_in_order_enrollment_heartbeat_inventory(services: InProcessConsole):
    slug, token = await register(services)
    collector = AgentKey("prod-eu-collector", agent_type=AgentType.K8S_CLUSTER_COLLECTOR)
    answer, _ = await services.enroll(collector, token)
    status = await gates(services, slug)
    assert passed(status) == {"enrollment": True, "heartbeat": False, "inventory": False}, (
        "enrolling is a sign of life (the agent is online) but not a heartbeat"
    )
    services.clock.advance(5)
    await services.heartbeat(
        answer.agent_id,
        agent_type=AgentType.K8S_CLUSTER_COLLECTOR,
        leader=True,
        cluster_slug=slug,
        sync_interval_seconds=300.0,
    )
    assert passed(await gates(services, slug)) == {
        "enrollment": True,
        "heartbeat": True,
        "inventory": False,
    }
    snapshot = InventorySnapshot(
        cluster_slug=slug,
        cluster_name="Prod EU",
        collected_at=services.clock.now,
        sync_interval_seconds=300.0,
        counts={"nodes": 3},
    )
    await services.run(
        lambda uow: clusters.record_inventory(
            uow.session, agent_id=answer.agent_id, snapshot=snapshot
        ),
        write=True,
    )
    done = await gates(services, slug)
    assert done.done and all(passed(done).values())
    assert done.nodes == 3


async def test_node_agents_alone_do_not_pass_the_enrollment_gate(services: InProcessConsole):
    slug, token = await register(services)
    await services.enroll(AgentKey("node-1", agent_type=AgentType.K8S_NODE_MONITOR), token)
    status = await gates(services, slug)
    assert not passed(status)["enrollment"] and status.node_agents == 1
    issues = [c.issue for c in status.checks[0].causes]
    assert "Node agents enrolled, the cluster agent did not" in issues


async def test_a_spent_install_token_is_named_as_the_cause(services: InProcessConsole):
    slug, _ = await register(services)
    listed = await tokens.list_install_tokens(services.rt, services.principal)
    (mine,) = [t for t in listed if t.cluster_slug == slug]
    await tokens.revoke_install_token(services.rt, services.principal, mine.id)
    status = await gates(services, slug)
    assert status.tokens_usable == 0
    assert "Install token not usable" in [c.issue for c in status.checks[0].causes]
