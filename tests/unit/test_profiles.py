"""Throughput profiles pick the limits in force by day, local time, zone and load."""

from __future__ import annotations

import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from sluice.errors import ConfigurationError
from sluice.jobs.profiles import (
    DAY_NAMES,
    Entry,
    Follow,
    Limits,
    Profile,
    cycle_start,
    hour_start,
)

UTC = datetime.UTC
BERLIN = ZoneInfo("Europe/Berlin")


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, *, second: int = 0
) -> datetime.datetime:
    return datetime.datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def berlin(year: int, month: int, day: int, hour: int = 0) -> datetime.datetime:
    return datetime.datetime(year, month, day, hour, tzinfo=BERLIN)


# 2026-01-05 is a Monday, 2026-01-09 a Friday, 2026-01-10 a Saturday.


def test_mass_mailing_profile() -> None:
    mail = Profile(
        "mail",
        (Entry.parse("mon-fri", "08:00-18:00", tz="Europe/Berlin", max_per_hour=5),),
        default_per_hour=1000,
        tz="Europe/Berlin",
    )
    assert mail.active(berlin(2026, 1, 6, 10)).max_per_hour == 5
    assert mail.active(berlin(2026, 1, 6, 20)).max_per_hour == 1000
    assert mail.active(berlin(2026, 1, 10, 10)).max_per_hour == 1000


@pytest.mark.parametrize(
    ("days", "expected"),
    [
        ("mon-fri", {0, 1, 2, 3, 4}),
        ("sat,sun", {5, 6}),
        ("mon,wed-fri", {0, 2, 3, 4}),
        ("*", set(range(7))),
        ("FRI-Mon", {4, 5, 6, 0}),
        (" tue ", {1}),
    ],
)
def test_days_parse(days: str, expected: set[int]) -> None:
    assert Entry.parse(days, "*").days == frozenset(expected)


def test_selection_by_day_of_week() -> None:
    office = Entry.parse("mon-fri", "09:00-17:00")
    assert office.matches(utc(2026, 1, 6, 9))
    assert office.matches(utc(2026, 1, 9, 16, 59, second=59))
    assert not office.matches(utc(2026, 1, 6, 17))  # the end is exclusive
    assert not office.matches(utc(2026, 1, 6, 8, 59))
    assert not office.matches(utc(2026, 1, 10, 10))
    assert not office.matches(utc(2026, 1, 11, 10))


def test_window_crossing_midnight_belongs_to_its_start_day() -> None:
    night = Entry.parse("fri", "22:00-06:00")
    assert night.matches(utc(2026, 1, 9, 22))
    assert night.matches(utc(2026, 1, 10, 2))  # Saturday 02:00
    assert not night.matches(utc(2026, 1, 9, 2))  # Friday 02:00 is Thursday's night
    assert not night.matches(utc(2026, 1, 10, 6))
    assert not night.matches(utc(2026, 1, 10, 23))


def test_sunday_night_runs_into_monday() -> None:
    night = Entry.parse("sun", "22:00-06:00")
    assert night.matches(utc(2026, 1, 11, 23))
    assert night.matches(utc(2026, 1, 12, 3))  # Monday
    assert not night.matches(utc(2026, 1, 11, 3))  # Sunday morning


def test_whole_day_and_midnight_end() -> None:
    for window in ("*", "00:00-24:00", "00:00-00:00"):
        entry = Entry.parse("tue", window)
        assert entry.span == datetime.timedelta(hours=24)
        assert entry.matches(utc(2026, 1, 6, 0))
        assert entry.matches(utc(2026, 1, 6, 23, 59))
        assert not entry.matches(utc(2026, 1, 7, 0))
    late = Entry.parse("tue", "22:00-24:00")
    assert late.span == datetime.timedelta(hours=2)
    assert late.matches(utc(2026, 1, 6, 23, 30))
    assert not late.matches(utc(2026, 1, 7, 0))


def test_span_is_nominal_wall_clock_length() -> None:
    assert Entry.parse("*", "09:00-17:30").span == datetime.timedelta(hours=8, minutes=30)
    assert Entry.parse("*", "22:00-06:00").span == datetime.timedelta(hours=8)


