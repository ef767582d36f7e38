"""CronJob schedules (steward.controllers.cronjob.schedule): parsing, the times a schedule
fires (time zones, daylight saving, leap years), ``@every``, the most recent missed time
and the requeue delay.

Expectations follow robfig/cron v3.0.1's spec_test.go and parser_test.go and upstream's
pkg/controller/cronjob/utils_test.go (the same situations, our own dates); the DST and
midnight-less cases were checked against robfig's ``Next`` itself.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steward.controllers.cronjob.schedule import (
    EverySchedule,
    InvalidScheduleError,
    Missed,
    ScheduleError,
    SpecSchedule,
    UnknownTimeZoneError,
    has_legacy_time_zone,
    load_time_zone,
    most_recent,
    next_requeue,
    parse,
)

pytestmark = pytest.mark.unit

NY = ZoneInfo("America/New_York")
SAO_PAULO = ZoneInfo("America/Sao_Paulo")


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, micro: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)


def ny(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, *, fold: int = 0
) -> datetime:
    """A New York wall time as a UTC instant (``fold=1``: the second 1:xx of a fall-back
    day). Python never finds a fold=1 datetime equal to one of another zone."""
    return datetime(year, month, day, hour, minute, tzinfo=NY, fold=fold).astimezone(UTC)


def fires(schedule: str, when: datetime) -> bool:
    return parse(schedule).next(when - timedelta(seconds=1)) == when


# -- which times a schedule selects ------------------------------------------------------

# 2026-12-06 is a Sunday, 2026-12-07 a Monday.
ACTIVATION = [
    # steps: */N from the minimum, N/step from N to the maximum
    ("0/15 * * * *", utc(2026, 12, 7, 15, 45), True),
    ("0/15 * * * *", utc(2026, 12, 7, 15, 40), False),
    ("5/15 * * * *", utc(2026, 12, 7, 15, 50), True),
    ("5/15 * * * *", utc(2026, 12, 7, 15, 45), False),
    ("*/25 * * * *", utc(2026, 12, 7, 15, 50), True),
    ("10-40/15 * * * *", utc(2026, 12, 7, 15, 40), True),
    ("10-40/15 * * * *", utc(2026, 12, 7, 15, 55), False),
    # lists, ranges, and an empty list item dropped
    ("1,,31 * * * *", utc(2026, 12, 7, 15, 31), True),
    ("0 9-17 * * *", utc(2026, 12, 7, 17, 0), True),
    ("0 9-17 * * *", utc(2026, 12, 7, 18, 0), False),
    # names, any case; ? is *
    ("0 0 * Dec ?", utc(2026, 12, 7, 0, 0), True),
    ("0 0 * JAN ?", utc(2026, 12, 7, 0, 0), False),
    ("0 0 ? * mon-FRI", utc(2026, 12, 7, 0, 0), True),
    ("0 0 ? * sat,sun", utc(2026, 12, 7, 0, 0), False),
    # Sunday is 0 (or sun)
    ("0 0 * * 0", utc(2026, 12, 6, 0, 0), True),
    ("0 0 * * sun", utc(2026, 12, 6, 0, 0), True),
    # robfig reads "*-5" as "*": nothing after the star is read
    ("*-5 * * * *", utc(2026, 12, 7, 15, 44), True),
    # descriptors
    ("@hourly", utc(2026, 12, 7, 15, 0), True),
    ("@hourly", utc(2026, 12, 7, 15, 4), False),
    ("@daily", utc(2026, 12, 7, 0, 0), True),
    ("@midnight", utc(2026, 12, 7, 1, 0), False),
    ("@weekly", utc(2026, 12, 6, 0, 0), True),
    ("@weekly", utc(2026, 12, 7, 0, 0), False),
    ("@monthly", utc(2026, 12, 1, 0, 0), True),
    ("@monthly", utc(2026, 12, 7, 0, 0), False),
    ("@yearly", utc(2027, 1, 1, 0, 0), True),
    ("@annually", utc(2026, 12, 1, 0, 0), False),
    # both day fields restricted: either matches
    ("0 0 1,15 * sun", utc(2026, 12, 6, 0, 0), True),  # a Sunday, not the 1st or 15th
    ("0 0 1,15 * sun", utc(2026, 12, 15, 0, 0), True),  # the 15th, a Tuesday
    ("0 0 1,15 * sun", utc(2026, 12, 7, 0, 0), False),
    ("0 0 */10 * sun", utc(2026, 12, 6, 0, 0), True),  # robfig issue 70: */10 is no star
    ("0 0 1-31 * mon", utc(2026, 12, 6, 0, 0), True),  # 1-31 is no star either
    # one day field written * (or ?, or */1): both must match
    ("0 0 * * mon", utc(2026, 12, 6, 0, 0), False),
    ("0 0 1,15 * *", utc(2026, 12, 7, 0, 0), False),
    ("0 0 1,15 * *", utc(2026, 12, 15, 0, 0), True),
    ("0 0 */1 * mon", utc(2026, 12, 6, 0, 0), False),
    ("0 0 1,15 * ?", utc(2026, 12, 6, 0, 0), False),
]


@pytest.mark.parametrize(("schedule", "when", "expected"), ACTIVATION)
def test_activation(schedule: str, when: datetime, expected: bool) -> None:
    """Breaks when a field syntax selects the wrong values: steps from N, ranges with
    steps, lists, month and weekday names or their case, 0 as Sunday, a descriptor's
    times, or the day-of-month/day-of-week rule (OR when both are restricted, AND when
    either is written *, ? or */1)."""
    assert fires(schedule, when) is expected


# -- the next time ------------------------------------------------------------------------

NEXT = [
    # (schedule, time zone, after, expected next or None)
    # wraps: hour, day, month, year; a whole minute after an exact hit
    ("0/15 * * * *", None, utc(2026, 7, 9, 14, 45), utc(2026, 7, 9, 15, 0)),
    ("0/15 * * * *", None, utc(2026, 7, 9, 14, 59, 59), utc(2026, 7, 9, 15, 0)),
    ("20-35/15 * * * *", None, utc(2026, 7, 9, 15, 45), utc(2026, 7, 9, 16, 20)),
    ("20-35/15 * * * *", None, utc(2026, 7, 9, 23, 45), utc(2026, 7, 10, 0, 20)),
    ("20-35/15 1/2 */2 * *", None, utc(2026, 7, 9, 23, 35), utc(2026, 7, 11, 1, 20)),
    ("0 0 9 Apr-Oct ?", None, utc(2026, 7, 9, 23, 35), utc(2026, 8, 9)),
    ("0 0 */5 Apr,Aug,Oct mon", None, utc(2026, 7, 9, 23, 35), utc(2026, 8, 1)),
    ("0 0 * Feb mon", None, utc(2026, 7, 9, 23, 35), utc(2027, 2, 1)),
    ("0 0 * Feb mon/2", None, utc(2026, 7, 9, 23, 35), utc(2027, 2, 1)),
    ("* * * * *", None, utc(2026, 12, 31, 23, 59, 45), utc(2027, 1, 1)),
    # strictly after, on a whole minute, whatever the fraction of a second
    ("* * * * *", None, utc(2026, 7, 9, 15, 0), utc(2026, 7, 9, 15, 1)),
    ("* * * * *", None, utc(2026, 7, 9, 14, 59, 59, 999999), utc(2026, 7, 9, 15, 0)),
    # leap years: Feb 29 is found up to five years ahead; 2100 is no leap year, and
    # 2104 is beyond the search from 2097
    ("0 0 29 2 *", None, utc(2024, 3, 1), utc(2028, 2, 29)),
    ("0 0 29 2 *", None, utc(2028, 2, 28, 12), utc(2028, 2, 29)),
    ("0 0 29 2 *", None, utc(2097, 1, 1), None),
    ("0 0 29 feb mon", None, utc(2026, 12, 7), utc(2027, 2, 1)),  # OR: any Monday in Feb
    # never: a day no month has, a field that selects nothing
    ("0 0 30 2 *", None, utc(2026, 7, 9), None),
    ("0 0 31 apr *", None, utc(2026, 7, 9), None),
    ("0 0 , * *", None, utc(2026, 7, 9), None),
    # spec.timeZone: the wall clock of that zone, whatever zone "after" is given in
    ("0 9 * * *", "Asia/Kolkata", utc(2026, 7, 9, 4), utc(2026, 7, 10, 3, 30)),
    ("0 9 * * *", "Asia/Kolkata", datetime(2026, 7, 8, 23, tzinfo=NY), utc(2026, 7, 9, 3, 30)),
    # TZ= / CRON_TZ= in the schedule (objects older than the API's refusal) win
    ("TZ=Asia/Kolkata 0 9 * * *", None, utc(2026, 7, 9, 4), utc(2026, 7, 10, 3, 30)),
    ("CRON_TZ=Asia/Kolkata 0 9 * * *", "Europe/Paris", utc(2026, 7, 9, 4), utc(2026, 7, 10, 3, 30)),
    ("TZ=America/New_York @daily", None, utc(2026, 7, 9, 12), utc(2026, 7, 10, 4)),
    # spring forward in New York (2026-03-08, 2:00 EST -> 3:00 EDT): 2:30 does not exist
    # that day and is skipped; an hourly schedule goes from 1:00 to 3:00
    ("30 2 * * *", "America/New_York", ny(2026, 3, 8, 0), ny(2026, 3, 9, 2, 30)),
    ("30 2 8 mar *", "America/New_York", ny(2026, 3, 1), ny(2027, 3, 8, 2, 30)),
    ("0 * * * *", "America/New_York", ny(2026, 3, 8, 0), ny(2026, 3, 8, 1)),
    ("0 * * * *", "America/New_York", ny(2026, 3, 8, 1), ny(2026, 3, 8, 3)),
    ("0 1 * * *", "America/New_York", ny(2026, 3, 8, 1), ny(2026, 3, 9, 1)),
    ("0 3 * * *", "America/New_York", ny(2026, 3, 8, 0), ny(2026, 3, 8, 3)),
    # fall back (2026-11-01, 2:00 EDT -> 1:00 EST): 1:xx happens twice and fires twice
    ("30 1 * * *", "America/New_York", ny(2026, 11, 1, 0), ny(2026, 11, 1, 1, 30)),
    ("30 1 * * *", "America/New_York", ny(2026, 11, 1, 1, 30), ny(2026, 11, 1, 1, 30, fold=1)),
    ("30 1 * * *", "America/New_York", ny(2026, 11, 1, 1, 45), ny(2026, 11, 1, 1, 30, fold=1)),
    ("30 1 * * *", "America/New_York", ny(2026, 11, 1, 1, 30, fold=1), ny(2026, 11, 2, 1, 30)),
    ("0 * * * *", "America/New_York", ny(2026, 11, 1, 1), ny(2026, 11, 1, 1, fold=1)),
    ("0 * * * *", "America/New_York", ny(2026, 11, 1, 1, fold=1), ny(2026, 11, 1, 2)),
    ("0 2 * * *", "America/New_York", ny(2026, 11, 1, 0), ny(2026, 11, 1, 2)),
    ("0 3 3 * *", "America/New_York", ny(2026, 11, 1, 0), ny(2026, 11, 3, 3)),
    # midnight does not exist (Sao Paulo, 2018-11-04 0:00 -03 -> 1:00 -02): the day is
    # entered at 1:00 (robfig issue 157), and a midnight schedule skips it
    ("0 9 10 * *", "America/Sao_Paulo", utc(2018, 10, 17, 9), utc(2018, 11, 10, 11)),
    ("0 9 22 * *", "America/Sao_Paulo", utc(2018, 2, 14, 10), utc(2018, 2, 22, 12)),
    ("@daily", "America/Sao_Paulo", utc(2018, 11, 3, 15), utc(2018, 11, 5, 2)),
    ("0 0 4 11 *", "America/Sao_Paulo", utc(2018, 11, 1, 9), utc(2019, 11, 4, 3)),
    # a calendar day that does not exist (Apia, 2011-12-30): robfig loops forever
    ("@monthly", "Pacific/Apia", utc(2011, 12, 29, 9), None),
    ("0 12 * * *", "Pacific/Apia", utc(2011, 12, 29, 23), utc(2011, 12, 30, 22)),
]


@pytest.mark.parametrize(("schedule", "zone", "after", "expected"), NEXT)
def test_next(schedule: str, zone: str | None, after: datetime, expected: datetime | None) -> None:
    """Breaks when the search does not carry a field into the next (hour, day, month,
    year), misses a leap day or searches past five years, fires on a day no month has,
    ignores spec.timeZone or a TZ= prefix, or walks the wall clock differently from
    robfig across daylight-saving transitions (a skipped 2:30 that fires, a repeated
    1:30 that fires once, a midnight-less day not entered at 1:00), or hangs on a
    missing calendar day."""
    found = parse(schedule, zone).next(after)
    assert found == expected
    if found is not None:
        assert found.tzinfo is UTC


def test_results_are_utc_instants() -> None:
    """Breaks when results come back in the schedule's ZoneInfo: Python then compares the
    two 1:30s of a fall-back day as equal, and a controller would take the second for an
    already-run first."""
    schedule = parse("30 1 * * *", "America/New_York")
    first = schedule.next(ny(2026, 11, 1, 0))
    assert first is not None
    second = schedule.next(first)
    assert second is not None
    assert second - first == timedelta(hours=1)
    assert second > first


def test_naive_datetimes_are_refused() -> None:
    """Breaks when a naive datetime is read as some zone's time instead of refused."""
    with pytest.raises(ValueError, match="naive"):
        parse("* * * * *").next(datetime(2026, 7, 9))
    with pytest.raises(ValueError, match="naive"):
        parse("@every 1h").next(datetime(2026, 7, 9))
    with pytest.raises(ValueError, match="naive"):
        most_recent(parse("* * * * *"), utc(2026, 7, 9), datetime(2026, 7, 10))


