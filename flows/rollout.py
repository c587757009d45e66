"""``fleet-rollout``: one rollout, wave by wave, stopping itself when its criteria are crossed.

The flow only sequences. The Console holds the plan (decided at creation), dispatches
idempotently, records results, judges each one against the criteria and stalls the rollout the
moment they are crossed. The flow:

1. marks the rollout running (recording its flow run);
2. per wave, runs **one task** (never one per agent): dispatch through the Console — a target
   already sent to is never sent again — then wait for the wave's results with its timeout,
   moving a progress artifact as they arrive, and writing a table artifact for the wave;
3. when the rollout stalls (criteria crossed) or is paused, waits for a human's decision with
   typed input (resume or abort) — answered from the Prefect UI, or by the Console's
   resume/abort endpoints, which resume this flow run with the same input. A run of the
   deployment is **suspended** (``suspend_flow_run``): the process exits, nothing holds a worker
   slot however long the stall lasts, and the resumed run starts again from the top, which
   skips what is done (see ``_wait_for_decision``);
4. completes the rollout when every wave is done.

A re-run of the same rollout (after a crash of the flow or the Console) continues where it
stopped and sends nothing twice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from uuid import UUID

from prefect import flow, get_run_logger, task
from prefect.artifacts import (
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NO_CACHE
from prefect.context import get_run_context
from prefect.flow_runs import pause_flow_run, suspend_flow_run
from prefect.input import RunInput
from prefect.states import Failed

from contracts.rollouts import RolloutPublic
from contracts.vocabulary import RolloutState, TargetStatus
from flows.console_client import ConsoleApiError, ConsoleClient
from flows.settings import FlowSettings
from rollout_policy import HALTED_STATES, TERMINAL_STATES, Decision, EventKind

FINAL = {s.value for s in TargetStatus if s.final}
"""Waiting for a human: resume or abort."""


class StallDecision(RunInput):
    """What the operator decides when a rollout stalls or is paused."""

    decision: Decision = EventKind.RESUME
    note: str = ""


@dataclass(frozen=True)
class WaveOutcome:
    wave: int
    state: RolloutState
    done: bool
    counts: dict[str, int]


def _progress(r: RolloutPublic) -> float:
    total = sum(w.size for w in r.waves)
    if not total:
        return 100.0
    finished = sum(v for k, v in r.counts.items() if k in FINAL)
    return round(100.0 * finished / total, 1)


def _describe(r: RolloutPublic) -> str:
    c = r.counts
    return (
        f"{r.state}: {c['succeeded']} succeeded, {c['failed']} failed, "
        f"{c['timed_out']} timed out, {c['rejected']} rejected, "
        f"{c['dispatched']} in flight, {c['pending']} waiting"
    )


def _wave_table(console: ConsoleClient, rollout_id: str, wave: int, r: RolloutPublic) -> None:
    """The wave's table artifact: one row per agent of that wave."""
    rows = [
        {
            "agent": t.agent_name,
            "from": t.old_version or "-",
            "to": t.new_version or "-",
            "result": t.status.value,
            "error": t.error or "",
        }
        for t in console.rollout(rollout_id, wave=wave).targets or []
    ]
    w = r.waves[wave]
    create_table_artifact(
        rows,
        key=f"rollout-{rollout_id[:12]}-wave-{wave}",
        description=f"Wave {wave} ({w.kind}) of rollout {r.name} to {r.target_version}",
    )


@task(name="run-wave", retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE)
def run_wave(
    rollout_id: str, wave: int, progress_id: UUID | None, poll_seconds: float
) -> WaveOutcome:
    """Dispatch one wave through the Console and wait for its results (or a halt)."""
    log = get_run_logger()
    with ConsoleClient(FlowSettings()) as console:
        sent = console.dispatch(rollout_id, wave)
        if sent.refused:
            log.info("wave %d: nothing sent (%s)", wave, sent.refused)
        else:
            log.info(
                "wave %d: %d commands sent, %d sent before", wave, sent.sent, sent.already_sent
            )
        last = -1.0
        while True:
            # Counts only while waiting: the per-agent rows are read once, for the table.
            r = console.rollout(rollout_id, targets=False)
            w = r.waves[wave]
            progress = _progress(r)
            if progress_id and progress != last:
                update_progress_artifact(progress_id, progress, description=_describe(r))
                last = progress
            if w.done or r.state is not RolloutState.RUNNING:
                break
            time.sleep(poll_seconds)
        if w.done:
            _wave_table(console, rollout_id, wave, r)
        return WaveOutcome(wave=wave, state=r.state, done=w.done, counts=w.counts)


def _halt_key(r: RolloutPublic) -> str | None:
    """The halt's own pause key: the same on every run of this flow run (a resumed run meets
    the halt it was resumed from again and gets its answer), another for the next halt."""
    if r.halted_at is None:
        return None  # a Console that does not say when: Prefect's per-run counter
    return f"halt-{int(r.halted_at.timestamp() * 1_000_000)}"


