"""Maintenance windows: when a stage may adopt commits. Pure: no I/O, no clock (``now`` comes in).

A stage is open at instant t iff (it has no allow entries, or t lies inside an allow occurrence)
and t lies inside no deny occurrence and inside no freeze.

Schedules, read in the stage's IANA zone (default UTC):

- cron: exactly 5 fields (minute hour day-of-month month day-of-week), run by croniter on naive
  local times. As in Vixie cron, day-of-month and day-of-week OR together when both are set.
- ``RRULE:...``: one RFC 5545 rule line, parsed by dateutil's ``rrulestr`` with a naive DTSTART
  anchor of 2000-01-01 00:00:00 local (a Saturday). What a rule leaves out defaults to the
  anchor: BYHOUR, BYMINUTE and BYSECOND to 0 (never the current time), a YEARLY rule to Jan 1, a
  MONTHLY one to the 1st; INTERVAL counts from the anchor (``FREQ=WEEKLY;INTERVAL=2;BYDAY=SA``
  falls on 2000-01-01, 2000-01-15, ...). Refused, because each would mean something else than
  it seems: COUNT (it counts from 2000; bound with UNTIL), UNTIL in UTC (``...Z``; write local
  time), BYEASTER, and WEEKLY without a day (it would fall on Saturdays).

An occurrence starts at the local wall-clock time its schedule names and lasts ``duration``
seconds of elapsed time. Occurrences are generated as naive local datetimes, each placed in the
zone with zoneinfo at fold=0 (PEP 495). So across DST changes:

- a start the spring-forward change skips (02:30 Europe/Berlin on 2026-03-29) takes the offset
  from before the change, i.e. it starts later by the gap: 03:30 CEST;
- a start that occurs twice in autumn (02:30 Europe/Berlin on 2026-10-25) starts at its first
  occurrence (02:30 CEST) only; the repeated hour never brings a second window;
- the duration is elapsed time: a 2h window from 01:00 on a change day ends at 04:00 CEST in
  spring and at the second 02:00 (CET) in autumn.

Cost: ``state`` runs for every stage on every controller pass. Schedules are parsed once per
schedule (the zone plays no part in parsing); a scan reads only occurrences that start from 3h
(more than any DST shift) before its start minus their duration; scans go forward in chunks that
grow from 1h to 8 days, and stop after 200,000 occurrences, which counts as "not within the
horizon". The functions share nothing mutable, so threads may call them at once; they raise
WindowError for an unknown zone or a schedule that does not parse (``check`` says so up front).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dateutil.rrule import (
    DAILY,
    HOURLY,
    MINUTELY,
    MONTHLY,
    SECONDLY,
    WEEKLY,
    YEARLY,
    rrule,
    rrulestr,
)

DAY = 86400.0
MAX_DURATION = 31 * DAY
HORIZON = 400 * DAY
CLOSE_LOOKAHEAD = 8 * DAY  # how far state() looks for an open window's close
NEVER_HORIZON = (4 * 365 + 1 + 1) * DAY  # four years (one leap day in them) and a day
MAX_OCCURRENCES = 200_000

_SLACK = timedelta(hours=3)  # more than any change of UTC offset (DST shifts are at most 2h)
_FIRST_CHUNK = 3600.0  # small first: most passes only need to know about now
_CHUNK = 8 * DAY  # a weekly window shows within one chunk
_ANCHOR = datetime(2000, 1, 1)
_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_CRON_HINT = "e.g. '0 2 * * 2' (Tuesdays 02:00) or an 'RRULE:...' line"
_RRULE_HINT = "e.g. 'RRULE:FREQ=MONTHLY;BYDAY=1SA;BYHOUR=0'"
_FREQS = {
    "YEARLY": YEARLY,
    "MONTHLY": MONTHLY,
    "WEEKLY": WEEKLY,
    "DAILY": DAILY,
    "HOURLY": HOURLY,
    "MINUTELY": MINUTELY,
    "SECONDLY": SECONDLY,
}
# Seconds per period, for the frequencies whose periods have a fixed length.
_PERIOD = {WEEKLY: 7 * 86400, DAILY: 86400, HOURLY: 3600, MINUTELY: 60, SECONDLY: 1}
# Periods in 400 Gregorian years, after which the calendar (leap years, weekdays) repeats.
_CYCLE = {
    YEARLY: 400,
    MONTHLY: 4_800,
    WEEKLY: 20_871,
    DAILY: 146_097,
    HOURLY: 146_097 * 24,
    MINUTELY: 146_097 * 1440,
    SECONDLY: 146_097 * 86400,
}

Interval = tuple[float, float]


class WindowError(ValueError):
    """A schedule, zone, duration or freeze that cannot be used; the message says how to fix it."""


@dataclass(frozen=True)
class Recurrence:
    schedule: str  # 5-field cron, or "RRULE:..."
    duration: float  # seconds of elapsed time, > 0


@dataclass(frozen=True)
class Freeze:
    start: float  # epoch seconds
    end: float  # epoch seconds, after start
    reason: str


@dataclass(frozen=True)
class Windows:
    timezone: str = "UTC"
    allow: tuple[Recurrence, ...] = ()
    deny: tuple[Recurrence, ...] = ()
    freezes: tuple[Freeze, ...] = ()

    @property
    def always_open(self) -> bool:
        return not (self.allow or self.deny or self.freezes)


@dataclass(frozen=True)
class WindowState:
    open: bool
    reason: str  # for people: why closed, or until when open ("" when always open)
    opens_at: float | None  # when closed: the next instant it is open (None: not within horizon)
    closes_at: float | None  # when open: the next instant it closes (None: not within horizon)


# --- public API ------------------------------------------------------------------------------


def check(w: Windows) -> None:
    """Raise WindowError for an unknown zone, a bad or never-firing schedule, a duration outside
    (0, 31 days], or a freeze that does not start before it ends."""
    _zone(w.timezone)
    for kind, recurrences in (("allow", w.allow), ("deny", w.deny)):
        for r in recurrences:
            if not 0 < r.duration <= MAX_DURATION:  # also refuses NaN
                raise WindowError(
                    f"bad duration {r.duration!r}s for {kind} schedule {r.schedule!r}: a window "
                    "lasts more than 0 and at most 31 days, e.g. 4h"
                )
            if not _parse(r.schedule).fires:
                raise WindowError(
                    f"{kind} schedule {r.schedule!r} never fires (no date matches it, such as "
                    "Feb 30, or its UNTIL comes before its first occurrence): fix its dates"
                )
    for f in w.freezes:
        if not (math.isfinite(f.start) and math.isfinite(f.end)):
            raise WindowError(f"bad freeze {f.reason!r}: from and to must be timestamps")
        if f.start >= f.end:
            raise WindowError(
                f"bad freeze {f.reason!r}: from {_iso(f.start)} is not before to {_iso(f.end)};"
                " swap them or fix the dates"
            )


def state(w: Windows, now: float, horizon: float = HORIZON) -> WindowState:
    """Whether ``w`` is open at ``now``, why, and when that changes (looking ``horizon`` ahead)."""
    if w.always_open:
        return WindowState(True, "", None, None)
    stop = now + horizon
    runs = _runs(w, now, stop, _Budget())
    within = f"within {horizon / DAY:g} days"
    try:
        first = next(runs, None)
    except _ExhaustedError:
        first = None
    if first is not None and first[0] == now:
        end: float | None = first[1]
        # Called every pass: look for the close only a week or so ahead (a schedule that keeps
        # the stage open for months would otherwise be read to the horizon each time).
        near = min(stop, now + CLOSE_LOOKAHEAD)
        try:
            for start, stop_ in runs:
                if start != end or end >= near:
                    break
                end = stop_  # the same run, cut at a chunk's edge
        except _ExhaustedError:
            end = None
        if end is None or end >= near:
            reason = f"window open, no closing within {(near - now) / DAY:g} days"
            coming = [f for f in w.freezes if f.start > now]
            if coming:  # absolute, so said however far ahead
                nxt = min(coming, key=lambda f: f.start)
                reason += f"; frozen from {_when(nxt.start, w.timezone, now)}" + (
                    f": {nxt.reason}" if nxt.reason else ""
                )
            return WindowState(True, reason, None, None)
        return WindowState(True, f"window open until {_when(end, w.timezone, now)}", None, end)
    opens_at = first[0] if first is not None else None
    waiting = (
        f"opens {describe_instant(opens_at, w.timezone, now)}"
        if opens_at is not None
        else f"no opening {within}"
    )
    frozen = _frozen_until(w.freezes, now)
    if frozen is None:
        return WindowState(False, f"waiting for window: {waiting}", opens_at, None)
    until, why = frozen
    reason = f"frozen until {_when(until, w.timezone, now)}" + (f": {why}" if why else "")
    if opens_at != until:  # the freeze ends outside the windows
        reason += (
            f"; then waiting for window: {waiting}" if opens_at is not None else f"; {waiting}"
        )
    return WindowState(False, reason, opens_at, None)


def open_seconds(w: Windows, start: float, end: float) -> float:
    """Seconds in [start, end) during which ``w`` is open: gate timeouts count only open time.

    Past the occurrence budget the rest of the span counts as open, so a timeout still fires."""
    if end <= start:
        return 0.0
    if w.always_open:
        return end - start
    total = 0.0
    try:
        for a, b in _runs(w, start, end, _Budget()):
            total += b - a
    except _ExhaustedError as stopped:
        total += end - stopped.at
    return total


def next_opening(w: Windows, now: float, horizon: float = HORIZON) -> float | None:
    """The first instant in [now, now + horizon) at which ``w`` is open (``now`` if open now)."""
    if w.always_open:
        return now
    try:
        for start, _ in _runs(w, now, now + horizon, _Budget()):
            return start
    except _ExhaustedError:
        pass
    return None


def never_opens(w: Windows, now: float) -> bool:
    """No opening within four years and a day of ``now`` (so a Feb 29 rule still opens)."""
    return next_opening(w, now, NEVER_HORIZON) is None


def describe_instant(ts: float, zone: str, now: float) -> str:
    """``Tue 02:00 Europe/Berlin (in 5h12m)``; more than 6 days away, the date instead of the
    weekday: ``2027-01-04 00:00 UTC (in 33d)``."""
    return f"{_when(ts, zone, now)} ({_relative(ts - now)})"


# --- formatting ------------------------------------------------------------------------------


def _when(ts: float, zone: str, now: float) -> str:
    local = datetime.fromtimestamp(ts, _zone(zone))
    clock = f"{local:%H:%M}" + (f":{local.second:02d}" if local.second else "")
    if abs(ts - now) <= 6 * DAY:  # a weekday names one day only within the week
        return f"{_WEEKDAYS[local.weekday()]} {clock} {zone}"
    return f"{local:%Y-%m-%d} {clock} {zone}"


def _relative(delta: float) -> str:
    if delta == 0:
        return "now"
    days, minutes = divmod(int(abs(delta)) // 60, 1440)
    hours, minutes = divmod(minutes, 60)
    if days >= 7:
        text = f"{days}d"
    elif days:
        text = f"{days}d{hours}h" if hours else f"{days}d"
    elif hours:
        text = f"{hours}h{minutes}m" if minutes else f"{hours}h"
    else:
        text = f"{minutes}m" if minutes else "<1m"
    return f"in {text}" if delta > 0 else f"{text} ago"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _frozen_until(freezes: Sequence[Freeze], now: float) -> tuple[float, str] | None:
    """The end of the freezes holding ``now`` (with those that overlap them), and the reason of
    the one that holds it longest."""
    holding = [f for f in freezes if f.start <= now < f.end]
    if not holding:
        return None
    top = max(holding, key=lambda f: f.end)
    end = top.end
    for f in sorted(freezes, key=lambda f: f.start):
        if f.start <= end < f.end:
            end = f.end
    return end, top.reason


# --- schedules -------------------------------------------------------------------------------


@lru_cache(maxsize=256)
def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as e:  # ValueError: "", "../x"
        raise WindowError(
            f"unknown timezone {name!r}: use an IANA zone name such as 'Europe/Berlin' or 'UTC'"
        ) from e


class _Cron:
    # croniter is imported where a cron schedule is parsed: 15-20 ms of every CLI start else
    def __init__(self, expr: str) -> None:
        from croniter import CroniterBadDateError, croniter  # noqa: PLC0415

        self.expr = expr
        try:
            croniter(expr, _ANCHOR).get_next(datetime)
        except CroniterBadDateError:  # no match in croniter's 50-year search: Feb 30
            self.fires = False
        else:
            self.fires = True

    def starts(self, since: datetime) -> Iterator[datetime]:
        from croniter import CroniterBadDateError, croniter  # noqa: PLC0415

        it = croniter(self.expr, since - timedelta(seconds=1))  # get_next is strictly after
        while True:
            try:
                when: datetime = it.get_next(datetime)
            except CroniterBadDateError:
                return
            yield when


class _RRule:
    def __init__(self, rule: rrule, freq: int, interval: int, bounded: bool) -> None:
        self.rule, self.freq, self.interval = rule, freq, interval
        self.fires = self._fires(bounded)

    def starts(self, since: datetime) -> Iterator[datetime]:
        """From the last period boundary at or before ``since`` that is a whole number of
        intervals after the anchor: the same occurrences as from 2000, without 26 years of them.
        What falls before ``since`` the caller skips (and counts)."""
        if self.freq == YEARLY:
            k = (since.year - _ANCHOR.year) // self.interval * self.interval
            anchor = _ANCHOR.replace(year=_ANCHOR.year + k)
        elif self.freq == MONTHLY:
            months = (since.year - _ANCHOR.year) * 12 + since.month - 1
            k = months // self.interval * self.interval
            anchor = _ANCHOR.replace(year=_ANCHOR.year + k // 12, month=k % 12 + 1)
        else:
            step = timedelta(seconds=_PERIOD[self.freq] * self.interval)
            anchor = _ANCHOR + step * ((since - _ANCHOR) // step)
        # Each of these anchors is midnight on Jan 1, the 1st, or a Saturday as the first anchor,
        # so the defaults dateutil takes from DTSTART stay those of 2000-01-01 00:00:00.
        return iter(self.rule.replace(dtstart=anchor))

    def _fires(self, bounded: bool) -> bool:
        # dateutil stops looking only at a match or at year 9999, so an impossible rule would
        # search ~8000 years on every scan. The calendar and the rule repeat every `years`:
        # probe one such stretch placed just before 9999, where that search is short.
        years = 400 * (self.interval // math.gcd(_CYCLE[self.freq], self.interval))
        ahead = max((datetime.max.year - 1 - _ANCHOR.year - years) // years, 0) * years
        probe = self.rule.replace(dtstart=_ANCHOR.replace(year=_ANCHOR.year + ahead), until=None)
        try:
            if next(iter(probe), None) is None:
                return False
        except (OverflowError, ValueError):  # ran off the calendar's end without a match
            return False
        return not bounded or self.rule.after(_ANCHOR, inc=True) is not None


@lru_cache(maxsize=1024)
def _parse(schedule: str) -> _Cron | _RRule:
    if schedule[:6].upper() == "RRULE:":
        return _parse_rrule(schedule)
    from croniter import CroniterError  # noqa: PLC0415 - see _Cron

    fields = schedule.split()
    if len(fields) != 5:
        raise WindowError(
            f"bad cron schedule {schedule!r}: cron takes exactly 5 fields (minute hour "
            f"day-of-month month day-of-week), this has {len(fields)}; {_CRON_HINT}"
        )
    try:
        return _Cron(" ".join(fields))
    except (CroniterError, ValueError, TypeError, KeyError, IndexError) as e:
        raise WindowError(f"bad cron schedule {schedule!r}: {e}; {_CRON_HINT}") from e


def _parse_rrule(schedule: str) -> _RRule:
    def bad(why: str) -> WindowError:
        return WindowError(f"bad RRULE schedule {schedule!r}: {why}; {_RRULE_HINT}")

    if "\n" in schedule or "\r" in schedule:
        raise bad("write one RRULE line (DTSTART, RDATE and EXDATE lines are not supported)")
    parts = {}
    for part in schedule[6:].split(";"):
        key, _, value = part.partition("=")
        parts[key.strip().upper()] = value.strip().upper()
    if "FREQ" not in parts:
        raise bad("FREQ is missing (YEARLY, MONTHLY, WEEKLY, DAILY, HOURLY or MINUTELY)")
    if "COUNT" in parts:
        raise bad("COUNT would count from the 2000-01-01 anchor; bound the rule with UNTIL")
    if "BYEASTER" in parts:
        raise bad("BYEASTER is not supported")
    if parts.get("UNTIL", "").endswith("Z"):
        raise bad("write UNTIL in the stage's local time, without the trailing Z")
    if (
        parts["FREQ"] == "WEEKLY"
        and not {"BYDAY", "BYMONTHDAY", "BYYEARDAY", "BYWEEKNO"} & parts.keys()
    ):
        raise bad("a WEEKLY rule needs BYDAY (e.g. BYDAY=TU), or it would fall on Saturdays")
    try:
        rule = rrulestr(schedule, dtstart=_ANCHOR)
    except (ValueError, TypeError, KeyError, IndexError, OverflowError) as e:
        raise bad(str(e)) from e
    if not isinstance(rule, rrule):  # one line gives one rule; this keeps mypy sure of it
        raise bad("write one RRULE")
    interval = int(parts.get("INTERVAL", "1"))
    if interval < 1:
        raise bad("INTERVAL must be 1 or more")
    return _RRule(rule, _FREQS[parts["FREQ"]], interval, "UNTIL" in parts)


# --- scanning --------------------------------------------------------------------------------


class _ExhaustedError(Exception):
    """The occurrence budget ran out; ``at`` is where the scan had got to."""

    def __init__(self, at: float = 0.0) -> None:
        super().__init__(at)
        self.at = at


class _Budget:
    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = MAX_OCCURRENCES

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise _ExhaustedError


def _local(ts: float, zone: ZoneInfo) -> datetime:
    return datetime.fromtimestamp(ts, zone).replace(tzinfo=None)


def _instant(local: datetime, zone: ZoneInfo) -> float:
    return local.replace(tzinfo=zone).timestamp()  # fold=0: see the module's DST rules


class _Occurrences:
    """One recurrence's occurrences as absolute intervals, read forward chunk by chunk."""

    def __init__(self, r: Recurrence, zone: ZoneInfo, since: float, budget: _Budget) -> None:
        schedule = _parse(r.schedule)
        self._zone, self._duration, self._budget = zone, r.duration, budget
        # An occurrence still running at `since` started after since - duration.
        self._lo = _local(since - r.duration, zone) - _SLACK
        self._starts = schedule.starts(self._lo) if schedule.fires else iter(())
        self._next: datetime | None = None
        self._held: list[Interval] = []  # read, and not over before the last chunk's end

    def within(self, a: float, b: float) -> list[Interval]:
        """The occurrences overlapping [a, b), cut to it; ``a`` never goes back between calls."""
        # Local starts come in wall-clock order; an instant before b has its start before this.
        limit = _local(b, self._zone) + _SLACK
        held = self._held
        while True:
            if self._next is None:
                self._budget.spend()
                start = next(self._starts, None)
                if start is None:
                    self._starts = iter(())
                    break
                if start < self._lo:  # an RRULE's lead-in from its period boundary
                    continue
                self._next = start
            if self._next >= limit:
                break
            begin = _instant(self._next, self._zone)
            held.append((begin, begin + self._duration))
            self._next = None
        held = _merge(held)  # overlapping occurrences fold into one: the list stays short
        self._held = [iv for iv in held if iv[1] > b]
        return [(max(s, a), min(e, b)) for s, e in held if s < b and e > a]