# -- @every -------------------------------------------------------------------------------

EVERY = [
    ("@every 1h", timedelta(hours=1)),
    ("@every 1h30m", timedelta(minutes=90)),
    ("@every 90s", timedelta(seconds=90)),
    ("@every 1.5h", timedelta(minutes=90)),
    ("@every .5m", timedelta(seconds=30)),
    ("@every 1.s", timedelta(seconds=1)),
    ("@every 2.7s", timedelta(seconds=2)),  # fractions of a second dropped
    ("@every 1500ms", timedelta(seconds=1)),
    ("@every 500ms", timedelta(seconds=1)),  # under a second: one second
    ("@every 0", timedelta(seconds=1)),
    ("@every -1h", timedelta(seconds=1)),  # negative: one second, as robfig
    ("@every 2562047h", timedelta(hours=2562047)),  # the longest Go duration in hours
    ("@every 1\u00b5s", timedelta(seconds=1)),
    ("TZ=Asia/Kolkata @every 2h", timedelta(hours=2)),
]


@pytest.mark.parametrize(("schedule", "delay"), EVERY)
def test_every_delay(schedule: str, delay: timedelta) -> None:
    """Breaks when a Go duration is read wrong (units, fractions, signs) or robfig's
    rounding (at least a second, whole seconds) is not applied."""
    parsed = parse(schedule)
    assert isinstance(parsed, EverySchedule)
    assert parsed.delay == delay


