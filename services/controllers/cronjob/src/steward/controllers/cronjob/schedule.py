"""CronJob schedules without I/O: ``spec.schedule`` and ``spec.timeZone`` parsed, the
times a schedule fires, the most recent missed time and the requeue delay, as upstream's
cronjob controller computes them (pkg/controller/cronjob/utils.go, ``formatSchedule`` and
``syncCronJob`` in cronjob_controllerv2.go) with the cron library it uses,
github.com/robfig/cron/v3 (``ParseStandard`` in parser.go, ``SpecSchedule.Next`` in spec.go,
``Every`` in constantdelay.go).

# What a schedule may be
Five fields separated by white space: minute (0-59), hour (0-23), day of month (1-31),
month (1-12 or ``jan``-``dec``) and day of week (0-6 or ``sun``-``sat``; Sunday is 0 only,
7 is refused). Names are case-insensitive. A field is a comma-separated list of ``*``
or ``?`` (every value), ``N``, ``N-M`` and either followed by ``/step``; ``N/step``
means ``N-max/step``. Or a descriptor: ``@yearly`` (``@annually``), ``@monthly``,
``@weekly``, ``@daily`` (``@midnight``), ``@hourly``, or ``@every <duration>`` (a Go
duration such as ``1h30m``; shorter than a second counts as one second, fractions of a
second are dropped). When both day fields are restricted (neither is written ``*``,
``?`` or ``*/1``), a day matches when either matches; otherwise both must.

robfig's grammar is kept with its oddities, since the API server validates schedules
with the same parser: ``*-5`` reads as ``*`` (what follows the star is not read), empty
list items are dropped (``1,,2``; a field ``,`` selects nothing, so the schedule never
fires), and ``@every -1h`` is every second.

# Time zones
A schedule runs in ``spec.timeZone`` (an IANA name, read with :mod:`zoneinfo`); without
one, in UTC. Upstream uses kube-controller-manager's local zone there, which is UTC in
its images. An unknown name raises :class:`UnknownTimeZoneError` (upstream's
``UnknownTimeZone`` Event, and the CronJob is not scheduled). ``TZ=<zone>`` or
``CRON_TZ=<zone>`` before the fields is refused by the API server for new schedules
(``cannot use TZ or CRON_TZ in schedule``) but is still read, as upstream reads it in
objects written before that rule: the zone given there wins over ``spec.timeZone``.

# Daylight saving time
Times are searched in the zone's wall clock, as robfig's ``Next``: a time that does not
exist that day is skipped (a 2:30 daily schedule in America/New_York does not fire on the
spring-forward day; an hourly one goes from 1:00 to 3:00), and a time that exists twice
fires twice (a 1:30 daily schedule fires at 1:30 EDT and again at 1:30 EST on the
fall-back day). Where midnight does not exist, the day is entered at the first hour
that does. No time is searched further than five years ahead (a schedule for February 29
after 2096-03 finds nothing, 2100 not being a leap year). Where a calendar day does not
exist (Pacific/Apia skipped 2011-12-30) robfig searches forever; this search gives up.

Times come back as UTC instants: Python adds, subtracts and compares datetimes of one
``ZoneInfo`` by their wall clocks, which would take 1:30 EST for 1:30 EDT. Inputs may
be in any zone; they are read as instants.

# Missed times
:func:`most_recent` mirrors ``mostRecentScheduleTime``: from the last schedule time (or
the creation time), or from ``now - startingDeadlineSeconds`` when that is later, it
finds the most recent time the schedule fired at or before ``now`` and how many times it
fired meanwhile, estimated from the gap between the first two times (so an irregular
schedule may be over-counted, and may report times missed but none to run: the search
starts one first gap before the estimate, as upstream's). More than 100 is "too many" (upstream's
``TooManyMissedTimes`` Event). A schedule that does not fire twice raises
:class:`InvalidScheduleError` (the ``InvalidSchedule`` Event).
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

__all__ = [
    "DEFAULT_ZONE",
    "NEXT_SCHEDULE_DELTA",
    "TOO_MANY_MISSED",
    "EverySchedule",
    "InvalidScheduleError",
    "Missed",
    "MostRecent",
    "Schedule",
    "ScheduleError",
    "SpecSchedule",
    "UnknownTimeZoneError",
    "has_legacy_time_zone",
    "load_time_zone",
    "most_recent",
    "next_requeue",
    "parse",
]

DEFAULT_ZONE: tzinfo = UTC
"""The zone of a schedule without ``spec.timeZone`` (upstream: the controller's local zone)."""
NEXT_SCHEDULE_DELTA = timedelta(milliseconds=100)
"""Added to every requeue delay, against clock skew (upstream's ``nextScheduleDelta``)."""
TOO_MANY_MISSED = 100
"""More missed times than this are "too many" (upstream's threshold)."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_SECOND = timedelta(seconds=1)
_STAR = 1 << 63
"""Set in a field's bits when it was written ``*`` or ``?`` (robfig's ``starBit``)."""
_SEARCH_YEARS = 5


class ScheduleError(ValueError):
    """The schedule cannot be parsed (upstream's ``UnparseableSchedule`` Event); the
    message is robfig's."""


class UnknownTimeZoneError(ValueError):
    """``spec.timeZone`` (or a ``TZ=`` prefix) names no zone; the message is Go's
    ``time.LoadLocation`` error."""


class InvalidScheduleError(ValueError):
    """The schedule parses but does not fire twice, e.g. ``59 23 31 2 *`` (upstream's
    ``InvalidSchedule`` Event)."""


# -- time zones -----------------------------------------------------------------------


def load_time_zone(name: str) -> tzinfo:
    """The zone named ``name``, as Go's ``time.LoadLocation``: ``""`` and ``"UTC"`` are
    UTC, ``"Local"`` is :data:`DEFAULT_ZONE` (the API server refuses it in
    ``spec.timeZone``), anything else an IANA name. Raises :class:`UnknownTimeZoneError`
    for a name with ``..`` or a leading slash (``time: invalid location name``) and for
    one that names no zone (``unknown time zone <name>``)."""
    if name in ("", "UTC"):
        return UTC
    if name == "Local":
        return DEFAULT_ZONE
    if ".." in name or name.startswith(("/", "\\")):
        raise UnknownTimeZoneError("time: invalid location name")
    try:
        return ZoneInfo(name)
    except (KeyError, ValueError, OSError) as err:  # not found, malformed, a directory
        raise UnknownTimeZoneError(f"unknown time zone {name}") from err


def has_legacy_time_zone(schedule: str) -> bool:
    """Whether ``schedule`` mentions ``TZ`` (``TZ=`` or ``CRON_TZ=``): upstream then
    parses it as written, ignores ``spec.timeZone`` and records an
    ``UnsupportedSchedule`` Event."""
    return "TZ" in schedule


# -- schedules ------------------------------------------------------------------------


def _require_aware(when: datetime) -> None:
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"a naive datetime has no instant: {when.isoformat()}")


