"""The enrollment's dry run (``POST /api/v1/agents/enroll?dry_run=true``): what the same request
would do, decided by the same checks and the same rules (``enrollment.decide``), and nothing
changed — no record, no evidence, no token use, no key retired, no clash recorded on the record
holding the name. A refusal is the real call's error (the same status and ``reason``).

The rate limits count a dry run like an enrollment (it proves an install token and a signature),
in a unit of their own.
"""

from __future__ import annotations

from collections.abc import Callable

from console.core.clock import utcnow
from console.errors import ConsoleError
from console.services.identities.enrollment import Decided, decide
from console.services.identities.enrollment_refusals import refusal
from console.services.identities.rebinding import kinds
from console.services.unit_of_work import ServiceRuntime, UnitOfWork
from contracts.enrollment import EnrollmentPreview, EnrollRequest
from contracts.vocabulary import EnrollmentAction, RebindHow

__all__ = ["preview_enrollment"]


async def preview_enrollment(
    rt: ServiceRuntime, req: EnrollRequest, *, guard: Callable[[UnitOfWork], None] | None = None
) -> EnrollmentPreview:
    """What enrolling ``req`` would do now; raises what it would be refused."""
    settings = rt.settings
    if guard is not None:
        await rt.units.run(guard, write=True, commit_on=(ConsoleError,))

    def work(uow: UnitOfWork) -> EnrollmentPreview:
        decided = decide(
            uow.session,
            req=req,
            quiet_seconds=settings.identity_quiet_seconds,
            skew_seconds=settings.enroll_clock_skew_seconds,
            now=utcnow(),
            lock=False,
        )
        decision, existing, held = decided.decision, decided.existing, decided.held
        if decision.action is EnrollmentAction.REFUSE:
            assert existing is not None and held is not None and decision.refusal is not None
            raise refusal(
                decision.refusal, existing, held, settings.identity_quiet_seconds, decided.claim
            )
        return _preview(req, decided)

    return await rt.units.run(work)


def _preview(req: EnrollRequest, decided: Decided) -> EnrollmentPreview:
    decision, held = decided.decision, decided.held
    held_kinds = kinds(held.evidence) if held is not None else []
    presented = kinds(decided.claim.signals)
    label = f"{req.agent_type.value} {req.name!r}"
    agent_id = decision.agent_id
    if decision.action is EnrollmentAction.CREATE:
        message = f"would enroll {label} as a new record"
    elif decision.action is EnrollmentAction.SAME_IDENTITY:
        message = f"this key already holds agent {agent_id}: the same record again"
    elif decision.how is RebindHow.RELEASED:
        message = (
            f"would re-bind released agent {agent_id} (same id, links and history), replacing "
            f"its identity evidence ({', '.join(held_kinds) or 'none'}) with this machine's "
            f"({', '.join(presented) or 'none'})"
        )
    else:
        message = (
            f"would re-bind agent {agent_id} (same id, links and history): quiet, and this "
            "machine presents every kind of evidence it holds"
        )
    return EnrollmentPreview(
        action=decision.action,
        agent_id=agent_id,
        agent_type=req.agent_type,
        name=req.name,
        environment_id=decided.facts.token.environment_id,
        how=decision.how,
        replaces_evidence=decision.replaces_evidence,
        held_evidence=held_kinds,
        presented_evidence=presented,
        message=message,
    )