def test_every_counts_elapsed_time_from_the_whole_second() -> None:
    """Breaks when @every adds to the wall clock (the fall-back hour would vanish) or keeps
    the fraction of a second of the time it starts from."""
    every = parse("@every 1h", "America/New_York")
    start = ny(2026, 11, 1, 0, 30)
    assert every.next(start) == utc(2026, 11, 1, 5, 30)
    zoned = datetime(2026, 11, 1, 1, 30, tzinfo=NY)  # 1:30 EDT, as a caller might pass it
    assert every.next(zoned) == ny(2026, 11, 1, 1, 30, fold=1)
    assert every.next(utc(2026, 7, 9, 10, 0, 0, 750000)) == utc(2026, 7, 9, 11)


# -- refused schedules ---------------------------------------------------------------------

REFUSED = [
    ("", "empty spec string"),
    ("xyz", "expected exactly 5 fields, found 1: [xyz]"),
    ("* * * *", "expected exactly 5 fields, found 4: [* * * *]"),
    ("0 * * * * *", "expected exactly 5 fields, found 6"),  # no seconds field
    (" @daily", "expected exactly 5 fields, found 1: [@daily]"),
    ("60 0 * * *", "end of range (60) above maximum (59): 60"),
    ("0 24 * * *", "end of range (24) above maximum (23): 24"),
    ("0 0 0 * *", "beginning of range (0) below minimum (1): 0"),
    ("0 0 32 * *", "end of range (32) above maximum (31): 32"),
    ("0 0 * 13 *", "end of range (13) above maximum (12): 13"),
    ("0 0 * 0 *", "beginning of range (0) below minimum (1): 0"),
    ("0 0 * * 7", "end of range (7) above maximum (6): 7"),  # Sunday is 0 only
    ("0 0 * * XYZ", 'failed to parse int from XYZ: strconv.Atoi: parsing "XYZ": invalid syntax'),
    ("0 0 * january *", "failed to parse int from january"),
    ("0 0 * * monday", "failed to parse int from monday"),
    ("* 5 j * *", "failed to parse int from j"),
    ("5--5 * * * *", "too many hyphens: 5--5"),
    ("jan-x * * * *", "failed to parse int from jan"),  # names only in their own field
    ("*//2 * * * *", "too many slashes: *//2"),
    ("*/0 * * * *", "step of range should be a positive number: */0"),
    ("*/-12 * * * *", "negative number (-12) not allowed: -12"),
    ("-1 * * * *", 'parsing "": invalid syntax'),
    ("5/ * * * *", 'parsing "": invalid syntax'),
    ("30-10 * * * *", "beginning of range (30) beyond end of range (10): 30-10"),
    ("99999999999999999999 * * * *", "value out of range"),
    ("@unrecognized", "unrecognized descriptor: @unrecognized"),
    ("@daily ", "unrecognized descriptor: @daily "),
    ("@every Xm", 'failed to parse duration @every Xm: time: invalid duration "Xm"'),
    ("@every 1d", 'time: unknown unit "d" in duration "1d"'),
    ("@every 10", 'time: missing unit in duration "10"'),
    ("@every ", 'time: invalid duration ""'),
    ("@every 2562048h", 'time: invalid duration "2562048h"'),
    (
        "TZ=Mars/Olympus 0 0 * * *",
        "provided bad location Mars/Olympus: unknown time zone Mars/Olympus",
    ),
    ("TZ=UTC", "invalid schedule format"),
    ("TZ=UTC ", "expected exactly 5 fields, found 0: []"),
]


