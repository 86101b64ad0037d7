"""Cron schedules give the next due time, in a time zone and across daylight-saving changes."""

from __future__ import annotations

import datetime

import pytest

from sluice.errors import ConfigurationError
from sluice.jobs.cron import Cron


def at(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, *, second: int = 0
) -> float:
    """Epoch seconds of a UTC time."""
    return datetime.datetime(
        year, month, day, hour, minute, second, tzinfo=datetime.UTC
    ).timestamp()


def runs(cron: Cron, after: float, count: int) -> list[float]:
    times = []
    for _ in range(count):
        after = cron.next_after(after)
        times.append(after)
    return times


# 2026-01-09 is a Friday; 2026-03-29 and 2026-10-25 are the Berlin DST changes.


def test_every_fifteen_minutes() -> None:
    cron = Cron.parse("*/15 * * * *")
    assert cron.next_after(at(2026, 1, 6, 10, 7)) == at(2026, 1, 6, 10, 15)
    assert cron.next_after(at(2026, 1, 6, 10, 15)) == at(2026, 1, 6, 10, 30)  # strictly after
    assert cron.next_after(at(2026, 1, 6, 10, 59, second=59)) == at(2026, 1, 6, 11)
    assert cron.next_after(at(2026, 12, 31, 23, 50)) == at(2027, 1, 1)


def test_weekday_schedule_skips_the_weekend() -> None:
    cron = Cron.parse("30 9 * * mon-fri")
    assert runs(cron, at(2026, 1, 8, 10), 3) == [
        at(2026, 1, 9, 9, 30),
        at(2026, 1, 12, 9, 30),
        at(2026, 1, 13, 9, 30),
    ]
    assert Cron.parse("30 9 * * 1-5").next_after(at(2026, 1, 9, 10)) == at(2026, 1, 12, 9, 30)


def test_day_of_month_or_day_of_week() -> None:
    # The 13th, or any Friday: both fields restricted, so either one suffices.
    cron = Cron.parse("0 0 13 * fri")
    assert runs(cron, at(2026, 1, 1), 4) == [
        at(2026, 1, 2),
        at(2026, 1, 9),
        at(2026, 1, 13),
        at(2026, 1, 16),
    ]


def test_a_star_field_makes_the_days_and() -> None:
    assert Cron.parse("0 0 13 * *").next_after(at(2026, 1, 1)) == at(2026, 1, 13)
    assert Cron.parse("0 0 * * fri").next_after(at(2026, 1, 1)) == at(2026, 1, 2)
    # As in Vixie cron, a field starting with '*' counts as unrestricted: first Sunday only.
    assert runs(Cron.parse("0 0 1-7 * */7"), at(2026, 1, 1), 2) == [at(2026, 1, 4), at(2026, 2, 1)]


def test_month_and_day_names() -> None:
    assert Cron.parse("0 12 1 jan,JUL *").next_after(at(2026, 2, 1)) == at(2026, 7, 1, 12)
    assert Cron.parse("0 0 * feb-mar Sun").next_after(at(2026, 1, 1)) == at(2026, 2, 1)


def test_sunday_is_zero_and_seven() -> None:
    start = at(2026, 1, 6)
    expected = at(2026, 1, 11)
    assert Cron.parse("0 0 * * 0").next_after(start) == expected
    assert Cron.parse("0 0 * * 7").next_after(start) == expected
    assert Cron.parse("0 0 * * sun").next_after(start) == expected
    assert Cron.parse("0 0 * * 5-7").next_after(start) == at(2026, 1, 9)


def test_steps_in_ranges() -> None:
    cron = Cron.parse("10-50/20 9-17/4 * * *")
    assert runs(cron, at(2026, 1, 6), 7) == [
        at(2026, 1, 6, 9, 10),
        at(2026, 1, 6, 9, 30),
        at(2026, 1, 6, 9, 50),
        at(2026, 1, 6, 13, 10),
        at(2026, 1, 6, 13, 30),
        at(2026, 1, 6, 13, 50),
        at(2026, 1, 6, 17, 10),
    ]
    assert Cron.parse("0,30 0 1-3,15 * *").next_after(at(2026, 1, 3, 1)) == at(2026, 1, 15)


@pytest.mark.parametrize(
    ("macro", "expected"),
    [
        ("@hourly", at(2026, 1, 6, 11)),
        ("@daily", at(2026, 1, 7)),
        ("@midnight", at(2026, 1, 7)),
        ("@weekly", at(2026, 1, 11)),
        ("@monthly", at(2026, 2, 1)),
        ("@yearly", at(2027, 1, 1)),
        ("@ANNUALLY", at(2027, 1, 1)),
    ],
)
def test_macros(macro: str, expected: float) -> None:
    assert Cron.parse(macro).next_after(at(2026, 1, 6, 10, 30)) == expected


def test_berlin_morning_in_winter_and_summer() -> None:
    cron = Cron.parse("0 9 * * *", tz="Europe/Berlin")
    assert cron.next_after(at(2026, 1, 15)) == at(2026, 1, 15, 8)
    assert cron.next_after(at(2026, 7, 15)) == at(2026, 7, 15, 7)


