"""The rollout state machine: legal transitions only, terminal states, reasons, history."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout_policy import (
    EVENT_TARGETS,
    LEGAL_EVENTS,
    TERMINAL_STATES,
    EventKind,
    IllegalTransitionError,
    RolloutEvent,
    RolloutState,
    RolloutStatus,
    next_state,
)

S = RolloutState
E = EventKind

LEGAL = {
    (S.PENDING, E.START): S.RUNNING,
    (S.PENDING, E.ABORT): S.ABORTED,
    (S.PENDING, E.FAIL): S.FAILED,
    (S.RUNNING, E.STALL): S.STALLED,
    (S.RUNNING, E.PAUSE): S.PAUSED,
    (S.RUNNING, E.ABORT): S.ABORTED,
    (S.RUNNING, E.COMPLETE): S.SUCCEEDED,
    (S.RUNNING, E.FAIL): S.FAILED,
    (S.PAUSED, E.RESUME): S.RUNNING,
    (S.PAUSED, E.STALL): S.STALLED,
    (S.PAUSED, E.ABORT): S.ABORTED,
    (S.STALLED, E.RESUME): S.RUNNING,
    (S.STALLED, E.ABORT): S.ABORTED,
}


@pytest.mark.parametrize("state", list(S))
@pytest.mark.parametrize("event", list(E))
def test_every_state_and_event_pair(state: RolloutState, event: EventKind) -> None:
    if (state, event) in LEGAL:
        assert next_state(state, event) is LEGAL[(state, event)]
    else:
        with pytest.raises(IllegalTransitionError) as caught:
            next_state(state, event)
        assert caught.value.from_state is state
        assert caught.value.to_state is EVENT_TARGETS[event]
        assert caught.value.event is event


def test_terminal_states_accept_nothing() -> None:
    assert TERMINAL_STATES == {S.ABORTED, S.SUCCEEDED, S.FAILED}
    assert all(not LEGAL_EVENTS[state] for state in TERMINAL_STATES)


def test_a_stalled_rollout_resumed_and_completed() -> None:
    status = RolloutStatus()
    assert status.state is S.PENDING
    assert not status.dispatch_allowed
    status = status.apply(RolloutEvent.start())
    assert status.dispatch_allowed
    stalled = status.apply(RolloutEvent.stall("3 failed of 5 executed"))
    assert stalled.state is S.STALLED
    assert stalled.reason == "3 failed of 5 executed"
    assert not stalled.dispatch_allowed
    assert stalled.allowed_events() == {E.RESUME, E.ABORT}
    done = stalled.apply(RolloutEvent.resume()).apply(RolloutEvent.complete())
    assert done.state is S.SUCCEEDED
    assert done.is_terminal
    assert done.reason is None
    assert [(t.from_state, t.to_state) for t in done.history] == [
        (S.PENDING, S.RUNNING),
        (S.RUNNING, S.STALLED),
        (S.STALLED, S.RUNNING),
        (S.RUNNING, S.SUCCEEDED),
    ]
    assert status.state is S.RUNNING  # apply returned new values; the old one is unchanged


def test_a_paused_rollout_whose_in_flight_wave_crosses_the_threshold_is_stalled() -> None:
    status = RolloutStatus().apply(RolloutEvent.start()).apply(RolloutEvent.pause("lunch"))
    assert status.apply(RolloutEvent.stall("threshold")).state is S.STALLED


def test_pausing_twice_is_a_conflict() -> None:
    paused = RolloutStatus(state=S.RUNNING).apply(RolloutEvent.pause())
    with pytest.raises(IllegalTransitionError, match="cannot pause while paused"):
        paused.apply(RolloutEvent.pause())


@pytest.mark.parametrize("kind", [E.STALL, E.FAIL])
def test_stall_and_fail_must_say_why(kind: EventKind) -> None:
    with pytest.raises(ValueError, match="needs a reason"):
        RolloutEvent(kind)


events = st.builds(
    RolloutEvent,
    kind=st.sampled_from(E),
    reason=st.text(min_size=1, max_size=5),
)


@settings(deadline=None)
@given(st.lists(events, max_size=40))
def test_random_event_sequences_only_ever_take_legal_transitions(
    sequence: list[RolloutEvent],
) -> None:
    status = RolloutStatus()
    for event in sequence:
        before = status
        try:
            status = status.apply(event)
        except IllegalTransitionError as error:
            assert event.kind not in LEGAL_EVENTS[before.state]
            assert error.from_state is before.state
            continue
        assert (before.state, event.kind) in LEGAL
        assert status.state is LEGAL[(before.state, event.kind)]
        assert status.history[:-1] == before.history
        assert status.history[-1].event == event
        if before.is_terminal:
            pytest.fail("left a terminal state")
    assert status.dispatch_allowed == (status.state is S.RUNNING)
    for transition in status.history:
        assert (transition.from_state, transition.event.kind) in LEGAL