def _wait_for_decision(r: RolloutPublic, timeout: int, poll: int) -> StallDecision | None:
    """Resume or abort, from the Prefect UI or the Console (which resumes the run with it).

    A run of a deployment is **suspended**: its state (``Suspended``, type ``PAUSED``) and the
    decision it waits for are kept by Prefect, the process exits and holds no worker slot;
    resumed, the run is scheduled again and a worker runs the flow from the top. Everything it
    does before this point is idempotent against the Console (a dispatched target is never
    sent again, a finished wave is skipped), and this halt's key makes this call answer the
    decision instead of suspending again. A run started in-process (no deployment: tests,
    benchmarks, ``python -c``) cannot be rescheduled, so it pauses in place (the process waits)."""
    run = get_run_context().flow_run  # type: ignore[union-attr]
    key = _halt_key(r)
    if run is not None and run.deployment_id is not None:
        return suspend_flow_run(wait_for_input=StallDecision, timeout=timeout, key=key)
    return pause_flow_run(
        wait_for_input=StallDecision, timeout=timeout, poll_interval=poll, key=key
    )


def _decide(
    console: ConsoleClient, r: RolloutPublic, timeout: int, poll: int
) -> tuple[RolloutPublic, bool]:
    """Wait for the decision on a halted rollout; (the rollout now, whether to go on)."""
    log = get_run_logger()
    log.warning(
        "rollout %s is %s: %s; waiting for a decision (resume or abort)",
        r.id,
        r.state,
        r.state_reason,
    )
    decision = _wait_for_decision(r, timeout, poll)
    r = console.rollout(r.id, targets=False)
    if decision is not None and decision.decision is EventKind.ABORT:
        if r.state is not RolloutState.ABORTED:
            r = console.decide(r.id, EventKind.ABORT, decision.note or "aborted in Prefect")
        return r, False
    if r.state in HALTED_STATES:
        r = console.decide(r.id, EventKind.RESUME)
    log.info("rollout %s resumed", r.id)
    return r, True


@flow(name="fleet-rollout", log_prints=True)
def fleet_rollout(
    rollout_id: str,
    poll_seconds: float = 0.5,
    decision_timeout_seconds: int = 7 * 86400,
    decision_poll_seconds: int = 5,
) -> dict[str, object]:
    """Roll one Console rollout out wave by wave; pause for a human when it stalls.

    Args:
        rollout_id: The Console's rollout id (``POST /api/v1/fleet/rollouts`` answers it).
        poll_seconds: How often a running wave's progress is read from the Console.
        decision_timeout_seconds: How long a stalled rollout waits for resume or abort.
        decision_poll_seconds: How often a run paused in place (started without a deployment)
            checks for that decision; a deployment's run is suspended and polls nothing.
    """
    log = get_run_logger()
    flow_run_id = str(get_run_context().flow_run.id)  # type: ignore[union-attr]
    with ConsoleClient(FlowSettings()) as console:
        r = console.start(rollout_id, flow_run_id)
        log.info(
            "rollout %s to %s: %d waves, %d excluded up front",
            r.name,
            r.target_version,
            len(r.waves),
            len(r.exclusions),
        )
        for ex in r.exclusions:
            log.info("excluded %s: %s (%s)", ex.agent_name, ex.reason, ex.detail)
        created = create_progress_artifact(
            _progress(r), key=f"rollout-{rollout_id[:12]}-progress", description=_describe(r)
        )
        assert isinstance(created, UUID)  # sync context: Prefect returns the id, not a coroutine
        progress_id = created
        wave = 0
        while wave < len(r.waves) and r.state not in TERMINAL_STATES:
            if r.state in HALTED_STATES:
                r, go_on = _decide(console, r, decision_timeout_seconds, decision_poll_seconds)
                if not go_on:
                    break
            elif r.waves[wave].done:
                wave += 1  # finished (now, or before a restart): nothing to send or wait for
            else:
                run_wave(rollout_id, wave, progress_id, poll_seconds)
                r = console.rollout(rollout_id, targets=False)
        r = console.rollout(rollout_id, targets=False)
        if r.state is RolloutState.RUNNING:
            try:
                r = console.decide(rollout_id, EventKind.COMPLETE)
            except ConsoleApiError as exc:
                log.error("could not complete rollout: %s", exc)
        update_progress_artifact(progress_id, _progress(r), description=_describe(r))
        log.info("rollout %s ended %s", rollout_id, r.state)
        result: dict[str, object] = {
            "rollout_id": rollout_id,
            "state": r.state.value,
            "counts": r.counts,
        }
        if r.state in (RolloutState.ABORTED, RolloutState.FAILED):
            # The run's state tells the outcome: an aborted rollout is not a Completed run.
            return Failed(  # type: ignore[return-value]
                message=f"rollout {r.name} ended {r.state.value}: {r.state_reason or '-'}",
                data=result,
            )
        return result
