"""Throughput profiles: how many tasks of one type may start, by time of week and time zone.

A profile's entries are windows of local wall-clock time; the most specific one in force caps
the starts per hour and per cycle, and the profile's default applies outside them all.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any, TypeGuard
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sluice.errors import ConfigurationError

__all__ = ["DAY_NAMES", "Entry", "Follow", "Limits", "Profile", "cycle_start", "hour_start", "zone"]

DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")

_WHOLE_DAY = datetime.timedelta(days=1)
_WINDOW = re.compile(r"([0-9]{1,2}):([0-9]{2})\s*-\s*([0-9]{1,2}):([0-9]{2})")
_CYCLE = "the length of a processing cycle in seconds"
_DAYS_HELP = "use mon..sun, ranges such as 'mon-fri', lists such as 'sat,sun', or '*'"


def zone(tz: str) -> ZoneInfo:
    """The IANA zone ``tz``; ConfigurationError if there is none of that name."""
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, TypeError) as exc:
        raise ConfigurationError(
            f"unknown time zone {tz!r}; give an IANA zone name such as 'Europe/Berlin' or 'UTC'"
        ) from exc


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_count(name: str, value: object) -> None:
    if value is not None and not (_whole(value) and value >= 0):
        raise ConfigurationError(
            f"{name} is {value!r}; give a whole number of 0 or more, or None for no limit"
        )


def _positive(name: str, value: object, meaning: str) -> float:
    # Stored as float so that a JSON round trip gives back an equal value of the same type.
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ConfigurationError(f"{name} is {value!r}; give {meaning}, a number above 0")
    return float(value)


def _aware(when: datetime.datetime) -> datetime.datetime:
    if when.tzinfo is None or when.utcoffset() is None:
        raise ConfigurationError(
            f"{when.isoformat()} has no time zone; pass an aware datetime such as "
            "datetime.datetime(2026, 1, 6, 10, tzinfo=datetime.UTC)"
        )
    return when


@dataclass(frozen=True, slots=True)
class Follow:
    """Load-following: the per-hour limit shrinks as a load signal rises.

    At load 0 the entry's ``max_per_hour`` applies; it falls linearly to ``min_per_hour``
    as the load reaches ``capacity`` and stays there above it.
    """

    signal: str
    capacity: float
    min_per_hour: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.signal, str) or not self.signal:
            raise ConfigurationError(
                f"Follow.signal is {self.signal!r}; name the metric or signal to follow"
            )
        meaning = "the load at which throughput drops to min_per_hour"
        object.__setattr__(self, "capacity", _positive("Follow.capacity", self.capacity, meaning))
        _check_count("Follow.min_per_hour", self.min_per_hour)

    def per_hour(self, max_per_hour: int, load: float) -> int:
        """The hourly limit at ``load``: rounded down, never below ``min_per_hour`` nor above
        ``max_per_hour``. A NaN load counts as full load."""
        if math.isnan(load):
            # A signal that cannot be read is taken as overload: throttling is the safe side.
            load = self.capacity
        share = min(1.0, max(0.0, load) / self.capacity)
        # The tolerance keeps float noise (100 * (1 - 0.07) == 92.999...) from costing a task.
        allowed = math.floor(max_per_hour * (1.0 - share) + 1e-9)
        return min(max_per_hour, max(self.min_per_hour, allowed))


def _since_midnight(clock: datetime.time) -> datetime.timedelta:
    return datetime.timedelta(
        hours=clock.hour, minutes=clock.minute, seconds=clock.second, microseconds=clock.microsecond
    )


@dataclass(frozen=True, slots=True)
class Entry:
    """A window of the week with the limits in force during it.

    ``start`` and ``end`` are local wall-clock times in ``tz``; ``start`` is inclusive and ``end``
    exclusive. When ``end <= start`` the window runs past midnight and belongs to the day it
    starts on ("fri 22:00-06:00" covers Saturday 02:00); ``start == end`` is a whole 24 hours.
    Across a daylight-saving change the window follows the clock, so it may last an hour more or
    less than its nominal ``span``.
    """

    days: frozenset[int]
    start: datetime.time
    end: datetime.time
    tz: str = "UTC"
    max_per_hour: int | None = None
    max_per_cycle: int | None = None
    priority: int | None = None
    follow: Follow | None = None

    def __post_init__(self) -> None:
        days = _day_set(self.days)
        object.__setattr__(self, "days", days)
        window = (self.start, self.end)
        if not all(isinstance(at, datetime.time) and at.tzinfo is None for at in window):
            raise ConfigurationError(
                f"start and end are {window!r}; give datetime.time values without "
                "tzinfo and put the zone in tz"
            )
        zone(self.tz)
        _check_count("max_per_hour", self.max_per_hour)
        _check_count("max_per_cycle", self.max_per_cycle)
        if self.priority is not None and not _whole(self.priority):
            raise ConfigurationError(f"priority is {self.priority!r}; give a whole number or None")
        if self.follow is not None:
            if not isinstance(self.follow, Follow):
                raise ConfigurationError(
                    f"follow is {self.follow!r}; give a Follow(signal, capacity) or None"
                )
            if self.max_per_hour is None:
                raise ConfigurationError(
                    "an entry that follows a load signal needs max_per_hour, the rate at no load"
                )
            if self.follow.min_per_hour > self.max_per_hour:
                raise ConfigurationError(
                    f"Follow.min_per_hour ({self.follow.min_per_hour}) is above max_per_hour "
                    f"({self.max_per_hour}); lower it or raise max_per_hour"
                )

    @classmethod
    def parse(
        cls,
        days: str,
        window: str,
        *,
        tz: str = "UTC",
        max_per_hour: int | None = None,
        max_per_cycle: int | None = None,
        priority: int | None = None,
        follow: Follow | None = None,
    ) -> Entry:
        """An entry from text: days such as "mon-fri", "sat,sun", "fri-mon" or "*", and a
        window such as "09:00-17:00", "22:00-06:00", "00:00-24:00" or "*"."""
        if not isinstance(days, str) or not isinstance(window, str):
            raise ConfigurationError(
                f"Entry.parse takes days and window as text, not {days!r} and {window!r}; "
                "write e.g. Entry.parse('mon-fri', '09:00-17:00')"
            )
        start, end = _parse_window(window)
        return cls(
            _parse_days(days),
            start,
            end,
            tz=tz,
            max_per_hour=max_per_hour,
            max_per_cycle=max_per_cycle,
            priority=priority,
            follow=follow,
        )

    def matches(self, when: datetime.datetime) -> bool:
        """Whether the aware instant ``when`` falls in this window, read in ``tz``."""
        local = _aware(when).astimezone(zone(self.tz))
        clock, today = local.time(), local.weekday()
        if self.start < self.end:
            return today in self.days and self.start <= clock < self.end
        return (today in self.days and clock >= self.start) or (
            (today - 1) % 7 in self.days and clock < self.end
        )

    @property
    def span(self) -> datetime.timedelta:
        """The nominal wall-clock length of the window; 24 hours when start == end."""
        length = (_since_midnight(self.end) - _since_midnight(self.start)) % _WHOLE_DAY
        return length or _WHOLE_DAY


def _day_set(days: object) -> frozenset[int]:
    problem = (
        f"days {days!r} are not days of the week; give a set of at least one, each 0 (Monday) "
        "to 6 (Sunday), or write Entry.parse('mon-fri', ...)"
    )
    if isinstance(days, str) or not isinstance(days, Iterable):
        raise ConfigurationError(problem)
    try:
        found = frozenset(days)
    except TypeError:  # an unhashable member, such as a list
        raise ConfigurationError(problem) from None
    if not found or not all(_whole(day) and 0 <= day <= 6 for day in found):
        raise ConfigurationError(problem)
    return found


def _day_number(name: str, text: str) -> int:
    try:
        return DAY_NAMES.index(name.strip())
    except ValueError:
        raise ConfigurationError(f"unknown day {name!r} in {text!r}; {_DAYS_HELP}") from None


def _parse_days(text: str) -> frozenset[int]:
    spec = text.strip().lower()
    if spec == "*":
        return frozenset(range(7))
    days: set[int] = set()
    for item in spec.split(","):
        first, dash, last = item.partition("-")
        low = _day_number(first, text)
        high = _day_number(last, text) if dash else low
        # A range may wrap past Sunday: "fri-mon" is Friday to Monday.
        days.update((low + offset) % 7 for offset in range((high - low) % 7 + 1))
    return frozenset(days)


def _clock(text: str, hour: int, minute: int, *, end: bool) -> datetime.time:
    if end and (hour, minute) == (24, 0):
        return datetime.time(0)  # 24:00 is the midnight that ends the day
    if hour > 23 or minute > 59:
        raise ConfigurationError(
            f"{hour:02d}:{minute:02d} in window {text!r} is not a time of day; "
            "use 00:00 to 23:59, and 24:00 only as an end"
        )
    return datetime.time(hour, minute)


def _parse_window(text: str) -> tuple[datetime.time, datetime.time]:
    spec = text.strip()
    if spec == "*":
        return datetime.time(0), datetime.time(0)
    match = _WINDOW.fullmatch(spec)
    if match is None:
        raise ConfigurationError(
            f"window {text!r} is not HH:MM-HH:MM; write e.g. '09:00-17:00', '22:00-06:00' or '*'"
        )
    numbers = [int(group) for group in match.groups()]
    return _clock(text, *numbers[:2], end=False), _clock(text, *numbers[2:], end=True)


@dataclass(frozen=True, slots=True)
class Limits:
    """What is in force at one moment."""

    max_per_hour: int | None
    max_per_cycle: int | None
    priority: int | None
    entry: Entry | None
    tz: str


@dataclass(frozen=True, slots=True)
class Profile:
    """The throughput limits of one task type, by time of week.

    The most specific matching entry wins: the one with the fewest days, then the shortest
    span, then the one listed first. A matching entry replaces the default entirely (a None in
    it means no cap). Outside every entry the default applies, in the profile's ``tz``.
    """

    task_type: str
    entries: tuple[Entry, ...] = ()
    default_per_hour: int | None = None
    default_per_cycle: int | None = None
    tz: str = "UTC"
    cycle: float = 60.0

    def __post_init__(self) -> None:
        if not isinstance(self.task_type, str) or not self.task_type:
            raise ConfigurationError(
                f"task_type is {self.task_type!r}; name the task type the profile belongs to"
            )
        object.__setattr__(self, "entries", _entries(self.entries))
        _check_count("default_per_hour", self.default_per_hour)
        _check_count("default_per_cycle", self.default_per_cycle)
        zone(self.tz)
        object.__setattr__(self, "cycle", _positive("cycle", self.cycle, _CYCLE))

    def active(self, when: datetime.datetime, load: Callable[[str], float] | None = None) -> Limits:
        """The limits in force at the aware instant ``when``.

        For an entry that follows a signal, ``load(signal)`` scales its hourly cap; without
        ``load``, or when ``load`` raises KeyError for the signal, the entry's fixed
        ``max_per_hour`` applies.
        """
        _aware(when)
        # min() keeps the first of equal keys, which gives ties to the entry listed first.
        entry = min(
            (entry for entry in self.entries if entry.matches(when)),
            key=lambda entry: (len(entry.days), entry.span),
            default=None,
        )
        if entry is None:
            return Limits(self.default_per_hour, self.default_per_cycle, None, None, self.tz)
        return Limits(_per_hour(entry, load), entry.max_per_cycle, entry.priority, entry, entry.tz)

    def to_json(self) -> str:
        """The profile as JSON text; Profile.from_json gives back an equal profile."""
        data = asdict(self)
        data["entries"] = [_entry_to_dict(entry) for entry in self.entries]
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Profile:
        """The profile that Profile.to_json wrote as ``text``."""
        try:
            data = json.loads(text)
            entries = tuple(_entry_from_dict(entry) for entry in data.pop("entries"))
            return cls(entries=entries, **data)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigurationError(
                f"the stored profile cannot be read ({type(exc).__name__}: {exc}); "
                "store profiles with Profile.to_json()"
            ) from exc


def _entries(entries: object) -> tuple[Entry, ...]:
    # Checked here, not when stored: to_json would fail inside dataclasses.asdict.
    if isinstance(entries, str | bytes | dict) or not isinstance(entries, Iterable):
        raise ConfigurationError(
            f"entries is {entries!r}; give a list of Entry values, e.g. "
            "[Entry.parse('mon-fri', '09:00-17:00', max_per_hour=100)]"
        )
    found = tuple(entries)
    for entry in found:
        if not isinstance(entry, Entry):
            raise ConfigurationError(
                f"entries holds {entry!r}, which is not an Entry; make each one with "
                "Entry(days, start, end, ...) or Entry.parse('mon-fri', '09:00-17:00', ...)"
            )
    return found


def _per_hour(entry: Entry, load: Callable[[str], float] | None) -> int | None:
    if entry.follow is None or entry.max_per_hour is None or load is None:
        return entry.max_per_hour
    try:
        level = load(entry.follow.signal)
    except KeyError:
        # A signal nobody reports must not stop the work: the entry's fixed cap still holds.
        return entry.max_per_hour
    return entry.follow.per_hour(entry.max_per_hour, level)


def _entry_to_dict(entry: Entry) -> dict[str, Any]:
    data = asdict(entry)
    data.update(days=sorted(entry.days), start=entry.start.isoformat(), end=entry.end.isoformat())
    return data


def _entry_from_dict(data: dict[str, Any]) -> Entry:
    follow = data.pop("follow")
    return Entry(
        frozenset(data.pop("days")),
        datetime.time.fromisoformat(data.pop("start")),
        datetime.time.fromisoformat(data.pop("end")),
        follow=None if follow is None else Follow(**follow),
        **data,
    )


def _offset(at: float, zone: ZoneInfo) -> int:
    offset = datetime.datetime.fromtimestamp(at, zone).utcoffset()
    assert offset is not None  # an aware datetime in a ZoneInfo always has one
    return int(offset.total_seconds())


def hour_start(now: float, tz: str) -> float:
    """Epoch seconds at which the local hour containing ``now`` began in zone ``tz``.

    Hours follow the local clock: in a fall-back the repeated hour is two windows an hour
    apart, and with a +05:30 offset hours begin at :30 UTC. Where the offset changes inside a
    local hour (Lord Howe Island shifts by 30 minutes), that hour began at the change.
    """
    local = zone(tz)
    offset = _offset(now, local)
    start = math.floor((now + offset) / 3600) * 3600 - offset
    if _offset(start, local) == offset:
        return float(start)
    # Offsets change on whole seconds, and tzdata never changes one twice within a day.
    before, after = start, math.floor(now)
    while after - before > 1:
        middle = (before + after) // 2
        if _offset(middle, local) == offset:
            after = middle
        else:
            before = middle
    return float(after)


def cycle_start(now: float, cycle: float) -> float:
    """Epoch seconds at which the processing cycle containing ``now`` began."""
    cycle = _positive("cycle", cycle, _CYCLE)
    return math.floor(now / cycle) * cycle