class Schedule(ABC):
    """A parsed schedule."""

    @abstractmethod
    def next(self, after: datetime) -> datetime | None:
        """The first time the schedule fires strictly after ``after`` (an aware datetime),
        on a whole second, in UTC; None when it fires no more within five years (robfig's
        zero time). Raises ValueError for a naive ``after``.

        Results are UTC because Python adds, subtracts and compares two datetimes of the
        same ``ZoneInfo`` by their wall clocks: 1:30 EDT and 1:30 EST would be equal.
        Convert for display only."""


@dataclass(frozen=True)
class EverySchedule(Schedule):
    """``@every <duration>``: fires ``delay`` after the given time, on the whole second
    below (robfig's ``ConstantDelaySchedule``); it has no zone."""

    delay: timedelta

    def next(self, after: datetime) -> datetime | None:
        _require_aware(after)
        return after.astimezone(UTC) + self.delay - timedelta(microseconds=after.microsecond)


@dataclass(frozen=True)
class SpecSchedule(Schedule):
    """Five cron fields as bit sets (bit ``n`` set: value ``n`` matches; bit 63: the field
    was written ``*``), seconds always 0, searched in ``zone``'s wall clock."""

    minute: int
    hour: int
    dom: int
    month: int
    dow: int
    zone: tzinfo
    second: int = 1

    def next(self, after: datetime) -> datetime | None:
        _require_aware(after)
        if self._never():
            return None
        start = (after - _EPOCH) // _SECOND + 1
        try:
            found = _Search(self).run(start)
        except (OverflowError, ValueError):  # beyond the years datetime can hold
            return None
        if found is None:
            return None
        return _EPOCH + timedelta(seconds=found)

    def _never(self) -> bool:
        """Whether some field selects nothing (``,``): robfig searches five years and
        finds nothing; saying so at once spares that search."""
        bits = (self.second, self.minute, self.hour, self.month)
        if any(b & ~_STAR == 0 for b in bits):
            return True
        dom, dow = self.dom & ~_STAR, self.dow & ~_STAR
        if (self.dom | self.dow) & _STAR:
            return dom == 0 or dow == 0
        return dom == 0 and dow == 0

    def day_matches(self, day: int, weekday: int) -> bool:
        """Whether a day (of month; of week with Sunday 0) matches: both day fields must
        when either was written ``*``, else either may (robfig's ``dayMatches``)."""
        dom = self.dom >> day & 1 == 1
        dow = self.dow >> weekday & 1 == 1
        if (self.dom | self.dow) & _STAR:
            return dom and dow
        return dom or dow


