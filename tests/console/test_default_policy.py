"""One default rollout policy: the API's request defaults, the web form's first values and the
stored criteria all read ``rollout_policy.defaults`` (numbers from ``contracts.vocabulary``)."""

from types import SimpleNamespace

from console.models import Rollout
from console.services.rollouts.records import threshold_policy
from console.web import rollout_form
from contracts.rollouts import RolloutCreate
from rollout_policy import (
    DEFAULT_CANARY_SIZE,
    DEFAULT_CRITERION,
    DEFAULT_THRESHOLD_POLICY,
    DEFAULT_WAVE_PERCENTAGES,
    DEFAULT_WAVE_TIMEOUT_SECONDS,
)
from testkit.rollouts import ARTIFACT


def test_a_request_that_leaves_the_policy_out_gets_the_one_default() -> None:
    body = RolloutCreate.model_validate({"artifact": ARTIFACT})
    assert threshold_policy(body.criteria) == DEFAULT_THRESHOLD_POLICY
    assert body.waves.canary_size == DEFAULT_CANARY_SIZE
    assert tuple(body.waves.percentages or ()) == DEFAULT_WAVE_PERCENTAGES
    assert body.wave_timeout_seconds == DEFAULT_WAVE_TIMEOUT_SECONDS
    assert Rollout.model_fields["wave_timeout_seconds"].default == DEFAULT_WAVE_TIMEOUT_SECONDS


def test_stored_criteria_missing_a_part_take_the_default() -> None:
    policy = threshold_policy([{"threshold_percent": 10}])
    assert policy.criteria == (DEFAULT_CRITERION,)


def test_the_web_forms_first_values_are_the_default_policy() -> None:
    runtime = SimpleNamespace(settings=SimpleNamespace(prefect_api_url=None))
    values = rollout_form.defaults(runtime)
    values.update(source="reference", **{k: ARTIFACT[k] for k in ARTIFACT})
    sent, errors = rollout_form.parse(values, [])
    assert not errors and sent is not None
    assert threshold_policy(sent.criteria) == DEFAULT_THRESHOLD_POLICY
    assert sent.waves.canary_size == DEFAULT_CANARY_SIZE
    assert tuple(sent.waves.percentages or ()) == DEFAULT_WAVE_PERCENTAGES
    assert sent.wave_timeout_seconds == DEFAULT_WAVE_TIMEOUT_SECONDS