@pytest.mark.parametrize(("schedule", "message"), REFUSED)
def test_refused(schedule: str, message: str) -> None:
    """Breaks when a schedule robfig refuses is accepted (out-of-range values, 7 for
    Sunday, full names, bad steps and ranges, six fields, descriptors with stray spaces,
    bad durations, a bad TZ= zone), or when the message (upstream's Event text) is not
    robfig's."""
    with pytest.raises(ScheduleError) as refused:
        parse(schedule)
    assert message in str(refused.value)


ACCEPTED_ODDITIES = ["+5 * * * *", "05 * * * *", "0 0 1,,2 * *", "0 0 , * *", "?-3 * * * *"]


@pytest.mark.parametrize("schedule", ACCEPTED_ODDITIES)
def test_accepted_oddities(schedule: str) -> None:
    """Breaks when a schedule the API server accepts (robfig's grammar: a sign, leading
    zeros, empty list items, a star followed by anything) is refused: the controller
    would then refuse CronJobs the API server stored."""
    assert isinstance(parse(schedule), SpecSchedule)


# -- time zones ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "key"),
    [("", "UTC"), ("UTC", "UTC"), ("Local", "UTC"), ("America/New_York", "America/New_York")],
)
def test_time_zone_loads(name: str, key: str) -> None:
    """Breaks when Go's special names ("" and "UTC"; "Local", our UTC) or an IANA name do
    not load."""
    zone = load_time_zone(name)
    assert (zone is UTC) if key == "UTC" else (zone == ZoneInfo(key))


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("Mars/Olympus", "unknown time zone Mars/Olympus"),
        ("America", "unknown time zone America"),  # a directory of zones
        ("utc", "unknown time zone utc"),
        ("../etc/passwd", "time: invalid location name"),
        ("/etc/localtime", "time: invalid location name"),
    ],
)
def test_unknown_time_zone(name: str, message: str) -> None:
    """Breaks when an unknown or unsafe zone name loads, or surfaces as another exception
    than UnknownTimeZoneError (the controller's UnknownTimeZone Event), or as a schedule
    error (which would be reported as UnparseableSchedule instead)."""
    with pytest.raises(UnknownTimeZoneError, match=message):
        load_time_zone(name)
    with pytest.raises(UnknownTimeZoneError) as raised:
        parse("not even a schedule", name)  # the zone is checked first, as upstream
    assert not isinstance(raised.value, ScheduleError)