def test_the_same_instant_matches_in_one_zone_only() -> None:
    instant = utc(2026, 1, 6, 10)  # 11:00 in Berlin, 05:00 in New York
    assert Entry.parse("tue", "09:00-17:00", tz="Europe/Berlin").matches(instant)
    assert not Entry.parse("tue", "09:00-17:00", tz="America/New_York").matches(instant)


def test_zone_conversion_can_change_the_day() -> None:
    # Monday 23:30 UTC is already Tuesday in Tokyo.
    assert Entry.parse("tue", "08:00-09:00", tz="Asia/Tokyo").matches(utc(2026, 1, 5, 23, 30))


def test_spring_forward_follows_the_clock() -> None:
    # Berlin, 2026-03-29: 02:00 CET becomes 03:00 CEST at 01:00 UTC.
    early = Entry.parse("sun", "01:00-04:00", tz="Europe/Berlin")
    assert not early.matches(utc(2026, 3, 28, 23, 59))  # 00:59 CET
    assert early.matches(utc(2026, 3, 29, 0, 59))  # 01:59 CET
    assert early.matches(utc(2026, 3, 29, 1, 0))  # 03:00 CEST, right after the change
    assert not early.matches(utc(2026, 3, 29, 2, 0))  # 04:00 CEST


def test_fall_back_follows_the_clock() -> None:
    # Berlin, 2026-10-25: 03:00 CEST becomes 02:00 CET at 01:00 UTC.
    early = Entry.parse("sun", "01:00-04:00", tz="Europe/Berlin")
    assert early.matches(utc(2026, 10, 24, 23, 0))  # 01:00 CEST
    assert early.matches(utc(2026, 10, 25, 0, 30))  # 02:30 CEST
    assert early.matches(utc(2026, 10, 25, 1, 30))  # 02:30 CET, right after the change
    assert early.matches(utc(2026, 10, 25, 2, 59))  # 03:59 CET
    assert not early.matches(utc(2026, 10, 25, 3, 0))  # 04:00 CET


def test_hour_start_in_utc() -> None:
    now = utc(2026, 1, 6, 10, 42, second=7).timestamp()
    assert hour_start(now, "UTC") == utc(2026, 1, 6, 10).timestamp()


def test_hour_start_splits_the_repeated_hour_of_a_fall_back() -> None:
    first = hour_start(utc(2026, 10, 25, 0, 30).timestamp(), "Europe/Berlin")  # 02:30 CEST
    second = hour_start(utc(2026, 10, 25, 1, 30).timestamp(), "Europe/Berlin")  # 02:30 CET
    assert first == utc(2026, 10, 25, 0).timestamp()
    assert second == utc(2026, 10, 25, 1).timestamp()
    assert second - first == 3600


def test_hour_start_after_a_spring_forward() -> None:
    now = utc(2026, 3, 29, 1, 30).timestamp()  # 03:30 CEST
    assert hour_start(now, "Europe/Berlin") == utc(2026, 3, 29, 1).timestamp()


@pytest.mark.parametrize(
    ("tz", "expected"),
    [("Asia/Kolkata", utc(2026, 1, 6, 10, 30)), ("Asia/Kathmandu", utc(2026, 1, 6, 10, 15))],
)
def test_hour_start_with_part_hour_offsets(tz: str, expected: datetime.datetime) -> None:
    # 10:40 UTC is 16:10 in Kolkata (+05:30) and 16:25 in Kathmandu (+05:45).
    assert hour_start(utc(2026, 1, 6, 10, 40).timestamp(), tz) == expected.timestamp()


def test_hour_start_when_the_offset_changes_inside_an_hour() -> None:
    # Lord Howe Island, 2026-04-05: 02:00 (+11:00) becomes 01:30 (+10:30) at 15:00 UTC.
    now = utc(2026, 4, 4, 15, 15).timestamp()  # 01:45 local
    assert hour_start(now, "Australia/Lord_Howe") == utc(2026, 4, 4, 15).timestamp()
    before = utc(2026, 4, 4, 14, 45).timestamp()  # 01:45 local, first time round
    assert hour_start(before, "Australia/Lord_Howe") == utc(2026, 4, 4, 14).timestamp()