def _runs(w: Windows, start: float, stop: float, budget: _Budget) -> Iterator[Interval]:
    """The open intervals in [start, stop), in order; a run crossing a chunk edge comes in
    pieces that touch. Raises _ExhaustedError (with where it got to) past the budget."""
    zone = _zone(w.timezone)
    allow = [_Occurrences(r, zone, start, budget) for r in w.allow]
    deny = [_Occurrences(r, zone, start, budget) for r in w.deny]
    a, size = start, _FIRST_CHUNK
    while a < stop:
        frozen = _frozen_until(w.freezes, a)
        if frozen is not None:  # skip the freeze unread: a dense schedule costs nothing there
            a = min(frozen[0], stop)
            allow = [_Occurrences(r, zone, a, budget) for r in w.allow]
            deny = [_Occurrences(r, zone, a, budget) for r in w.deny]
            continue
        b = min(a + size, stop)
        try:
            allowed = _merge([iv for o in allow for iv in o.within(a, b)]) if allow else [(a, b)]
            if allowed:  # nothing to cut from otherwise
                closed = [iv for o in deny for iv in o.within(a, b)]
                closed += [(max(f.start, a), min(f.end, b)) for f in w.freezes]
                yield from _subtract(allowed, _merge(closed))
        except _ExhaustedError as e:
            raise _ExhaustedError(a) from e
        a, size = b, min(size * 2, _CHUNK)


def _merge(intervals: list[Interval]) -> list[Interval]:
    """Sorted, with empty intervals dropped and overlapping or touching ones joined."""
    out: list[Interval] = []
    for s, e in sorted(intervals):
        if s >= e:
            continue
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def _subtract(base: list[Interval], cut: list[Interval]) -> Iterator[Interval]:
    """``base`` minus ``cut``, both as _merge returns them."""
    i = 0
    for start, end in base:
        while i < len(cut) and cut[i][1] <= start:
            i += 1
        at, j = start, i
        while at < end and j < len(cut) and cut[j][0] < end:
            if cut[j][0] > at:
                yield (at, cut[j][0])
            at = max(at, cut[j][1])
            j += 1
        if at < end:
            yield (at, end)