def test_spring_forward_runs_a_fixed_hour_job_after_the_gap() -> None:
    # 2026-03-29: 02:00 CET becomes 03:00 CEST at 01:00 UTC, so 02:30 never shows.
    cron = Cron.parse("30 2 * * *", tz="Europe/Berlin")
    assert runs(cron, at(2026, 3, 28), 3) == [
        at(2026, 3, 28, 1, 30),  # 02:30 CET
        at(2026, 3, 29, 1, 0),  # the first instant after the gap, 03:00 CEST
        at(2026, 3, 30, 0, 30),  # 02:30 CEST
    ]


def test_spring_forward_runs_a_gap_full_of_due_times_once() -> None:
    cron = Cron.parse("*/15 2 * * *", tz="Europe/Berlin")
    assert runs(cron, at(2026, 3, 29), 2) == [at(2026, 3, 29, 1), at(2026, 3, 30, 0)]


def test_spring_forward_skips_clock_following_times() -> None:
    cron = Cron.parse("30 * * * *", tz="Europe/Berlin")
    assert runs(cron, at(2026, 3, 29, 0), 3) == [
        at(2026, 3, 29, 0, 30),  # 01:30 CET
        at(2026, 3, 29, 1, 30),  # 03:30 CEST: 02:30 did not happen
        at(2026, 3, 29, 2, 30),
    ]


def test_fall_back_runs_a_fixed_hour_job_once() -> None:
    # 2026-10-25: 03:00 CEST becomes 02:00 CET at 01:00 UTC, so 02:30 shows twice.
    cron = Cron.parse("30 2 * * *", tz="Europe/Berlin")
    assert runs(cron, at(2026, 10, 24, 12), 2) == [
        at(2026, 10, 25, 0, 30),  # 02:30 CEST, the first occurrence
        at(2026, 10, 26, 1, 30),  # 02:30 CET the next day
    ]


def test_fall_back_repeats_clock_following_times() -> None:
    cron = Cron.parse("30 * * * *", tz="Europe/Berlin")
    assert runs(cron, at(2026, 10, 24, 23, 45), 3) == [
        at(2026, 10, 25, 0, 30),  # 02:30 CEST
        at(2026, 10, 25, 1, 30),  # 02:30 CET
        at(2026, 10, 25, 2, 30),  # 03:30 CET
    ]


def test_rare_dates_are_found_without_a_minute_by_minute_walk() -> None:
    assert Cron.parse("0 0 29 2 *").next_after(at(2026, 1, 1)) == at(2028, 2, 29)
    # 29 February that is also a Sunday: 2032, then 2060.
    sunday_leap = Cron.parse("0 0 29 2 */7")
    assert runs(sunday_leap, at(2026, 1, 1), 2) == [at(2032, 2, 29), at(2060, 2, 29)]
    # With both day fields restricted, 30 February is no obstacle: Mondays still match.
    assert Cron.parse("0 0 30 2 mon").next_after(at(2026, 1, 1)) == at(2026, 2, 2)


@pytest.mark.parametrize("expression", ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 30-31 feb */2"])
def test_impossible_dates_are_refused(expression: str) -> None:
    with pytest.raises(ConfigurationError, match="never due"):
        Cron.parse(expression)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("", "has 0 fields"),
        ("* * * *", "has 4 fields"),
        ("* * * * * *", "has 6 fields"),
        ("60 * * * *", "minute field: 60 is out of range"),
        ("* 24 * * *", "hour field: 24 is out of range"),
        ("* * 0 * *", "day-of-month field: 0 is out of range"),
        ("* * 32 * *", "day-of-month field"),
        ("* * * 13 *", "month field: 13 is out of range"),
        ("* * * * 8", "day-of-week field: 8 is out of range"),
        ("* * * foo *", "month field: 'foo' is not a value"),
        ("* * * * funday", "day-of-week field: 'funday'"),
        ("* * * mon *", "month field: 'mon'"),
        ("*/0 * * * *", "minute field: step '0'"),
        ("*/x * * * *", "minute field: step 'x'"),
        ("5/10 * * * *", "minute field: '5/10' steps from one value"),
        ("30-10 * * * *", "minute field: range '30-10' runs backwards"),
        ("1,,2 * * * *", "minute field: '' is not a value"),
        ("-5 * * * *", "minute field"),
        ("@reboot", "unknown cron macro"),
    ],
)
def test_invalid_expressions(expression: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Cron.parse(expression)


def test_unknown_time_zone() -> None:
    with pytest.raises(ConfigurationError, match="unknown time zone"):
        Cron.parse("* * * * *", tz="Mars/Olympus")


def test_schedules_compare_by_expression_and_zone() -> None:
    assert Cron.parse("0 9 * * *", "Europe/Berlin") == Cron("0 9 * * *", "Europe/Berlin")
    assert Cron("0 9 * * *") != Cron("0 9 * * *", "Europe/Berlin")
    assert len({Cron("@daily"), Cron("@daily")}) == 1
    assert repr(Cron("@daily")) == "Cron(expression='@daily', tz='UTC')"