def test_cycle_start() -> None:
    assert cycle_start(125.5, 60.0) == 120.0
    assert cycle_start(120.0, 60.0) == 120.0
    assert cycle_start(7.0, 2.5) == 5.0
    with pytest.raises(ConfigurationError, match="cycle"):
        cycle_start(10.0, 0.0)


def test_fewer_days_beat_every_day() -> None:
    profile = Profile(
        "report",
        (Entry.parse("*", "*", max_per_hour=100), Entry.parse("tue", "*", max_per_hour=5)),
    )
    assert profile.active(utc(2026, 1, 6, 12)).max_per_hour == 5
    assert profile.active(utc(2026, 1, 7, 12)).max_per_hour == 100


def test_narrow_window_inside_a_wide_one_wins() -> None:
    profile = Profile(
        "report",
        (
            Entry.parse("mon-fri", "08:00-18:00", max_per_hour=5, priority=1),
            Entry.parse("mon-fri", "12:00-13:00", max_per_hour=1, max_per_cycle=1, priority=9),
        ),
    )
    lunch = profile.active(utc(2026, 1, 6, 12, 30))
    assert lunch == Limits(1, 1, 9, profile.entries[1], "UTC")
    assert profile.active(utc(2026, 1, 6, 10)) == Limits(5, None, 1, profile.entries[0], "UTC")


def test_fewer_days_outrank_a_shorter_window() -> None:
    profile = Profile(
        "report",
        (
            Entry.parse("mon-fri", "12:00-13:00", max_per_hour=1),
            Entry.parse("tue", "*", max_per_hour=7),
        ),
    )
    assert profile.active(utc(2026, 1, 6, 12, 30)).max_per_hour == 7


def test_ties_go_to_the_entry_listed_first() -> None:
    profile = Profile(
        "report",
        (
            Entry.parse("tue", "09:00-10:00", max_per_hour=3),
            Entry.parse("tue", "09:30-10:30", max_per_hour=4),
        ),
    )
    assert profile.active(utc(2026, 1, 6, 9, 45)).max_per_hour == 3


def test_default_applies_when_nothing_matches() -> None:
    profile = Profile(
        "report",
        (Entry.parse("sat,sun", "*", max_per_hour=1, tz="Europe/Berlin"),),
        default_per_hour=50,
        default_per_cycle=2,
        tz="America/New_York",
    )
    assert profile.active(utc(2026, 1, 6, 12)) == Limits(50, 2, None, None, "America/New_York")
    weekend = profile.active(utc(2026, 1, 10, 12))
    assert weekend.tz == "Europe/Berlin"
    assert weekend.max_per_cycle is None  # the entry replaces the default entirely
    assert Profile("empty").active(utc(2026, 1, 6)) == Limits(None, None, None, None, "UTC")


@pytest.mark.parametrize(
    ("load", "expected"),
    [(0.0, 100), (-5.0, 100), (50.0, 50), (25.0, 75), (100.0, 10), (250.0, 10), (95.0, 10)],
)
def test_follow_scales_the_hourly_limit(load: float, expected: int) -> None:
    assert Follow("db_load", 100.0, min_per_hour=10).per_hour(100, load) == expected


def test_follow_rounds_down_without_float_noise() -> None:
    follow = Follow("cpu", 1.0)
    assert follow.per_hour(10, 0.25) == 7  # 7.5
    assert follow.per_hour(100, 0.07) == 93  # 100 * 0.93 is 92.999... in floats
    assert follow.per_hour(100, float("nan")) == 0  # unreadable load counts as full


def test_active_applies_the_load_signal() -> None:
    profile = Profile(
        "export",
        (Entry.parse("*", "*", max_per_hour=200, follow=Follow("db_load", 4.0, 20)),),
    )
    when = utc(2026, 1, 6, 12)
    assert profile.active(when, {"db_load": 2.0}.__getitem__).max_per_hour == 100
    assert profile.active(when, {"db_load": 9.0}.__getitem__).max_per_hour == 20
    no_signals: dict[str, float] = {}
    assert profile.active(when, no_signals.__getitem__).max_per_hour == 200
    assert profile.active(when).max_per_hour == 200  # no load function


