"""Maintenance windows: the DST matrix, leap days, year ends, allow/deny/freeze precedence, open
time, the reasons people read, and check()'s errors. Every clock is an epoch float built here
from explicit wall-clock times; no expected value comes from the module under test."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitops_gpu.fleet import windows
from gitops_gpu.fleet.windows import (
    Freeze,
    Recurrence,
    WindowError,
    Windows,
    WindowState,
    check,
    describe_instant,
    never_opens,
    next_opening,
    open_seconds,
    state,
)

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
M = 60.0
H = 3600.0
D = 86400.0


def utc(y: int, mo: int, d: int, h: int = 0, mi: int = 0) -> float:
    return datetime(y, mo, d, h, mi, tzinfo=UTC).timestamp()


def local(zone: ZoneInfo, y: int, mo: int, d: int, h: int = 0, mi: int = 0) -> float:
    """An unambiguous, existing wall-clock time (tests never pass a DST-edge time here)."""
    return datetime(y, mo, d, h, mi, tzinfo=zone).timestamp()


def wall(ts: float, zone: ZoneInfo) -> str:
    return datetime.fromtimestamp(ts, zone).strftime("%Y-%m-%d %H:%M %Z")


def stage(
    tz: str = "UTC",
    allow: tuple[tuple[str, float], ...] = (),
    deny: tuple[tuple[str, float], ...] = (),
    freezes: tuple[Freeze, ...] = (),
) -> Windows:
    w = Windows(
        tz,
        tuple(Recurrence(s, d) for s, d in allow),
        tuple(Recurrence(s, d) for s, d in deny),
        freezes,
    )
    check(w)
    return w


# --- the DST matrix ---------------------------------------------------------------------------

# (case, zone, schedule, duration, now, expected open, expected close, expected wall clocks)
# Berlin: 2026-03-29 02:00 CET -> 03:00 CEST; 2026-10-25 03:00 CEST -> 02:00 CET.
# New York: 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT -> 01:00 EST.
DST_MATRIX = [
    (
        "berlin-spring-skipped-start",
        BERLIN,
        ("30 2 * * *", "RRULE:FREQ=DAILY;BYHOUR=2;BYMINUTE=30"),
        1 * H,
        utc(2026, 3, 28, 23),  # 00:00 CET
        utc(2026, 3, 29, 1, 30),
        utc(2026, 3, 29, 2, 30),
        ("2026-03-29 03:30 CEST", "2026-03-29 04:30 CEST"),
    ),
    (
        "berlin-fall-repeated-start",
        BERLIN,
        ("30 2 * * *", "RRULE:FREQ=DAILY;BYHOUR=2;BYMINUTE=30"),
        30 * M,
        utc(2026, 10, 24, 22),  # 00:00 CEST
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 25, 1, 0),
        ("2026-10-25 02:30 CEST", "2026-10-25 02:00 CET"),
    ),
    (
        "berlin-spring-2h-from-01:00",
        BERLIN,
        ("0 1 * * *", "RRULE:FREQ=DAILY;BYHOUR=1"),
        2 * H,
        utc(2026, 3, 28, 22),  # 23:00 CET
        utc(2026, 3, 29, 0, 0),
        utc(2026, 3, 29, 2, 0),
        ("2026-03-29 01:00 CET", "2026-03-29 04:00 CEST"),
    ),
    (
        "berlin-fall-2h-from-01:00",
        BERLIN,
        ("0 1 * * *", "RRULE:FREQ=DAILY;BYHOUR=1"),
        2 * H,
        utc(2026, 10, 24, 21),  # 23:00 CEST
        utc(2026, 10, 24, 23, 0),
        utc(2026, 10, 25, 1, 0),
        ("2026-10-25 01:00 CEST", "2026-10-25 02:00 CET"),
    ),
    (
        "new-york-spring-skipped-start",
        NEW_YORK,
        ("30 2 * * *", "RRULE:FREQ=DAILY;BYHOUR=2;BYMINUTE=30"),
        1 * H,
        utc(2026, 3, 8, 5),  # 00:00 EST
        utc(2026, 3, 8, 7, 30),
        utc(2026, 3, 8, 8, 30),
        ("2026-03-08 03:30 EDT", "2026-03-08 04:30 EDT"),
    ),
    (
        "new-york-fall-repeated-start",
        NEW_YORK,
        ("30 1 * * *", "RRULE:FREQ=DAILY;BYHOUR=1;BYMINUTE=30"),
        30 * M,
        utc(2026, 11, 1, 4),  # 00:00 EDT
        utc(2026, 11, 1, 5, 30),
        utc(2026, 11, 1, 6, 0),
        ("2026-11-01 01:30 EDT", "2026-11-01 01:00 EST"),
    ),
    (
        "new-york-spring-2h-from-01:00",
        NEW_YORK,
        ("0 1 * * *", "RRULE:FREQ=DAILY;BYHOUR=1"),
        2 * H,
        utc(2026, 3, 8, 4),  # 23:00 EST
        utc(2026, 3, 8, 6, 0),
        utc(2026, 3, 8, 8, 0),
        ("2026-03-08 01:00 EST", "2026-03-08 04:00 EDT"),
    ),
    (
        "new-york-fall-2h-from-01:00",
        NEW_YORK,
        ("0 1 * * *", "RRULE:FREQ=DAILY;BYHOUR=1"),
        2 * H,
        utc(2026, 11, 1, 3),  # 23:00 EDT
        utc(2026, 11, 1, 5, 0),
        utc(2026, 11, 1, 7, 0),
        ("2026-11-01 01:00 EDT", "2026-11-01 02:00 EST"),
    ),
]


@pytest.mark.parametrize("kind", [0, 1], ids=["cron", "rrule"])
@pytest.mark.parametrize(
    ("zone", "schedules", "duration", "now", "opens", "closes", "walls"),
    [case[1:] for case in DST_MATRIX],
    ids=[case[0] for case in DST_MATRIX],
)
def test_dst_matrix(
    kind: int,
    zone: ZoneInfo,
    schedules: tuple[str, str],
    duration: float,
    now: float,
    opens: float,
    closes: float,
    walls: tuple[str, str],
) -> None:
    w = stage(zone.key, allow=((schedules[kind], duration),))
    assert (wall(opens, zone), wall(closes, zone)) == walls
    assert closes - opens == duration  # elapsed time, whatever the clocks did

    assert next_opening(w, now) == opens
    before = state(w, now)
    assert (before.open, before.opens_at) == (False, opens)
    assert not state(w, opens - 1).open
    during = state(w, opens)
    assert (during.open, during.closes_at) == (True, closes)
    assert state(w, closes - 1).open
    assert not state(w, closes).open
    # One window that day, however often its start time occurred.
    assert open_seconds(w, now, now + 20 * H) == duration


@pytest.mark.parametrize(
    ("zone", "repeated_start", "next_day_start"),
    [
        # The second 02:30 (CET) in Berlin, then 02:30 CET the day after.
        (BERLIN, utc(2026, 10, 25, 1, 30), utc(2026, 10, 26, 1, 30)),
        # The second 01:30 (EST) in New York, then 01:30 EST the day after.
        (NEW_YORK, utc(2026, 11, 1, 6, 30), utc(2026, 11, 2, 6, 30)),
    ],
    ids=["berlin", "new-york"],
)
def test_repeated_autumn_hour_brings_no_second_window(
    zone: ZoneInfo, repeated_start: float, next_day_start: float
) -> None:
    hour = "2" if zone is BERLIN else "1"
    w = stage(zone.key, allow=((f"30 {hour} * * *", 30 * M),))
    assert not state(w, repeated_start).open
    assert not state(w, repeated_start + 10 * M).open
    assert next_opening(w, repeated_start) == next_day_start


def test_hourly_schedule_on_spring_forward_day_keeps_every_hour_it_can() -> None:
    # 02:30 does not exist on 2026-03-29 in Berlin: its window lands on 03:30 CEST, which the
    # 03:30 occurrence also names; the union is one window there.
    w = stage("Europe/Berlin", allow=(("30 * * * *", 10 * M),))
    day_start = utc(2026, 3, 28, 23)  # 00:00 CET
    day_end = utc(2026, 3, 29, 22)  # 00:00 CEST next day: 23 hours later
    assert open_seconds(w, day_start, day_end) == 23 * 10 * M


# --- leap days, impossible dates, the year end ------------------------------------------------


@pytest.mark.parametrize(
    "schedule", ["RRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29;BYHOUR=10", "0 10 29 2 *"]
)
def test_leap_day_rule_opens_only_in_leap_years(schedule: str) -> None:
    w = stage("UTC", allow=((schedule, 2 * H),))
    now = utc(2026, 3, 1)
    assert next_opening(w, now) is None  # 730 days away: beyond the 400-day horizon
    assert next_opening(w, now, horizon=800 * D) == utc(2028, 2, 29, 10)
    assert state(w, now) == WindowState(
        False, "waiting for window: no opening within 400 days", None, None
    )
    # 2027 has no Feb 29: from its Feb 28 the next one is 2028's.
    assert state(w, utc(2027, 2, 28, 11)) == WindowState(
        False,
        "waiting for window: opens 2028-02-29 10:00 UTC (in 365d)",
        utc(2028, 2, 29, 10),
        None,
    )
    assert not state(w, utc(2027, 3, 1, 10, 30)).open  # the day after Feb 28 is Mar 1
    assert state(w, utc(2028, 2, 29, 11)) == WindowState(
        True, "window open until Tue 12:00 UTC", None, utc(2028, 2, 29, 12)
    )
    assert not never_opens(w, now)
    # From just after one leap day the next is 1460 days away: still within 4 years + 1 day.
    assert not never_opens(w, utc(2028, 3, 1))
    assert next_opening(w, utc(2028, 3, 1), horizon=1462 * D) == utc(2032, 2, 29, 10)


@pytest.mark.parametrize("schedule", ["RRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30", "0 0 30 2 *"])
def test_feb_30_is_refused_and_never_opens(schedule: str) -> None:
    w = Windows("UTC", allow=(Recurrence(schedule, H),))
    with pytest.raises(WindowError, match="never fires") as err:
        check(w)
    assert schedule in str(err.value)
    assert never_opens(w, utc(2026, 12, 2))
    assert state(w, utc(2026, 12, 2)).opens_at is None


@pytest.mark.parametrize("schedule", ["0 22 * * 4", "RRULE:FREQ=WEEKLY;BYDAY=TH;BYHOUR=22"])
def test_weekly_window_across_the_year_end(schedule: str) -> None:
    # 2026-12-31 is a Thursday; the window runs into Friday 2027-01-01.
    w = stage("Europe/Berlin", allow=((schedule, 4 * H),))
    assert next_opening(w, local(BERLIN, 2026, 12, 31, 12)) == local(BERLIN, 2026, 12, 31, 22)
    new_year = state(w, local(BERLIN, 2027, 1, 1, 1))
    assert new_year == WindowState(
        True, "window open until Fri 02:00 Europe/Berlin", None, local(BERLIN, 2027, 1, 1, 2)
    )
    assert next_opening(w, local(BERLIN, 2027, 1, 1, 2)) == local(BERLIN, 2027, 1, 7, 22)
    assert open_seconds(w, local(BERLIN, 2026, 12, 28), local(BERLIN, 2027, 1, 11)) == 8 * H


def test_rrule_intervals_count_from_the_2000_anchor_across_years() -> None:
    # Every other Saturday counted from Saturday 2000-01-01, computed here by date arithmetic.
    w = stage("UTC", allow=(("RRULE:FREQ=WEEKLY;INTERVAL=2;BYDAY=SA;BYHOUR=12", H),))
    expected = [
        d
        for d in (date(2026, 11, 1) + timedelta(days=i) for i in range(120))
        if d.weekday() == 5 and (d - date(2000, 1, 1)).days % 14 == 0
    ]
    got: list[date] = []
    t = utc(2026, 11, 1)
    while (opens := next_opening(w, t)) is not None and opens < utc(2027, 3, 1):
        got.append(datetime.fromtimestamp(opens, UTC).date())
        t = opens + H
    assert got == expected


def test_rrule_monthly_and_yearly_intervals_keep_their_phase() -> None:
    # Every 5th month from Jan 2000: months with (year-2000)*12 + month-1 divisible by 5.
    w = stage("UTC", allow=(("RRULE:FREQ=MONTHLY;INTERVAL=5;BYMONTHDAY=15;BYHOUR=3", H),))
    months = [(y, m) for y in (2026, 2027, 2028) for m in range(1, 13)]
    expected = [utc(y, m, 15, 3) for y, m in months if ((y - 2000) * 12 + m - 1) % 5 == 0]
    got: list[float | None] = []
    t = utc(2026, 1, 1)
    for _ in expected:
        got.append(next_opening(w, t, horizon=200 * D))
        t = (got[-1] or t) + H
    assert got == expected
    # Every 3rd year from 2000: 2027, 2030.
    y3 = stage("UTC", allow=(("RRULE:FREQ=YEARLY;INTERVAL=3;BYMONTH=6;BYMONTHDAY=1", H),))
    assert next_opening(y3, utc(2026, 1, 1), horizon=3000 * D) == utc(2027, 6, 1)
    assert next_opening(y3, utc(2027, 6, 2), horizon=3000 * D) == utc(2030, 6, 1)


def test_rrule_time_parts_default_to_zero_not_to_now() -> None:
    w = stage("UTC", allow=(("RRULE:FREQ=DAILY;BYHOUR=3", H),))
    assert next_opening(w, utc(2026, 12, 2, 0, 17) + 23) == utc(2026, 12, 2, 3, 0)
    first_saturday = stage(
        "Europe/Berlin", allow=(("RRULE:FREQ=MONTHLY;BYDAY=1SA;BYHOUR=0", 8 * H),)
    )
    # Saturday 2027-01-02 is January's first.
    assert next_opening(first_saturday, utc(2026, 12, 6)) == local(BERLIN, 2027, 1, 2, 0)


# --- allow, deny, freezes ---------------------------------------------------------------------


def test_deny_wins_over_allow_and_next_opening_is_the_deny_end() -> None:
    w = stage("UTC", allow=(("0 0 * * *", 24 * H),), deny=(("0 12 * * *", H),))
    assert state(w, utc(2026, 12, 2, 11)) == WindowState(
        True, "window open until Wed 12:00 UTC", None, utc(2026, 12, 2, 12)
    )
    inside = state(w, utc(2026, 12, 2, 12, 30))
    assert (inside.open, inside.opens_at) == (False, utc(2026, 12, 2, 13))
    assert next_opening(w, utc(2026, 12, 2, 12, 30)) == utc(2026, 12, 2, 13)
    assert inside.reason == "waiting for window: opens Wed 13:00 UTC (in 30m)"


def test_next_opening_from_a_deny_waits_for_allow_when_allow_is_closed_then() -> None:
    w = stage("UTC", allow=(("0 14 * * *", 2 * H),), deny=(("0 12 * * *", H),))
    assert next_opening(w, utc(2026, 12, 2, 12, 30)) == utc(2026, 12, 2, 14)


def test_without_allow_entries_the_stage_is_open_but_for_deny() -> None:
    office_hours = stage("Europe/Berlin", deny=(("0 9 * * 1-5", 9 * H),))
    monday_ten = local(BERLIN, 2026, 12, 7, 10)
    assert state(office_hours, monday_ten) == WindowState(
        False,
        "waiting for window: opens Mon 18:00 Europe/Berlin (in 8h)",
        local(BERLIN, 2026, 12, 7, 18),
        None,
    )
    saturday = state(office_hours, local(BERLIN, 2026, 12, 5, 12))
    assert (saturday.open, saturday.closes_at) == (True, local(BERLIN, 2026, 12, 7, 9))
    week = open_seconds(office_hours, local(BERLIN, 2026, 12, 7), local(BERLIN, 2026, 12, 14))
    assert week == 7 * 24 * H - 5 * 9 * H


def test_freeze_wins_and_its_reason_reads_as_declared() -> None:
    year_end = Freeze(utc(2026, 12, 20), utc(2027, 1, 4), "year-end freeze")
    w = stage("UTC", allow=(("0 0 * * *", 24 * H),), freezes=(year_end,))
    assert state(w, utc(2026, 12, 25, 12)) == WindowState(
        False, "frozen until 2027-01-04 00:00 UTC: year-end freeze", utc(2027, 1, 4), None
    )
    # The close is looked for a week ahead (state() runs every pass); the freeze is said anyway.
    before = state(w, utc(2026, 12, 2))
    assert before == WindowState(
        True,
        "window open, no closing within 8 days; frozen from 2026-12-20 00:00 UTC: year-end freeze",
        None,
        None,
    )
    near = state(w, utc(2026, 12, 15))
    assert near == WindowState(True, "window open until Sun 00:00 UTC", None, utc(2026, 12, 20))
    only_freeze = stage("UTC", freezes=(year_end,))
    assert state(only_freeze, utc(2026, 12, 25, 12)).reason == (
        "frozen until 2027-01-04 00:00 UTC: year-end freeze"
    )
    assert open_seconds(only_freeze, utc(2026, 12, 19), utc(2027, 1, 5)) == 2 * D


def test_freeze_ending_outside_the_windows_says_when_it_opens_after() -> None:
    year_end = Freeze(utc(2026, 12, 20), utc(2027, 1, 4), "year-end freeze")
    # Tuesdays 02:00 UTC; Monday 2027-01-04 is not one, so the stage opens Tuesday the 5th.
    w = stage("UTC", allow=(("0 2 * * 2", 4 * H),), freezes=(year_end,))
    frozen = state(w, utc(2026, 12, 25, 12))
    assert frozen == WindowState(
        False,
        "frozen until 2027-01-04 00:00 UTC: year-end freeze; "
        "then waiting for window: opens 2027-01-05 02:00 UTC (in 10d)",
        utc(2027, 1, 5, 2),
        None,
    )


def test_overlapping_freezes_hold_until_the_last_ends() -> None:
    a = Freeze(utc(2026, 12, 20), utc(2026, 12, 28), "holidays")
    b = Freeze(utc(2026, 12, 27), utc(2027, 1, 4), "year-end freeze")
    w = stage("UTC", freezes=(b, a))
    assert state(w, utc(2026, 12, 21)) == WindowState(
        False, "frozen until 2027-01-04 00:00 UTC: holidays", utc(2027, 1, 4), None
    )


def test_open_seconds_over_a_closed_night_counts_open_minutes_only() -> None:
    day_shift = stage("Europe/Berlin", allow=(("0 8 * * *", 10 * H),))  # 08:00-18:00
    evening = local(BERLIN, 2026, 12, 7, 17)
    morning = local(BERLIN, 2026, 12, 8, 9, 30)
    assert open_seconds(day_shift, evening, morning) == 1 * H + 90 * M
    assert open_seconds(day_shift, local(BERLIN, 2026, 12, 7, 19), morning - 2 * H) == 0.0
    assert open_seconds(day_shift, morning, evening) == 0.0  # an empty span


def test_always_open() -> None:
    w = Windows()
    assert w.always_open
    check(w)
    assert state(w, 1e9) == WindowState(True, "", None, None)
    assert next_opening(w, 1e9) == 1e9
    assert open_seconds(w, 1e9, 1e9 + 5) == 5
    assert not never_opens(w, 1e9)
    assert not stage("UTC", deny=(("0 0 * * *", H),)).always_open


def test_a_stage_denied_all_day_every_day_never_opens() -> None:
    w = stage("UTC", allow=(("0 2 * * *", H),), deny=(("0 0 * * *", 24 * H),))
    assert never_opens(w, utc(2026, 12, 2))
    assert state(w, utc(2026, 12, 2)).reason == "waiting for window: no opening within 400 days"


def test_past_the_occurrence_budget_counts_as_beyond_the_horizon(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(windows, "MAX_OCCURRENCES", 500)
    # Overlapping minute windows: open throughout, so looking for the close reads every minute;
    # the first chunk (an hour, with 3h of slack either side) fits in 500, the second does not.
    w = stage("UTC", allow=(("* * * * *", 2 * M),))
    now = utc(2026, 12, 2, 12)
    assert state(w, now) == WindowState(True, "window open, no closing within 8 days", None, None)
    # What the scan could not read counts as open, so gate timeouts still fire.
    assert open_seconds(w, now, now + D) == D


def test_a_long_freeze_costs_no_occurrences(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(windows, "MAX_OCCURRENCES", 500)
    # 90 days of 5-minute windows (~26,000 occurrences) lie under the freeze: none are read.
    quarter = Freeze(utc(2027, 1, 1), utc(2027, 4, 1), "quarter close")
    w = stage("UTC", allow=(("*/10 * * * *", 5 * M),), freezes=(quarter,))
    assert state(w, utc(2027, 1, 2)) == WindowState(
        False, "frozen until 2027-04-01 00:00 UTC: quarter close", utc(2027, 4, 1), None
    )
    assert open_seconds(w, utc(2026, 12, 31, 23), utc(2027, 4, 1, 1)) == 12 * 5 * M


# --- what people read -------------------------------------------------------------------------


def test_reasons_read_as_specified() -> None:
    w = stage("Europe/Berlin", allow=(("0 2 * * 2", 4 * H),))
    monday_evening = local(BERLIN, 2026, 12, 7, 20, 48)
    assert state(w, monday_evening) == WindowState(
        False,
        "waiting for window: opens Tue 02:00 Europe/Berlin (in 5h12m)",
        local(BERLIN, 2026, 12, 8, 2),
        None,
    )
    assert state(w, local(BERLIN, 2026, 12, 8, 3)) == WindowState(
        True, "window open until Tue 06:00 Europe/Berlin", None, local(BERLIN, 2026, 12, 8, 6)
    )


@pytest.mark.parametrize(
    ("ts", "zone", "now", "text"),
    [
        (utc(2027, 1, 4), "UTC", utc(2026, 12, 2), "2027-01-04 00:00 UTC (in 33d)"),
        (
            utc(2026, 12, 8, 1),
            "Europe/Berlin",
            utc(2026, 12, 7, 19, 48),
            "Tue 02:00 Europe/Berlin (in 5h12m)",
        ),
        (
            utc(2026, 12, 8, 1),
            "Europe/Berlin",
            utc(2026, 12, 2, 1),
            "Tue 02:00 Europe/Berlin (in 6d)",
        ),
        (  # beyond 6 days the weekday would be ambiguous: the date
            utc(2026, 12, 8, 1),
            "Europe/Berlin",
            utc(2026, 12, 2),
            "2026-12-08 02:00 Europe/Berlin (in 6d1h)",
        ),
        (utc(2026, 12, 2, 12), "UTC", utc(2026, 12, 2, 12), "Wed 12:00 UTC (now)"),
        (utc(2026, 12, 2, 12), "UTC", utc(2026, 12, 2, 12, 5), "Wed 12:00 UTC (5m ago)"),
        (utc(2026, 12, 2, 12) + 30, "UTC", utc(2026, 12, 2, 12), "Wed 12:00:30 UTC (in <1m)"),
        (utc(2026, 12, 4, 15), "UTC", utc(2026, 12, 2, 12), "Fri 15:00 UTC (in 2d3h)"),
        (utc(2026, 12, 2, 15), "UTC", utc(2026, 12, 2, 12), "Wed 15:00 UTC (in 3h)"),
    ],
)
def test_describe_instant(ts: float, zone: str, now: float, text: str) -> None:
    assert describe_instant(ts, zone, now) == text


# --- check() ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("w", "named", "hint"),
    [
        (Windows("Mars/Olympus"), "'Mars/Olympus'", "IANA"),
        (Windows(""), "''", "IANA"),
        (Windows(allow=(Recurrence("0 2 * *", H),)), "'0 2 * *'", "exactly 5 fields"),
        (Windows(allow=(Recurrence("0 0 2 * * *", H),)), "'0 0 2 * * *'", "exactly 5 fields"),
        (Windows(allow=(Recurrence("@daily", H),)), "'@daily'", "exactly 5 fields"),
        (Windows(deny=(Recurrence("61 2 * * *", H),)), "'61 2 * * *'", "e.g. '0 2 * * 2'"),
        (Windows(allow=(Recurrence("RRULE:FREQ=SOMETIMES", H),)), "SOMETIMES", "e.g. 'RRULE:"),
        (Windows(allow=(Recurrence("RRULE:BYHOUR=2", H),)), "BYHOUR=2", "FREQ is missing"),
        (Windows(allow=(Recurrence("RRULE:FREQ=DAILY;COUNT=3", H),)), "COUNT=3", "UNTIL"),
        (
            Windows(allow=(Recurrence("RRULE:FREQ=DAILY;UNTIL=20270101T000000Z", H),)),
            "UNTIL=20270101T000000Z",
            "local time",
        ),
        (Windows(allow=(Recurrence("RRULE:FREQ=WEEKLY;BYHOUR=2", H),)), "WEEKLY", "BYDAY"),
        (Windows(allow=(Recurrence("RRULE:FREQ=DAILY;INTERVAL=0", H),)), "INTERVAL=0", "1 or more"),
        (
            Windows(allow=(Recurrence("RRULE:FREQ=DAILY\nRRULE:FREQ=WEEKLY", H),)),
            "FREQ=DAILY",
            "one RRULE line",
        ),
        (Windows(allow=(Recurrence("0 2 * * 2", 0),)), "'0 2 * * 2'", "more than 0"),
        (Windows(deny=(Recurrence("0 2 * * 2", -H),)), "-3600.0", "more than 0"),
        (Windows(allow=(Recurrence("0 2 * * 2", 32 * D),)), "'0 2 * * 2'", "31 days"),
        (Windows(allow=(Recurrence("0 2 * * 2", float("nan")),)), "nan", "31 days"),
        (
            Windows(freezes=(Freeze(utc(2027, 1, 4), utc(2026, 12, 20), "year-end"),)),
            "2027-01-04T00:00:00Z",
            "swap",
        ),
        (Windows(freezes=(Freeze(5.0, 5.0, "empty"),)), "'empty'", "not before"),
    ],
)
def test_check_refuses_with_the_value_and_a_hint(w: Windows, named: str, hint: str) -> None:
    with pytest.raises(WindowError) as err:
        check(w)
    assert named in str(err.value)
    assert hint in str(err.value)
    assert isinstance(err.value, ValueError)


def test_check_accepts_the_documented_example() -> None:
    w = Windows(
        "Europe/Berlin",
        allow=(
            Recurrence("0 2 * * 2", 4 * H),
            Recurrence("RRULE:FREQ=MONTHLY;BYDAY=1SA;BYHOUR=0", 8 * H),
        ),
        deny=(Recurrence("0 9 * * 1-5", 9 * H),),
        freezes=(Freeze(utc(2026, 12, 20), utc(2027, 1, 4), "year-end freeze"),),
    )
    check(w)
    # Saturday 2026-12-05 is December's first: open 00:00-08:00 Berlin.
    assert next_opening(w, utc(2026, 12, 2, 19)) == local(BERLIN, 2026, 12, 5, 0)
    assert state(w, local(BERLIN, 2026, 12, 5, 7)).closes_at == local(BERLIN, 2026, 12, 5, 8)
    # After the freeze: Tuesday 2027-01-05 02:00 Berlin.
    assert next_opening(w, utc(2026, 12, 25)) == local(BERLIN, 2027, 1, 5, 2)


# --- against a plain oracle -------------------------------------------------------------------

Daily = tuple[int, int, float, bool]  # hour, minute, duration, written as an RRULE


def _oracle_open(zone: ZoneInfo, allow: list[Daily], deny: list[Daily], t: float) -> bool:
    """Daily windows by hand: each day's start placed at fold=0, lasting its duration."""
    day = datetime.fromtimestamp(t, zone).date()

    def inside(hour: int, minute: int, duration: float, _: bool) -> bool:
        for back in range(3):
            d = day - timedelta(days=back)
            start = datetime(d.year, d.month, d.day, hour, minute, tzinfo=zone).timestamp()
            if start <= t < start + duration:
                return True
        return False

    allowed = not allow or any(inside(*a) for a in allow)
    return allowed and not any(inside(*d) for d in deny)