def test_legacy_time_zone_detection() -> None:
    """Breaks when a TZ= or CRON_TZ= schedule is not recognised (upstream's
    UnsupportedSchedule Event) or a plain one is."""
    assert has_legacy_time_zone("TZ=UTC 0 0 * * *")
    assert has_legacy_time_zone("CRON_TZ=UTC 0 0 * * *")
    assert not has_legacy_time_zone("0 0 * * *")


# -- missed times ----------------------------------------------------------------------------

THU = utc(2026, 12, 3, 10)  # a Thursday, on the hour

MOST_RECENT = [
    # (schedule, earliest, now, startingDeadlineSeconds, time, missed, count)
    ("0 * * * *", THU, THU + timedelta(seconds=30), None, None, Missed.NONE, 0),
    ("0 * * * *", THU, THU + timedelta(minutes=61), None, THU + timedelta(hours=1), Missed.NONE, 1),
    # 5 missed: counted from the first, at 11:00
    (
        "0 * * * *",
        THU + timedelta(seconds=10),
        THU + timedelta(minutes=301),
        None,
        THU + timedelta(hours=5),
        Missed.FEW,
        5,
    ),
    # irregular: 6:30, 10:30 and 14:30 on weekdays
    (
        "30 6-16/4 * * 1-5",
        THU + timedelta(minutes=30),
        THU + timedelta(hours=24, minutes=31),
        None,
        THU + timedelta(hours=24, minutes=30),
        Missed.FEW,
        2,
    ),
    (
        "30 6-16/4 * * 1-5",
        THU + timedelta(minutes=30),
        THU + timedelta(hours=96, minutes=31),  # Monday, after the weekend
        None,
        THU + timedelta(hours=96, minutes=30),
        Missed.FEW,
        6,
    ),
    # upstream's estimate from the first gap (1 h) overshoots Friday's 12:30: times were
    # missed, but none is found to run
    (
        "30 10,11,12 * * 1-5",
        THU + timedelta(minutes=30),
        THU + timedelta(hours=30, minutes=30),
        None,
        None,
        Missed.FEW,
        30,
    ),
    # @every from the last schedule time, a week of hours: too many
    (
        "@every 1h",
        THU + timedelta(minutes=1),
        THU + timedelta(days=7),
        None,
        THU + timedelta(days=6, hours=23, minutes=1),
        Missed.MANY,
        167,
    ),
    # the threshold: 100 missed is "few", 101 "many"
    (
        "* * * * *",
        THU,
        THU + timedelta(minutes=100),
        None,
        THU + timedelta(minutes=100),
        Missed.FEW,
        100,
    ),
    (
        "* * * * *",
        THU,
        THU + timedelta(minutes=101),
        None,
        THU + timedelta(minutes=101),
        Missed.MANY,
        101,
    ),
    # startingDeadlineSeconds: ten days of minutes, cut to the last 300 s
    (
        "* * * * *",
        THU,
        THU + timedelta(days=10, seconds=30),
        300,
        THU + timedelta(days=10),
        Missed.FEW,
        5,
    ),
    (
        "* * * * *",
        THU,
        THU + timedelta(days=10, seconds=30),
        None,
        THU + timedelta(days=10),
        Missed.MANY,
        14400,
    ),
    # a deadline that starts before the last schedule time changes nothing
    (
        "*/5 * * * *",
        THU + timedelta(minutes=30),
        THU + timedelta(minutes=31),
        60,
        None,
        Missed.NONE,
        0,
    ),
    (
        "*/5 * * * *",
        THU + timedelta(minutes=30),
        THU + timedelta(minutes=36),
        600,
        THU + timedelta(minutes=35),
        Missed.NONE,
        1,
    ),
    # the deadline can hide the only missed time
    (
        "*/5 * * * *",
        THU + timedelta(minutes=30),
        THU + timedelta(minutes=36),
        30,
        None,
        Missed.NONE,
        0,
    ),
]


