"""Every field another process sends is bounded, and parsing raises only the package's errors
(what broke: a 4,301-digit version made rollouts answer 500; NaN and bombs went through)."""

from __future__ import annotations

import gzip
import hashlib
import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from contracts.bounds import VersionText
from contracts.inventory import (
    ChunkHeader,
    InventoryAssemblyError,
    InventorySnapshot,
    assemble,
    encode_chunks,
    inflate,
    split_chunk,
)
from contracts.messages import CommandResult, Heartbeat
from contracts.rollouts import RolloutCreate
from rollout_policy import VersionError, parse_version, try_parse_version

VERSION_TEXT = TypeAdapter(VersionText)
VERSIONISH = st.from_regex(
    r"\Av?[0-9]{1,5}(\.[0-9]{1,4}){0,2}(-[0-9A-Za-z.-]{1,8})?(\+[0-9A-Za-z.]{1,8})?\Z"
)


def _beat(**over: object) -> dict[str, object]:
    return {
        "agent_id": "a" * 32,
        "instance_id": "b" * 32,
        "agent_type": "host",
        "version": "0.8.0",
        "sent_at": datetime.now(UTC).isoformat(),
        "uptime_seconds": 1,
        "heartbeat_interval_seconds": 30,
        **over,
    }


@given(st.text(max_size=80) | VERSIONISH | st.text("0123456789", min_size=4290, max_size=4400))
@settings(max_examples=300)
def test_parse_version_raises_only_version_error(text: str) -> None:
    try:
        parse_version(text)
    except VersionError:
        pass


@given(st.text(max_size=80) | VERSIONISH)
@settings(max_examples=300)
def test_the_contract_accepts_exactly_what_the_policy_parses(text: str) -> None:
    """One version rule: ``VersionText`` (wire) and ``parse_version`` (policy) agree."""
    try:
        VERSION_TEXT.validate_python(text)
        accepted = True
    except ValidationError:
        accepted = False
    if text == text.strip():
        assert accepted == (try_parse_version(text) is not None), text
    elif accepted:
        raise AssertionError(f"surrounding whitespace accepted: {text!r}")


def test_a_4301_digit_or_900_kb_version_is_no_version() -> None:
    for version in ("9" * 4301, "1." + "0" * 900 * 1024, "0.8.0" + "0" * 60):
        assert try_parse_version(version) is None
        with pytest.raises(ValidationError):
            Heartbeat.model_validate(_beat(version=version))


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_refused_in_messages_and_requests(number: str) -> None:
    raw = json.dumps(_beat()).replace('"uptime_seconds": 1', f'"uptime_seconds": {number}')
    with pytest.raises(ValidationError):
        Heartbeat.model_validate_json(raw)
    body = {
        "artifact": {
            "version": "0.9.0",
            "url": "http://x/a",
            "sha256": "0" * 64,
            "signature": "s" * 20,
        },
        "wave_timeout_seconds": float(number.lower().replace("infinity", "inf")),
    }
    with pytest.raises(ValidationError):
        RolloutCreate.model_validate(body)


def test_maps_lists_and_texts_are_bounded() -> None:
    with pytest.raises(ValidationError):
        Heartbeat.model_validate(_beat(labels={f"k{i}": "v" for i in range(33)}))
    with pytest.raises(ValidationError):
        Heartbeat.model_validate(_beat(instance_id="x y"))
    result = {
        "command_id": "c1",
        "agent_id": "a1",
        "kind": "self_update",
        "status": "failed",
        "finished_at": datetime.now(UTC).isoformat(),
    }
    CommandResult.model_validate(result)
    for over in ({"error": "e" * 4097}, {"detail": {f"k{i}": 1 for i in range(65)}}):
        with pytest.raises(ValidationError):
            CommandResult.model_validate({**result, **over})


@given(st.binary(max_size=700))
def test_split_chunk_raises_only_assembly_errors(message: bytes) -> None:
    try:
        split_chunk(message)
    except InventoryAssemblyError:
        pass


def test_a_chunk_header_announcing_a_billion_chunks_is_refused() -> None:
    head = json.dumps({"sync_id": "s", "seq": 0, "total": 10**9, "sha256": "0" * 64}).encode()
    with pytest.raises(InventoryAssemblyError):
        split_chunk(head + b"\n" + b"x")
    with pytest.raises(ValidationError):
        ChunkHeader(sync_id="s", seq=5, total=5, sha256="0" * 64)


def test_inflate_stops_at_the_cap_without_holding_the_whole_output() -> None:
    bomb = gzip.compress(b" " * (32 * 1024 * 1024))
    with pytest.raises(InventoryAssemblyError, match="inflates past"):
        inflate(bomb, 1024 * 1024)
    assert inflate(gzip.compress(b"{}"), 1024) == b"{}"
    with pytest.raises(InventoryAssemblyError, match="truncated"):
        inflate(gzip.compress(b"x" * 10_000)[:-20], 1024 * 1024)
    with pytest.raises(InventoryAssemblyError, match="not a gzip"):
        inflate(b"not gzip at all", 1024)


def test_assemble_raises_only_assembly_errors_and_round_trips() -> None:
    snapshot = InventorySnapshot(
        cluster_slug="a",
        cluster_name="A",
        collected_at=datetime.now(UTC),
        sync_interval_seconds=300,
        counts={"pods": 0},
    )
    parts = [split_chunk(c) for c in encode_chunks(snapshot, "s", 2048)]
    assert assemble(parts).cluster_slug == "a"
    bad = gzip.compress(b'{"cluster_slug": "a b"}')
    header = ChunkHeader(sync_id="s", seq=0, total=1, sha256=hashlib.sha256(bad).hexdigest())
    with pytest.raises(InventoryAssemblyError, match="invalid"):
        assemble([(header, bad)])
    with pytest.raises(InventoryAssemblyError, match="incomplete"):
        assemble([])


# -- the label syntax and the agent-list filter ----------------------------------------------------


def test_parse_labels_reads_k_v_pairs_and_refuses_the_rest_with_its_reason():
    from contracts.bounds import MAX_LABELS, parse_labels

    assert parse_labels(" zone=a, tier = web ,") == {"zone": "a", "tier": "web"}
    assert parse_labels("") == parse_labels(None) == {}
    assert parse_labels({"zone": "a"}) == {"zone": "a"}
    refusals = {
        "tier": "is not key=value",
        "=v": "empty key",
        "a=1,a=2": "given twice",
        "k=" + "x" * 64: "at most 63 characters",
        "k=\x00": "NUL",
        ",".join(f"k{i}=v" for i in range(MAX_LABELS + 1)): f"at most {MAX_LABELS} labels",
    }
    for text, why in refusals.items():
        with pytest.raises(ValueError, match=why):
            parse_labels(text)


def test_the_agent_filter_is_bounded_and_reads_an_empty_value_as_no_filter():
    from contracts.views import AgentFilter

    assert AgentFilter.model_validate({"status": "", "label": "", "name": ""}) == AgentFilter()
    asked = AgentFilter.model_validate({"label": "zone=a,tier=web", "status": "online"})
    assert asked.labels == {"zone": "a", "tier": "web"}
    assert asked.query() == {
        "status": "online",
        "label": "zone=a,tier=web",
        "limit": "100",
        "offset": "0",
    }
    for bad in ({"label": "tier"}, {"limit": 1001}, {"name": "n" * 254}, {"version": "v" * 65}):
        with pytest.raises(ValidationError):
            AgentFilter.model_validate(bad)