@dataclass
class _Wall:
    """An instant's wall clock in a zone."""

    year: int
    month: int
    day: int
    hour: int
    minute: int
    second: int
    weekday: int  # Sunday 0


class _Search:
    """robfig's ``SpecSchedule.Next`` on Unix seconds: fields are matched from the month
    down, each one advanced in the zone's wall clock until it matches, and a carry into
    a larger field starts over from the month. Dates are built as Go's ``time.Date``
    builds them (a wall time that does not exist takes the offset after the transition,
    one that exists twice the first), hours, minutes and seconds are added as elapsed
    time, so a daylight-saving transition skips or repeats wall-clock hours."""

    def __init__(self, spec: SpecSchedule) -> None:
        self.spec = spec
        self.zone = spec.zone

    def offset(self, instant: int) -> int:
        delta = datetime.fromtimestamp(instant, self.zone).utcoffset()
        assert delta is not None
        return delta // _SECOND

    def wall(self, instant: int) -> _Wall:
        w = datetime.fromtimestamp(instant, self.zone)
        return _Wall(w.year, w.month, w.day, w.hour, w.minute, w.second, w.isoweekday() % 7)

    def go_date(self, year: int, month: int, day: int, hour: int, minute: int, second: int) -> int:
        """Go's ``time.Date``: out-of-range months and days carry over; the wall time is
        read with the offset in force at that wall time taken as UTC, unless the result
        falls outside that offset's period, where the offset in force at the result
        is used instead."""
        year += (month - 1) // 12
        month = (month - 1) % 12 + 1
        days = date(year, month, 1).toordinal() - _EPOCH_ORDINAL + day - 1
        local = days * 86400 + hour * 3600 + minute * 60 + second
        return local - self.offset(local - self.offset(local))

    def run(self, t: int) -> int | None:
        spec = self.spec
        added = False  # whether a field has been advanced (the smaller ones then reset)
        w = self.wall(t)
        year_limit = w.year + _SEARCH_YEARS
        while True:  # robfig's WRAP
            w = self.wall(t)
            if w.year > year_limit:
                return None

            wrapped = False
            while spec.month >> w.month & 1 == 0:
                if not added:
                    added = True
                    t = self.go_date(w.year, w.month, 1, 0, 0, 0)
                    w = self.wall(t)
                t = self.go_date(w.year, w.month + 1, w.day, w.hour, w.minute, w.second)
                w = self.wall(t)
                if w.month == 1:
                    wrapped = True
                    break
            if wrapped:
                continue

            while not spec.day_matches(w.day, w.weekday):
                if not added:
                    added = True
                    t = self.go_date(w.year, w.month, w.day, 0, 0, 0)
                    w = self.wall(t)
                before = t
                t = self.go_date(w.year, w.month, w.day + 1, w.hour, w.minute, w.second)
                w = self.wall(t)
                # Midnight may not exist (or exist twice): back to the day's first hour.
                if w.hour != 0:
                    t += (24 - w.hour) * 3600 if w.hour > 12 else -w.hour * 3600
                    w = self.wall(t)
                if t <= before:
                    # The next day does not exist (Pacific/Apia skipped 2011-12-30): robfig
                    # builds the same day again, forever. Give up instead.
                    return None
                if w.day == 1:
                    wrapped = True
                    break
            if wrapped:
                continue

            while spec.hour >> w.hour & 1 == 0:
                if not added:
                    added = True
                    t = self.go_date(w.year, w.month, w.day, w.hour, 0, 0)
                    w = self.wall(t)
                t += 3600
                w = self.wall(t)
                if w.hour == 0:
                    wrapped = True
                    break
            if wrapped:
                continue

            while spec.minute >> w.minute & 1 == 0:
                if not added:
                    added = True
                    t -= t % 60  # Go's Truncate: on elapsed time, not on the wall clock
                t += 60
                w = self.wall(t)
                if w.minute == 0:
                    wrapped = True
                    break
            if wrapped:
                continue

            while spec.second >> w.second & 1 == 0:
                added = True
                t += 1
                w = self.wall(t)
                if w.second == 0:
                    wrapped = True
                    break
            if wrapped:
                continue

            return t