@pytest.mark.parametrize(
    ("schedule", "earliest", "now", "deadline", "time", "missed", "count"), MOST_RECENT
)
def test_most_recent(
    schedule: str,
    earliest: datetime,
    now: datetime,
    deadline: int | None,
    time: datetime | None,
    missed: Missed,
    count: int,
) -> None:
    """Breaks when the most recent missed time is wrong for 0, 1, a few or over a hundred
    missed times, when one missed time is counted as missed (upstream says none), when
    the threshold is 100 inclusive, when @every does not count from the last schedule
    time, when the estimate differs from upstream's (first gap, one gap back), or when
    startingDeadlineSeconds does not move the start of the search."""
    found = most_recent(parse(schedule), earliest, now, deadline)
    assert (found.time, found.missed, found.count) == (time, missed, count)
    expected_earliest = earliest
    if deadline is not None:
        expected_earliest = max(earliest, now - timedelta(seconds=deadline))
    assert found.earliest == expected_earliest


def test_most_recent_across_fall_back() -> None:
    """Breaks when the search subtracts or compares zoned wall clocks instead of instants:
    1:30 EDT and 1:30 EST are an hour apart, and at 1:45 EST the second one is due."""
    schedule = parse("30 1 * * *", "America/New_York")
    now = datetime(2026, 11, 1, 1, 45, fold=1, tzinfo=NY)  # zoned, as a caller might pass it
    found = most_recent(schedule, datetime(2026, 11, 1, tzinfo=NY), now)
    assert found.time == ny(2026, 11, 1, 1, 30, fold=1)
    assert (found.missed, found.count) == (Missed.FEW, 2)

    # the deadline is elapsed time too: 30 minutes before 1:10 EST is 1:40 EDT
    every5 = parse("*/5 * * * *", "America/New_York")
    now = datetime(2026, 11, 1, 1, 10, fold=1, tzinfo=NY)
    found = most_recent(every5, datetime(2026, 11, 1, tzinfo=NY), now, 1800)
    assert found.earliest == ny(2026, 11, 1, 1, 40)
    assert (found.time, found.count) == (ny(2026, 11, 1, 1, 10, fold=1), 6)


