"""Cron schedules: when a job is next due, from a five-field cron expression read in a time zone."""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

from sluice.errors import ConfigurationError
from sluice.jobs.profiles import zone

__all__ = ["Cron"]

_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
_BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_NAMES: tuple[dict[str, int], ...] = (
    {},
    {},
    {},
    {
        name: number
        for number, name in enumerate(
            ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
            start=1,
        )
    },
    {name: number for number, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))},
)
_MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
_LONGEST_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
# The longest wait a possible schedule has: 29 February falls on a given weekday up to 40 years
# apart (across 2100, which is not a leap year).
_HORIZON_YEARS = 50
_EPOCH = datetime.date(1970, 1, 1)


def _offset(moment: datetime.datetime) -> int:
    offset = moment.utcoffset()
    assert offset is not None  # an aware datetime in a ZoneInfo always has one
    return int(offset.total_seconds())


@dataclass(frozen=True, slots=True)
class Cron:
    """A cron schedule: minute hour day-of-month month day-of-week, or a macro such as @daily.

    Fields take ``*``, lists ``1,5``, ranges ``1-5``, steps ``*/15`` and ``10-50/10``, month
    names jan-dec and day names sun-sat (0 and 7 are both Sunday). As in Vixie cron, when both
    day fields are restricted (neither starts with ``*``) a day is due if either matches.

    Times are local wall-clock times in ``tz``. Jobs with a specific hour (the hour field does
    not start with ``*``) do not lose or repeat a run: times skipped by a spring-forward fire
    once, at the first instant after the gap, and a time repeated by a fall-back fires at its
    first occurrence only. Jobs whose hour field starts with ``*`` follow the clock as it
    runs: times in a gap never happen, and repeated times fire at both occurrences.
    """

    expression: str
    tz: str = "UTC"
    _minutes: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _hours: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _days: frozenset[int] = field(init=False, repr=False, compare=False)
    _months: frozenset[int] = field(init=False, repr=False, compare=False)
    _weekdays: frozenset[int] = field(init=False, repr=False, compare=False)
    _either_day: bool = field(init=False, repr=False, compare=False)
    _follows_clock: bool = field(init=False, repr=False, compare=False)
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_zone", zone(self.tz))
        fields = _split(self.expression)
        minutes, hours, days, months, weekdays = (
            _parse_field(text, index, self.expression) for index, text in enumerate(fields)
        )
        either_day = not (fields[2].startswith("*") or fields[4].startswith("*"))
        if not either_day and not any(
            day <= _LONGEST_MONTH[month - 1] for month in months for day in days
        ):
            raise ConfigurationError(
                f"cron expression {self.expression!r} is never due: day-of-month {fields[2]!r} "
                f"does not occur in month {fields[3]!r}; pick a day the month has"
            )
        object.__setattr__(self, "_minutes", tuple(sorted(minutes)))
        object.__setattr__(self, "_hours", tuple(sorted(hours)))
        object.__setattr__(self, "_days", days)
        object.__setattr__(self, "_months", months)
        object.__setattr__(self, "_weekdays", frozenset(day % 7 for day in weekdays))
        object.__setattr__(self, "_either_day", either_day)
        object.__setattr__(self, "_follows_clock", fields[1].startswith("*"))

    @classmethod
    def parse(cls, expression: str, tz: str = "UTC") -> Cron:
        """The schedule for ``expression`` in zone ``tz``; ConfigurationError names a bad field."""
        return cls(expression, tz)

    def next_after(self, after: float) -> float:
        """Epoch seconds of the first due time strictly after ``after``."""
        day = datetime.datetime.fromtimestamp(after, self._zone).date()
        horizon = day.year + _HORIZON_YEARS
        while day.year < horizon:
            if day.month not in self._months:
                day = datetime.date(day.year + day.month // 12, day.month % 12 + 1, 1)
                continue
            if self._is_due_day(day):
                due = self._first_due_on(day, after)
                if due is not None:
                    return due
            day += datetime.timedelta(days=1)
        raise ConfigurationError(
            f"cron expression {self.expression!r} in {self.tz} is not due within "
            f"{_HORIZON_YEARS} years after {after}; check its day and month fields"
        )

    def _is_due_day(self, day: datetime.date) -> bool:
        in_month = day.day in self._days
        on_weekday = day.isoweekday() % 7 in self._weekdays
        return (in_month or on_weekday) if self._either_day else (in_month and on_weekday)

    def _first_due_on(self, day: datetime.date, after: float) -> float | None:
        midnight = datetime.datetime.combine(day, datetime.time(), self._zone)
        # tzdata never changes a zone's offset twice within a day, so these are all of today's.
        offsets = (_offset(midnight), _offset(midnight + datetime.timedelta(days=1)))
        low, high = min(offsets), max(offsets)
        wall_midnight = (day - _EPOCH).days * 86400  # the wall clock read as if it were UTC
        first: float | None = None
        # Every occurrence of a wall time lies in [wall - high, wall - low], and wall times come
        # in order: skip those surely not after `after`, stop once none can come earlier.
        for hour in self._hours:
            if wall_midnight + hour * 3600 + self._minutes[-1] * 60 - low <= after:
                continue
            for minute in self._minutes:
                wall = wall_midnight + hour * 3600 + minute * 60
                if wall - low <= after:
                    continue
                if first is not None and wall - high >= first:
                    return first
                local = datetime.datetime.combine(day, datetime.time(hour, minute))
                for due in self._occurrences(local):
                    if due > after and (first is None or due < first):
                        first = due
        return first

    def _occurrences(self, wall: datetime.datetime) -> tuple[float, ...]:
        """The instants at which the local wall-clock time ``wall`` is due, by the DST rule."""
        first = wall.replace(tzinfo=self._zone).timestamp()
        second = wall.replace(tzinfo=self._zone, fold=1).timestamp()
        if first == second:
            return (first,)
        if first < second:  # repeated by a fall-back
            return (first, second) if self._follows_clock else (first,)
        # Skipped by a spring-forward: fold=1 reads it with the new offset, before the gap.
        return () if self._follows_clock else (self._gap_end(second, first),)

    def _gap_end(self, before: float, after: float) -> float:
        """The first whole second in (before, after] that has the offset in force at after."""
        offset = datetime.datetime.fromtimestamp(after, self._zone).utcoffset()
        low, high = math.floor(before), math.ceil(after)
        while high - low > 1:
            middle = (low + high) // 2
            if datetime.datetime.fromtimestamp(middle, self._zone).utcoffset() == offset:
                high = middle
            else:
                low = middle
        return float(high)


def _split(expression: str) -> list[str]:
    if not isinstance(expression, str):
        raise ConfigurationError(f"cron expression {expression!r} is not text; give a string")
    text = expression.strip()
    if text.startswith("@"):
        if text.lower() not in _MACROS:
            raise ConfigurationError(
                f"unknown cron macro {text!r}; use one of {', '.join(_MACROS)} or five fields"
            )
        return _MACROS[text.lower()].split()
    fields = text.split()
    if len(fields) != len(_FIELDS):
        raise ConfigurationError(
            f"cron expression {expression!r} has {len(fields)} fields; give five "
            f"({' '.join(_FIELDS)}) or a macro such as @daily"
        )
    return fields


def _bad(expression: str, index: int, detail: str) -> ConfigurationError:
    return ConfigurationError(f"cron expression {expression!r}, {_FIELDS[index]} field: {detail}")


def _value(token: str, index: int, expression: str) -> int:
    low, high = _BOUNDS[index]
    names = _NAMES[index]
    if token.isascii() and token.isdigit():
        number = int(token)
        if not low <= number <= high:
            raise _bad(expression, index, f"{number} is out of range; use {low}-{high}")
        return number
    if token.lower() in names:
        return names[token.lower()]
    allowed = f"{low}-{high}" + (f" or {'/'.join(names)}" if names else "")
    raise _bad(expression, index, f"{token!r} is not a value; use {allowed}")


def _parse_field(text: str, index: int, expression: str) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        span, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not (step_text.isascii() and step_text.isdigit()) or int(step_text) == 0:
                raise _bad(expression, index, f"step {step_text!r} must be a whole number >= 1")
            step = int(step_text)
        if span == "*":
            first, last = _BOUNDS[index]
        else:
            if slash and "-" not in span:
                raise _bad(
                    expression, index, f"{item!r} steps from one value; write '*/N' or 'A-B/N'"
                )
            start, dash, end = span.partition("-")
            first = _value(start, index, expression)
            last = _value(end, index, expression) if dash else first
            if first > last:
                raise _bad(expression, index, f"range {span!r} runs backwards; write it low-high")
        values.update(range(first, last + 1, step))
    return frozenset(values)