def test_json_round_trip() -> None:
    profile = Profile(
        "mail",
        (
            Entry.parse("mon-fri", "08:00-18:00", tz="Europe/Berlin", max_per_hour=5),
            Entry.parse("fri", "22:00-06:00", max_per_cycle=3, priority=-2),
            Entry(
                frozenset({6}),
                datetime.time(1, 2, 3, 4),
                datetime.time(1, 2, 3, 4),
                tz="Asia/Kolkata",
                max_per_hour=40,
                follow=Follow("queue_depth", 10, min_per_hour=2),
            ),
        ),
        default_per_hour=1000,
        default_per_cycle=0,
        tz="America/New_York",
        cycle=30,
    )
    text = profile.to_json()
    again = Profile.from_json(text)
    assert again == profile
    assert again.to_json() == text
    assert Profile.from_json(Profile("bare").to_json()) == Profile("bare")


@pytest.mark.parametrize(
    "text", ["not json", "[]", '{"task_type": "mail"}', Profile("x").to_json().replace("60.0", "0")]
)
def test_from_json_rejects_what_to_json_did_not_write(text: str) -> None:
    with pytest.raises(ConfigurationError):
        Profile.from_json(text)


@pytest.mark.parametrize(
    ("days", "window", "message"),
    [
        ("", "*", "unknown day"),
        ("funday", "*", "unknown day 'funday'"),
        ("mon-xyz", "*", "unknown day"),
        ("mon,,tue", "*", "unknown day"),
        ("mon", "25:00-26:00", "not a time of day"),
        ("mon", "09:60-10:00", "not a time of day"),
        ("mon", "24:00-06:00", "not a time of day"),
        ("mon", "09:00-24:30", "not a time of day"),
        ("mon", "9-5", "not HH:MM-HH:MM"),
        ("mon", "", "not HH:MM-HH:MM"),
    ],
)
def test_parse_rejects_bad_text(days: str, window: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Entry.parse(days, window)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tz": "Mars/Olympus"}, "unknown time zone"),
        ({"max_per_hour": -1}, "max_per_hour"),
        ({"max_per_cycle": -3}, "max_per_cycle"),
        ({"max_per_hour": 1.5}, "max_per_hour"),
        ({"priority": "high"}, "priority"),
        ({"follow": Follow("load", 1.0)}, "needs max_per_hour"),
        ({"max_per_hour": 5, "follow": Follow("load", 1.0, 6)}, "above max_per_hour"),
    ],
)
def test_entry_rejects_bad_limits(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Entry.parse("mon", "*", **kwargs)


@pytest.mark.parametrize("days", [frozenset(), frozenset({7}), frozenset({-1})])
def test_entry_rejects_bad_days(days: frozenset[int]) -> None:
    with pytest.raises(ConfigurationError, match="day"):
        Entry(days, datetime.time(9), datetime.time(17))


def test_entry_rejects_aware_times() -> None:
    with pytest.raises(ConfigurationError, match="without tzinfo"):
        Entry(frozenset({0}), datetime.time(9, tzinfo=UTC), datetime.time(17))


@pytest.mark.parametrize(
    ("args", "message"),
    [(("", 1.0), "signal"), (("load", 0.0), "capacity"), (("load", -1.0), "capacity")],
)
def test_follow_rejects_bad_values(args: tuple[str, float], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Follow(*args)
    with pytest.raises(ConfigurationError, match="min_per_hour"):
        Follow("load", 1.0, -1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cycle": 0}, "cycle"),
        ({"cycle": -1.0}, "cycle"),
        ({"tz": "Nowhere"}, "unknown time zone"),
        ({"default_per_hour": -1}, "default_per_hour"),
        ({"default_per_cycle": -1}, "default_per_cycle"),
    ],
)
def test_profile_rejects_bad_settings(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Profile("mail", **kwargs)


def test_profile_needs_a_task_type() -> None:
    with pytest.raises(ConfigurationError, match="task_type"):
        Profile("")


def test_naive_datetimes_are_refused() -> None:
    naive = datetime.datetime(2026, 1, 6, 10)
    with pytest.raises(ConfigurationError, match="no time zone"):
        Entry.parse("*", "*").matches(naive)
    with pytest.raises(ConfigurationError, match="no time zone"):
        Profile("mail").active(naive)


def test_day_names_are_monday_first() -> None:
    assert DAY_NAMES[0] == "mon"
    assert DAY_NAMES[6] == "sun"