@pytest.mark.parametrize("schedule", ["59 23 31 2 *", "0 0 , * *"])
def test_most_recent_invalid(schedule: str) -> None:
    """Breaks when a schedule that never fires yields a time or a silent None instead of
    upstream's InvalidSchedule error."""
    with pytest.raises(InvalidScheduleError, match="less than 1 second"):
        most_recent(parse(schedule), THU, THU + timedelta(hours=1))


# -- requeues -------------------------------------------------------------------------------

REQUEUE = [
    # (schedule, earliest, now, seconds to the next sync)
    # missed Friday 10:30: next 14:30
    (
        "30 6-16/4 * * 1-5",
        THU + timedelta(minutes=30),
        THU + timedelta(hours=24, minutes=31),
        3 * 3600 + 59 * 60,
    ),
    # missed, none found: next after now, Monday 10:30
    (
        "30 10,11,12 * * 1-5",
        THU + timedelta(minutes=30),
        THU + timedelta(hours=30, minutes=30),
        66 * 3600,
    ),
    # weekly, two missed: next after the most recent (two Thursdays on)
    (
        "0 12 * * 4",
        THU + timedelta(hours=2),
        THU + timedelta(days=19, hours=1, minutes=30),
        48 * 3600 + 30 * 60,
    ),
    # none missed: next after the creation
    ("0 12 * * 5", THU, THU + timedelta(hours=6), 20 * 3600),
    # lastScheduleTime ahead of now (clock skew): the schedule's time after it
    ("0 * * * *", THU + timedelta(hours=5), THU, 6 * 3600),
    # never fires again: no requeue
    ("59 23 31 2 *", THU, THU + timedelta(hours=1), None),
]