def _written(entries: list[Daily]) -> tuple[tuple[str, float], ...]:
    return tuple(
        (f"RRULE:FREQ=DAILY;BYHOUR={h};BYMINUTE={m}" if rrule else f"{m} {h} * * *", d)
        for h, m, d, rrule in entries
    )


_daily = st.tuples(
    st.integers(0, 23),
    st.sampled_from([0, 15, 30, 45]),
    st.sampled_from([30 * M, 2 * H, 7 * H, 25 * H]),
    st.booleans(),
)
_zones = [BERLIN, NEW_YORK, ZoneInfo("Australia/Lord_Howe"), ZoneInfo("UTC")]
# Around the 2026 changes of Berlin and New York (and Lord Howe's in April and October).
_bases = [utc(2026, 3, 7), utc(2026, 3, 27), utc(2026, 4, 3), utc(2026, 10, 2)]
_bases += [utc(2026, 10, 23), utc(2026, 10, 30), utc(2026, 6, 1)]


@settings(max_examples=150, deadline=None)
@given(
    zone=st.sampled_from(_zones),
    allow=st.lists(_daily, max_size=2),
    deny=st.lists(_daily, max_size=2),
    base=st.sampled_from(_bases),
    offset=st.integers(0, 4 * 24 * 60).map(lambda m: m * M),
)
def test_state_matches_a_plain_oracle(
    zone: ZoneInfo, allow: list[Daily], deny: list[Daily], base: float, offset: float
) -> None:
    w = stage(zone.key, allow=_written(allow), deny=_written(deny))
    now = base + offset
    s = state(w, now, horizon=3 * D)
    assert s.open == _oracle_open(zone, allow, deny, now)
    if s.open and s.closes_at is not None:
        assert not _oracle_open(zone, allow, deny, s.closes_at)
        assert _oracle_open(zone, allow, deny, s.closes_at - 1)
    if not s.open and s.opens_at is not None:
        assert _oracle_open(zone, allow, deny, s.opens_at)
        assert not _oracle_open(zone, allow, deny, s.opens_at - 1)


@settings(max_examples=60, deadline=None)
@given(
    zone=st.sampled_from(_zones),
    allow=st.lists(_daily, max_size=2),
    deny=st.lists(_daily, max_size=2),
    base=st.sampled_from(_bases),
    offset=st.integers(0, 2 * 24 * 60).map(lambda m: m * M),
    minutes=st.integers(0, 14 * 60),
)
def test_open_seconds_matches_the_oracle_minute_by_minute(
    zone: ZoneInfo,
    allow: list[Daily],
    deny: list[Daily],
    base: float,
    offset: float,
    minutes: int,
) -> None:
    # Every edge falls on a whole minute, so sampling each minute's start counts exactly.
    w = stage(zone.key, allow=_written(allow), deny=_written(deny))
    start = base + offset
    expected = sum(M for i in range(minutes) if _oracle_open(zone, allow, deny, start + i * M))
    assert open_seconds(w, start, start + minutes * M) == expected
