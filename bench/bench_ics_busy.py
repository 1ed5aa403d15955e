"""Benchmark: ``ics_busy`` over a realistic one-year calendar (ms per parse).

The calendar is generated deterministically: ~300 VEVENTs as a CalDAV collection GET returns
them (one VCALENDAR, a VTIMEZONE, Europe/Berlin and UTC times): 240 one-off meetings, 30 weekly
series (some with EXDATE and a RECURRENCE-ID override, some bounded by UNTIL), 20 all-day events,
a few cancelled or transparent ones, long folded descriptions. Timed for a one-week window (the
meeting flow's read) and the whole year.

Run: ``.venv/bin/python bench/bench_ics_busy.py [--n 30]``. Prints a markdown table (median, p95).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from datetime import date, datetime, timedelta

from common import machine

from countersign.binding import ics_busy

_VTIMEZONE = (
    "BEGIN:VTIMEZONE\r\nTZID:Europe/Berlin\r\nX-LIC-LOCATION:Europe/Berlin\r\n"
    "BEGIN:DAYLIGHT\r\nTZOFFSETFROM:+0100\r\nTZOFFSETTO:+0200\r\nTZNAME:CEST\r\n"
    "DTSTART:19700329T020000\r\nRRULE:FREQ=YEARLY;BYMONTH=3;BYDAY=-1SU\r\nEND:DAYLIGHT\r\n"
    "BEGIN:STANDARD\r\nTZOFFSETFROM:+0200\r\nTZOFFSETTO:+0100\r\nTZNAME:CET\r\n"
    "DTSTART:19701025T030000\r\nRRULE:FREQ=YEARLY;BYMONTH=10;BYDAY=-1SU\r\nEND:STANDARD\r\n"
    "END:VTIMEZONE\r\n"
)


def _fold(line: str) -> str:
    parts = [line[i : i + 74] for i in range(0, len(line), 74)]
    return "\r\n ".join(parts)


def year_calendar(seed: int = 7) -> str:
    """One year (2026) of a busy person's calendar as one VCALENDAR text."""
    rnd = random.Random(seed)
    out = [
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//Radicale//NONSGML Radicale Server//EN\r\n",
        _VTIMEZONE,
    ]
    stamp = "DTSTAMP:20251201T080000Z\r\n"
    desc = _fold("DESCRIPTION:" + "Agenda\\, notes and a video link; " * 6) + "\r\n"
    for i in range(240):
        day = date(2026, 1, 1) + timedelta(days=rnd.randrange(365))
        start = datetime(day.year, day.month, day.day, rnd.randrange(7, 18), rnd.choice((0, 30)))
        end = start + timedelta(minutes=rnd.choice((30, 45, 60, 90)))
        if i % 3:
            times = (
                f"DTSTART;TZID=Europe/Berlin:{start:%Y%m%dT%H%M%S}\r\n"
                f"DTEND;TZID=Europe/Berlin:{end:%Y%m%dT%H%M%S}\r\n"
            )
        else:
            times = f"DTSTART:{start:%Y%m%dT%H%M%S}Z\r\nDTEND:{end:%Y%m%dT%H%M%S}Z\r\n"
        extra = "STATUS:CANCELLED\r\n" if i % 40 == 0 else ""
        extra += "TRANSP:TRANSPARENT\r\n" if i % 55 == 0 else ""
        out.append(
            f"BEGIN:VEVENT\r\nUID:single-{i}@example.org\r\n{stamp}{times}"
            f"SUMMARY:Meeting {i}\r\n{desc}{extra}END:VEVENT\r\n"
        )
    for i in range(30):
        first = date(2026, 1, 5) + timedelta(days=rnd.randrange(60))
        start = datetime(first.year, first.month, first.day, 8 + i % 9, 0)
        until = ";UNTIL=20261130T230000Z" if i % 4 == 0 else ""
        uid = f"series-{i}@example.org"
        exdate = start + timedelta(weeks=3)
        moved = start + timedelta(weeks=5)
        out.append(
            f"BEGIN:VEVENT\r\nUID:{uid}\r\n{stamp}"
            f"DTSTART;TZID=Europe/Berlin:{start:%Y%m%dT%H%M%S}\r\n"
            f"DTEND;TZID=Europe/Berlin:{start + timedelta(hours=1):%Y%m%dT%H%M%S}\r\n"
            f"RRULE:FREQ=WEEKLY{until}\r\n"
            f"EXDATE;TZID=Europe/Berlin:{exdate:%Y%m%dT%H%M%S}\r\n"
            f"SUMMARY:Weekly {i}\r\n{desc}END:VEVENT\r\n"
            f"BEGIN:VEVENT\r\nUID:{uid}\r\n{stamp}"
            f"RECURRENCE-ID;TZID=Europe/Berlin:{moved:%Y%m%dT%H%M%S}\r\n"
            f"DTSTART;TZID=Europe/Berlin:{moved + timedelta(hours=2):%Y%m%dT%H%M%S}\r\n"
            f"DTEND;TZID=Europe/Berlin:{moved + timedelta(hours=3):%Y%m%dT%H%M%S}\r\n"
            f"SUMMARY:Weekly {i} (moved)\r\nEND:VEVENT\r\n"
        )
    for i in range(20):
        day = date(2026, 1, 1) + timedelta(days=rnd.randrange(365))
        transp = "TRANSP:TRANSPARENT\r\n" if i % 2 else ""
        out.append(
            f"BEGIN:VEVENT\r\nUID:allday-{i}@example.org\r\n{stamp}"
            f"DTSTART;VALUE=DATE:{day:%Y%m%d}\r\nDTEND;VALUE=DATE:{day + timedelta(days=1):%Y%m%d}\r\n"
            f"SUMMARY:All day {i}\r\n{transp}END:VEVENT\r\n"
        )
    out.append("END:VCALENDAR\r\n")
    return "".join(out)


def measure(text: str, lo: str, hi: str, n: int) -> tuple[float, float, int]:
    count = len(ics_busy(text, time_min=lo, time_max=hi))
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        ics_busy(text, time_min=lo, time_max=hi)
        samples.append((time.perf_counter() - t) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.95 * (len(samples) - 1))], count


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=30)
    n = ap.parse_args().n
    text = year_calendar()
    print(f"calendar: {text.count('BEGIN:VEVENT')} VEVENTs, {len(text) // 1024} KiB; n = {n}")
    print("| window | median ms | p95 ms | busy intervals |\n| --- | ---: | ---: | ---: |")
    for name, lo, hi in (
        ("one week", "2026-11-23T00:00:00Z", "2026-11-30T00:00:00Z"),
        ("whole year", "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z"),
    ):
        med, p95, count = measure(text, lo, hi, n)
        print(f"| {name} | {med:.1f} | {p95:.1f} | {count} |")
    print(f"\n{machine()}")


if __name__ == "__main__":
    main()