@pytest.mark.parametrize(("schedule", "earliest", "now", "seconds"), REQUEUE)
def test_next_requeue(
    schedule: str, earliest: datetime, now: datetime, seconds: int | None
) -> None:
    """Breaks when the requeue is not aimed at the schedule's next time after the most
    recent one (or after now when times were missed but none found, or after the earliest
    when none were missed), when the 100 ms delta is missing, or when a schedule that
    never fires yields a delay."""
    delay = next_requeue(parse(schedule), earliest, now)
    if seconds is None:
        assert delay is None
    else:
        assert delay == pytest.approx(seconds + 0.1)  # upstream's nextScheduleDelta


# -- against a plain search ---------------------------------------------------------------------


def _pick(values: list[int]) -> st.SearchStrategy[list[int]]:
    return st.lists(st.sampled_from(values), min_size=1, max_size=3, unique=True).map(sorted)


@st.composite
def _spec(draw: st.DrawFn) -> tuple[str, list[list[int] | None]]:
    sets: list[list[int] | None] = [
        draw(_pick(list(range(60)))),
        draw(_pick(list(range(24)))),
        draw(st.none() | _pick(list(range(1, 32)))),
        draw(st.none() | _pick(list(range(1, 13)))),
        draw(st.none() | _pick(list(range(7)))),
    ]
    text = " ".join("*" if s is None else ",".join(map(str, s)) for s in sets)
    return text, sets


def _plain_next(sets: list[list[int] | None], after: datetime) -> datetime | None:
    """The first matching minute after ``after`` in UTC, day by day over five years."""
    minutes, hours, doms, months, dows = sets
    assert minutes is not None and hours is not None
    day = after.replace(hour=0, minute=0, second=0, microsecond=0)
    for _ in range(5 * 366):
        dom_ok = doms is None or day.day in doms
        dow_ok = dows is None or day.isoweekday() % 7 in dows
        day_ok = (dom_ok and dow_ok) if doms is None or dows is None else (dom_ok or dow_ok)
        if day_ok and (months is None or day.month in months):
            for hour in hours:
                for minute in minutes:
                    when = day.replace(hour=hour, minute=minute)
                    if when > after:
                        return when
        day += timedelta(days=1)
    return None


@settings(max_examples=150, deadline=None, database=None)
@given(
    spec=_spec(), after=st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2090, 1, 1))
)
def test_next_agrees_with_a_plain_search(
    spec: tuple[str, list[list[int] | None]], after: datetime
) -> None:
    """Breaks when the field-by-field walk (resets, carries, wraps) skips or invents a
    time that a plain day-by-day search over the same fields finds, in UTC."""
    text, sets = spec
    after = after.replace(tzinfo=UTC)
    expected = _plain_next(sets, after)
    found = parse(text).next(after)
    # robfig gives up after the end of the year five years on; the plain search after
    # 5 * 366 days: each may find a time the other does not look for
    if found is None:
        assert expected is None or expected.year > after.year + 5
    elif expected is None:
        assert found >= after + timedelta(days=5 * 366 - 1)
    else:
        assert found == expected
