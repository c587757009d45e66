"""Versions and version ranges: SemVer precedence, the leniencies, and range parsing."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollout_policy import (
    Version,
    VersionError,
    VersionRangeError,
    parse_version,
    parse_version_range,
    try_parse_version,
)

versions = st.builds(
    Version,
    major=st.integers(0, 20),
    minor=st.integers(0, 20),
    patch=st.integers(0, 20),
    prerelease=st.lists(
        st.one_of(st.integers(0, 30).map(str), st.sampled_from(["alpha", "beta", "rc"])),
        max_size=2,
    ).map(tuple),
)


def test_a_plain_version_parses_into_its_parts() -> None:
    assert parse_version("0.8.1") == Version(0, 8, 1)


def test_a_leading_v_and_missing_parts_are_accepted() -> None:
    assert parse_version("v1.2") == Version(1, 2, 0)
    assert parse_version("2") == Version(2, 0, 0)


def test_build_metadata_is_kept_but_ignored_when_comparing() -> None:
    version = parse_version("0.9.0-rc.1+build.7")
    assert version.prerelease == ("rc", "1")
    assert version.build == ("build", "7")
    assert str(version) == "0.9.0-rc.1+build.7"
    assert version == parse_version("0.9.0-rc.1+other")


def test_numeric_parts_compare_as_numbers_not_text() -> None:
    assert parse_version("0.10.0") > parse_version("0.9.0")
    assert parse_version("1.0.0-rc.11") > parse_version("1.0.0-rc.2")


def test_precedence_follows_the_semver_specification_example() -> None:
    chain = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
    ]
    parsed = [parse_version(text) for text in chain]
    assert parsed == sorted(parsed)
    assert len(set(parsed)) == len(parsed)


@pytest.mark.parametrize("text", ["", "latest", "1.2.3.4", "1..2", "0.8.0-", "0.8.0+", "v"])
def test_text_that_is_not_a_version_is_refused_with_the_text(text: str) -> None:
    with pytest.raises(VersionError) as caught:
        parse_version(text)
    assert caught.value.text == text
    assert try_parse_version(text) is None


def test_a_missing_version_is_none() -> None:
    assert try_parse_version(None) is None


@given(versions)
def test_a_version_survives_printing_and_parsing(version: Version) -> None:
    assert parse_version(str(version)) == version


@given(versions, versions)
def test_ordering_is_total_and_consistent_with_equality(a: Version, b: Version) -> None:
    assert (a < b) + (a == b) + (a > b) == 1
    if a == b:
        assert hash(a) == hash(b)


def test_a_range_is_the_conjunction_of_its_clauses() -> None:
    window = parse_version_range(">=0.7.0,<0.9.0")
    assert str(window) == ">=0.7.0,<0.9.0"
    inside = ["0.7.0", "0.7.2", "0.8.9"]
    outside = ["0.6.9", "0.9.0", "1.0.0"]
    assert all(window.contains(parse_version(v)) for v in inside)
    assert not any(window.contains(parse_version(v)) for v in outside)


def test_a_prerelease_of_the_upper_bound_is_below_it() -> None:
    assert parse_version_range("<0.9.0").contains(parse_version("0.9.0-rc.1"))


@pytest.mark.parametrize(
    ("text", "version", "expected"),
    [
        ("0.8.1", "0.8.1", True),
        ("=0.8.1", "0.8.2", False),
        ("==0.8", "0.8.0", True),
        ("!=0.8.0", "0.8.0", False),
        ("> 0.8.0", "0.8.1", True),
        ("<=0.8.0", "0.8.0", True),
        ("*", "12.0.0", True),
        ("", "0.0.1", True),
    ],
)
def test_each_operator(text: str, version: str, expected: bool) -> None:
    assert parse_version_range(text).contains(parse_version(version)) is expected


@pytest.mark.parametrize(("text", "clause"), [("=>0.7", "=>0.7"), (">=0.7,,<0.9", ""), ("<", "<")])
def test_a_bad_clause_is_named_in_the_error(text: str, clause: str) -> None:
    with pytest.raises(VersionRangeError) as caught:
        parse_version_range(text)
    assert caught.value.clause == clause
    assert caught.value.text == text