# -- parsing --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Bounds:
    low: int
    high: int
    names: dict[str, int] | None = None


_MINUTES = _Bounds(0, 59)
_HOURS = _Bounds(0, 23)
_DOM = _Bounds(1, 31)
_MONTHS = _Bounds(
    1,
    12,
    {
        name: i + 1
        for i, name in enumerate(
            ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
        )
    },
)
_DOW = _Bounds(
    0, 6, {name: i for i, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
)


def _bits(low: int, high: int, step: int = 1) -> int:
    bits = 0
    for value in range(low, high + 1, step):
        bits |= 1 << value
    return bits


def _all(bounds: _Bounds) -> int:
    return _bits(bounds.low, bounds.high) | _STAR


def _go_quote(text: str) -> str:
    """Go's ``strconv.Quote``, enough for error messages."""
    escapes = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}
    out = []
    for char in text:
        if char in escapes:
            out.append(escapes[char])
        elif not char.isprintable():
            out.append(f"\\x{ord(char):02x}" if ord(char) < 0x80 else f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _go_fields(text: str) -> list[str]:
    """Go's ``strings.Fields``: split on Unicode white space (which, unlike Python's,
    leaves out the separators U+001C to U+001F)."""
    fields: list[str] = []
    current: list[str] = []
    for char in text:
        if char.isspace() and char not in "\x1c\x1d\x1e\x1f":
            if current:
                fields.append("".join(current))
                current = []
        else:
            current.append(char)
    if current:
        fields.append("".join(current))
    return fields


def _go_trim_space(text: str) -> str:
    start, end = 0, len(text)
    while start < end and text[start].isspace() and text[start] not in "\x1c\x1d\x1e\x1f":
        start += 1
    while end > start and text[end - 1].isspace() and text[end - 1] not in "\x1c\x1d\x1e\x1f":
        end -= 1
    return text[start:end]


_INT64_MAX = (1 << 63) - 1


def _atoi(expr: str) -> int:
    """A non-negative decimal (an optional sign, ASCII digits), as robfig's
    ``mustParseInt`` with Go's ``strconv.Atoi``."""
    atoi = f"strconv.Atoi: parsing {_go_quote(expr)}:"
    digits = expr[1:] if expr[:1] in ("+", "-") else expr
    if not digits or not all("0" <= c <= "9" for c in digits):
        raise ScheduleError(f"failed to parse int from {expr}: {atoi} invalid syntax")
    significant = digits.lstrip("0") or "0"
    value = int(significant) if len(significant) <= 20 else 1 << 64  # no huge int() parses
    value = -value if expr[:1] == "-" else value
    if not -_INT64_MAX - 1 <= value <= _INT64_MAX:
        raise ScheduleError(f"failed to parse int from {expr}: {atoi} value out of range")
    if value < 0:
        raise ScheduleError(f"negative number ({value}) not allowed: {expr}")
    return value


def _int_or_name(expr: str, bounds: _Bounds) -> int:
    if bounds.names is not None:
        named = bounds.names.get(expr.lower())
        if named is not None:
            return named
    return _atoi(expr)


def _range(expr: str, bounds: _Bounds) -> int:
    """One list item: ``*``, ``?``, ``N`` or ``N-M``, optionally ``/step`` (robfig's
    ``getRange``)."""
    range_and_step = expr.split("/")
    low_and_high = range_and_step[0].split("-")
    single = len(low_and_high) == 1
    extra = 0
    if low_and_high[0] in ("*", "?"):
        start, end, extra = bounds.low, bounds.high, _STAR
    else:
        start = _int_or_name(low_and_high[0], bounds)
        if len(low_and_high) == 1:
            end = start
        elif len(low_and_high) == 2:
            end = _int_or_name(low_and_high[1], bounds)
        else:
            raise ScheduleError(f"too many hyphens: {expr}")
    if len(range_and_step) == 1:
        step = 1
    elif len(range_and_step) == 2:
        step = _atoi(range_and_step[1])
        if single:
            end = bounds.high
        if step > 1:
            extra = 0
    else:
        raise ScheduleError(f"too many slashes: {expr}")
    if start < bounds.low:
        raise ScheduleError(f"beginning of range ({start}) below minimum ({bounds.low}): {expr}")
    if end > bounds.high:
        raise ScheduleError(f"end of range ({end}) above maximum ({bounds.high}): {expr}")
    if start > end:
        raise ScheduleError(f"beginning of range ({start}) beyond end of range ({end}): {expr}")
    if step == 0:
        raise ScheduleError(f"step of range should be a positive number: {expr}")
    return _bits(start, end, step) | extra


def _field(field: str, bounds: _Bounds) -> int:
    bits = 0
    for item in field.split(","):
        if item:  # Go's FieldsFunc drops empty items
            bits |= _range(item, bounds)
    return bits


_UNITS = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,
    "\u03bcs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}


def _go_duration_ns(text: str) -> int:
    """Go's ``time.ParseDuration``, in nanoseconds; raises ValueError with Go's message."""
    invalid = ValueError(f"time: invalid duration {_go_quote(text)}")
    rest = text
    negative = False
    if rest[:1] in ("-", "+"):
        negative = rest[0] == "-"
        rest = rest[1:]
    if rest == "0":
        return 0
    if not rest:
        raise invalid
    total = 0
    while rest:
        if not (rest[0] == "." or "0" <= rest[0] <= "9"):
            raise invalid
        i = 0
        whole = 0
        while i < len(rest) and "0" <= rest[i] <= "9":
            whole = whole * 10 + ord(rest[i]) - ord("0")
            if whole > 1 << 63:
                raise invalid
            i += 1
        pre = i > 0
        rest = rest[i:]
        fraction, scale, post = 0, 1.0, False
        if rest[:1] == ".":
            rest = rest[1:]
            i = 0
            overflow = False
            while i < len(rest) and "0" <= rest[i] <= "9":
                if not overflow:
                    candidate = fraction * 10 + ord(rest[i]) - ord("0")
                    if fraction > _INT64_MAX // 10 or candidate > 1 << 63:
                        overflow = True
                    else:
                        fraction, scale = candidate, scale * 10
                i += 1
            post = i > 0
            rest = rest[i:]
        if not pre and not post:
            raise invalid
        i = 0
        while i < len(rest) and not (rest[i] == "." or "0" <= rest[i] <= "9"):
            i += 1
        if i == 0:
            raise ValueError(f"time: missing unit in duration {_go_quote(text)}")
        unit_name, rest = rest[:i], rest[i:]
        unit = _UNITS.get(unit_name)
        if unit is None:
            raise ValueError(
                f"time: unknown unit {_go_quote(unit_name)} in duration {_go_quote(text)}"
            )
        if whole > (1 << 63) // unit:
            raise invalid
        value = whole * unit
        if fraction > 0:
            value += int(float(fraction) * (float(unit) / scale))
            if value > 1 << 63:
                raise invalid
        total += value
        if total > 1 << 63:
            raise invalid
    if negative:
        return -total
    if total > _INT64_MAX:
        raise invalid
    return total


def _descriptor(text: str, zone: tzinfo) -> Schedule:
    once = 1  # bit 0: minute 0, hour 0
    first = 1 << 1  # bit 1: the first day, January
    if text in ("@yearly", "@annually"):
        return SpecSchedule(once, once, first, first, _all(_DOW), zone)
    if text == "@monthly":
        return SpecSchedule(once, once, first, _all(_MONTHS), _all(_DOW), zone)
    if text == "@weekly":
        return SpecSchedule(once, once, _all(_DOM), _all(_MONTHS), 1 << 0, zone)
    if text in ("@daily", "@midnight"):
        return SpecSchedule(once, once, _all(_DOM), _all(_MONTHS), _all(_DOW), zone)
    if text == "@hourly":
        return SpecSchedule(once, _all(_HOURS), _all(_DOM), _all(_MONTHS), _all(_DOW), zone)
    every = "@every "
    if text.startswith(every):
        try:
            nanos = _go_duration_ns(text[len(every) :])
        except ValueError as err:
            raise ScheduleError(f"failed to parse duration {text}: {err}") from None
        seconds = max(nanos // 1_000_000_000, 1)
        return EverySchedule(timedelta(seconds=seconds))
    raise ScheduleError(f"unrecognized descriptor: {text}")


def parse(schedule: str, time_zone: str | None = None) -> Schedule:
    """``spec.schedule`` in ``spec.timeZone`` (None: :data:`DEFAULT_ZONE`), as the
    controller reads them: the zone is checked first (:class:`UnknownTimeZoneError`),
    then the schedule parsed as robfig's ``ParseStandard`` parses it, a ``TZ=`` or
    ``CRON_TZ=`` prefix (see :func:`has_legacy_time_zone`) taking the place of
    ``time_zone``. Raises :class:`ScheduleError` with robfig's message."""
    zone = DEFAULT_ZONE if time_zone is None else load_time_zone(time_zone)
    if not schedule:
        raise ScheduleError("empty spec string")
    if schedule.startswith(("TZ=", "CRON_TZ=")):
        space = schedule.find(" ")
        if space < 0:  # robfig slices with -1 and panics; upstream recovers
            raise ScheduleError(
                "invalid schedule format: runtime error: slice bounds out of range [:-1]"
            )
        name = schedule[schedule.index("=") + 1 : space]
        try:
            zone = load_time_zone(name)
        except UnknownTimeZoneError as err:
            raise ScheduleError(f"provided bad location {name}: {err}") from None
        schedule = _go_trim_space(schedule[space:])
    if schedule.startswith("@"):
        return _descriptor(schedule, zone)
    fields = _go_fields(schedule)
    if len(fields) != 5:
        raise ScheduleError(f"expected exactly 5 fields, found {len(fields)}: [{' '.join(fields)}]")
    return SpecSchedule(
        minute=_field(fields[0], _MINUTES),
        hour=_field(fields[1], _HOURS),
        dom=_field(fields[2], _DOM),
        month=_field(fields[3], _MONTHS),
        dow=_field(fields[4], _DOW),
        zone=zone,
    )


# -- missed times and requeues ---------------------------------------------------------


class Missed(enum.Enum):
    """How many times a schedule fired unnoticed (upstream's ``missedSchedulesType``)."""

    NONE = "none"
    """None, or only the most recent one (upstream counts one missed time as none)."""
    FEW = "few"
    MANY = "many"
    """More than :data:`TOO_MANY_MISSED`: upstream's ``TooManyMissedTimes`` Event."""


@dataclass(frozen=True)
class MostRecent:
    """What :func:`most_recent` finds."""

    earliest: datetime
    """Where the search started: the last schedule (or creation) time, or
    ``now - startingDeadlineSeconds`` when later."""
    time: datetime | None
    """The most recent time the schedule fired after ``earliest`` and at or before
    ``now``; None when there is none, or none the estimate below reached."""
    missed: Missed
    count: int
    """Upstream's estimate of the times fired: 0, 1, or the time from the first one to
    ``now`` over the gap between the first two, plus one."""


def most_recent(
    schedule: Schedule,
    earliest: datetime,
    now: datetime,
    starting_deadline_seconds: int | None = None,
) -> MostRecent:
    """Upstream's ``mostRecentScheduleTime``. ``earliest`` is ``status.lastScheduleTime``,
    or the creation time when there is none; ``starting_deadline_seconds``, when given,
    moves it up to ``now`` minus that many seconds (upstream passes it when choosing the
    time to run, not when computing a requeue). Raises :class:`InvalidScheduleError`
    (``time difference between two schedules is less than 1 second``) when the schedule
    does not fire twice after ``earliest`` (or does not fire once, before ``now``)."""
    _require_aware(earliest)
    _require_aware(now)
    earliest, now = earliest.astimezone(UTC), now.astimezone(UTC)  # instants, not wall clocks
    if starting_deadline_seconds is not None:
        deadline = now - timedelta(seconds=starting_deadline_seconds)
        earliest = max(earliest, deadline)
    t1 = schedule.next(earliest)
    if t1 is not None and now < t1:
        return MostRecent(earliest, None, Missed.NONE, 0)
    t2 = None if t1 is None else schedule.next(t1)
    if t1 is not None and t2 is not None and now < t2:
        return MostRecent(earliest, t1, Missed.NONE, 1)
    gap = 0 if t1 is None or t2 is None else _round_seconds(t2 - t1)
    if gap < 1 or t1 is None:
        raise InvalidScheduleError("time difference between two schedules is less than 1 second")
    elapsed = (now - t1) // _SECOND
    count = elapsed // gap + 1
    # Start one gap before the estimated most recent time and let the schedule walk.
    time: datetime | None = None
    t = schedule.next(t1 + timedelta(seconds=(count - 2) * gap))
    while t is not None and t <= now:
        time = t
        t = schedule.next(t)
    missed = Missed.MANY if count > TOO_MANY_MISSED else Missed.FEW
    return MostRecent(earliest, time, missed, count)


def _round_seconds(delta: timedelta) -> int:
    """Go's ``Duration.Round(time.Second)`` in whole seconds: halves away from zero."""
    micros = delta // timedelta(microseconds=1)
    sign = -1 if micros < 0 else 1
    return sign * ((abs(micros) + 500_000) // 1_000_000)


def next_requeue(schedule: Schedule, earliest: datetime, now: datetime) -> float | None:
    """Seconds until the CronJob should be synced again: the schedule's next time after
    the most recent one (or after ``earliest`` when none was missed, or after ``now``
    when some were missed but none found, or the schedule is invalid), plus
    :data:`NEXT_SCHEDULE_DELTA` (upstream's ``nextScheduleTimeDuration``, without the
    starting deadline). None when the schedule fires no more (upstream would requeue
    at once); never negative."""
    now = now.astimezone(UTC)
    try:
        found = most_recent(schedule, earliest, now)
    except InvalidScheduleError:
        base = now
    else:
        if found.time is not None:
            base = found.time
        elif found.missed is Missed.NONE:
            base = found.earliest
        else:
            base = now
    upcoming = schedule.next(base)
    if upcoming is None:
        return None
    return max((upcoming + NEXT_SCHEDULE_DELTA - now).total_seconds(), 0.0)
