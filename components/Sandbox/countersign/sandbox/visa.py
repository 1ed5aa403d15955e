"""The sandbox visa-appointment service behind the ``visa.sandbox`` connector
(registry/connectors/visa.sandbox.yaml).

Labelled sandbox: no consulate is reachable from here. The HTTP contract the connector binds:

- ``GET /consulates/{c}/slots?from=&to=`` → ``{slots: [{id, at}]}``: none until slots "appear",
  then one. The standalone sandbox's slot appears relative to the *watch* asking — one
  consulate and window (``from``, ``to``): ``appear_after_s`` seconds after the first search of
  that watch, or at its ``appear_after_watch_searches``-th search, whichever comes first — so a
  watcher started any time after the service finds nothing at first and a slot a set time
  later. Booking a watch's slot ends the watch: the next search of that consulate and window
  starts a new one, whose slot is the next half hour of the day. Tests drive "time" by counting
  every search (``appear_after``: the n-th search of any watch, so time-skipping runs stay
  deterministic); ``POST /_sandbox/slots`` makes one appear now for every watch.
  ``fixed_slot`` (tests) answers ``slot-1`` at 2027-03-14T09:00Z whatever the window; otherwise
  the slot lies in the window asked for (its first day, 09:00 UTC, then 09:30, … after bookings).
- ``POST /consulates/{c}/bookings`` ``{slot}`` → 201 ``{id, slot}``; honours
  ``Idempotency-Key`` (same key → same booking). Knobs: ``fail_after_booking`` (book, then
  answer 500: the outcome is lost), ``fail_before_booking`` (503, nothing booked), ``hold`` (the
  answer waits for ``release``: a test can kill a worker while the write is in flight).
- ``DELETE /consulates/{c}/bookings/{id}`` → ``{cancelled: true}`` (the saga's compensation).

Beyond the connector: ``POST /consulates/{c}/slots/{slot}/hold`` → 201 ``{hold_id, slot,
expires_in_s}`` (a held slot is left out of searches until released or booked) and
``DELETE /consulates/{c}/slots/{slot}/hold`` (release); ``GET /`` an HTML page with the banner;
``GET /_sandbox/state``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .core import render_page
from .http import Answer, JsonServer, Request, Served, page_or_admin

__all__ = ["VisaSandbox", "serve_visa"]

WHAT = "consulate appointment service"

#: a watch: one consulate and window (``from``, ``to``) searched
Watch = tuple[str, str, str]


@dataclass
class WatchSeen:
    """When a watch first searched (the service's clock) and how often it has."""

    first: float
    searches: int = 0


FIXED_SLOT = {"id": "slot-1", "at": "2027-03-14T09:00:00Z"}


@dataclass
class VisaSandbox:
    """State of the service (read by the tests; knobs set by them)."""

    #: slots appear for every watch at the n-th search of any (tests: "time" counted in searches)
    appear_after: int = 10**9
    #: a watch's slot appears this many seconds after its first search (None: never by time)
    appear_after_s: float | None = None
    #: ... or at its n-th search (None: never by its own count)
    appear_after_watch_searches: int | None = None
    #: tests: always ``slot-1`` at a fixed time; else a slot inside the window searched
    fixed_slot: bool = True
    searches: int = 0
    windows: list[tuple[str, str]] = field(default_factory=list)
    bookings: dict[str, dict[str, Any]] = field(default_factory=dict)
    booking_posts: int = 0
    cancelled: list[str] = field(default_factory=list)
    #: answer 500 after recording the booking this many times (the outcome is lost)
    fail_after_booking: int = 0
    #: answer 503 without booking this many times (nothing happened)
    fail_before_booking: int = 0
    #: when set, a booking is recorded, ``post_seen`` is set and the answer waits for ``release``
    hold: bool = False
    post_seen: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    #: slot id -> hold id (held slots are left out of searches)
    holds: dict[str, str] = field(default_factory=dict)
    #: Idempotency-Key → slot of each hold made (the same key again answers the same hold)
    hold_keys: dict[str, str] = field(default_factory=dict)
    hold_posts: int = 0
    released: list[str] = field(default_factory=list)
    #: made to appear now by ``POST /_sandbox/slots``
    forced: bool = False
    url: str = ""
    clock: Callable[[], float] = time.monotonic
    #: (consulate, from, to) → the watch of that window: its first search and its count
    watches: dict[Watch, WatchSeen] = field(default_factory=dict)
    #: (consulate, from, to) → how many of its slots were booked (the next is half an hour later)
    booked_in: dict[Watch, int] = field(default_factory=dict)
    #: slot id → the watch it was offered to (a booking of it ends that watch)
    offered: dict[str, Watch] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def appeared(self, watch: Watch | None = None) -> bool:
        """Has the slot of ``watch`` appeared yet (None: of any watch)? Forced, by the count of
        all searches, or by the watch's own age or count."""
        if self.forced or self.searches >= self.appear_after:
            return True
        if watch is None:
            return any(self._due(seen) for seen in self.watches.values())
        seen = self.watches.get(watch)
        return seen is not None and self._due(seen)

    def _due(self, seen: WatchSeen) -> bool:
        by_time = self.appear_after_s is not None and (
            self.clock() - seen.first >= self.appear_after_s
        )
        n = self.appear_after_watch_searches
        return by_time or (n is not None and seen.searches >= n)

    def slot_for(self, consulate: str, date_from: str, booked: int = 0) -> dict[str, Any]:
        """The slot that appears for a search from ``date_from`` after ``booked`` bookings of
        that window's earlier slots (09:00 UTC on its first day, then half an hour later each)."""
        if self.fixed_slot:
            return dict(FIXED_SLOT)
        day = date_from[:10] or "2027-03-14"
        hour, minute = divmod(9 * 60 + 30 * booked, 60)
        hhmm = f"{hour % 24:02d}{minute:02d}"
        return {"id": f"{consulate}-{day}-{hhmm}", "at": f"{day}T{hhmm[:2]}:{hhmm[2:]}:00Z"}

    def route(self, req: Request) -> Answer:
        """The HTTP entry point."""
        shared = page_or_admin(req, self._lock, self._page, self._admin)
        return shared if shared is not None else self._consulate(req)

    def _consulate(self, req: Request) -> Answer:
        """``/consulates/<id>/…``: search slots, hold or release one, book, cancel a booking."""
        parts = req.path.strip("/").split("/")
        if len(parts) < 3 or parts[0] != "consulates":
            return Answer(404, {"error": f"no route {req.method} {req.path}"})
        consulate, what, rest = parts[1], parts[2], parts[3:]
        if what == "slots" and not rest and req.method == "GET":
            return self._search(consulate, req)
        if what == "slots" and len(rest) == 2 and rest[1] == "hold":
            return self._hold(req.method, rest[0], req.header("Idempotency-Key"))
        if what == "bookings" and not rest and req.method == "POST":
            return self._book(req)
        if what == "bookings" and len(rest) == 1 and req.method == "DELETE":
            return self._cancel(rest[0])
        return Answer(404, {"error": f"no route {req.method} {req.path}"})

    def _cancel(self, booking: str) -> Answer:
        with self._lock:
            self.cancelled.append(booking)
        return Answer(200, {"cancelled": True})

    def _search(self, consulate: str, req: Request) -> Answer:
        with self._lock:
            self.searches += 1
            window = (req.query.get("from", ""), req.query.get("to", ""))
            self.windows.append(window)
            watch = (consulate, *window)
            seen = self.watches.setdefault(watch, WatchSeen(first=self.clock()))
            seen.searches += 1
            slots = []
            if self.appeared(watch):
                slot = self.slot_for(consulate, window[0], self.booked_in.get(watch, 0))
                self.offered[slot["id"]] = watch
                slots = [slot] if slot["id"] not in self.holds else []
        return Answer(200, {"slots": slots})

    def _hold(self, method: str, slot: str, key: str | None = None) -> Answer:
        with self._lock:
            if method == "POST":
                self.hold_posts += 1
                if key and self.hold_keys.get(key) == slot and slot in self.holds:
                    return Answer(201, {"hold_id": self.holds[slot], "slot": slot})  # a replay
                if slot in self.holds:
                    return Answer(409, {"error": f"slot {slot} is already held"})
                self.holds[slot] = f"hold-{self.hold_posts}"
                if key:
                    self.hold_keys[key] = slot
                return Answer(201, {"hold_id": self.holds[slot], "slot": slot})
            if method == "DELETE":
                held = self.holds.pop(slot, None) is not None
                if held:
                    self.released.append(slot)
                return Answer(200, {"slot": slot, "released": held})
        return Answer(405, {"error": f"{method} on a hold"})

    def _book(self, req: Request) -> Answer:
        key = req.header("Idempotency-Key") or ""
        body = req.body if isinstance(req.body, dict) else {}
        with self._lock:
            self.booking_posts += 1
            if self.fail_before_booking > 0:
                self.fail_before_booking -= 1
                return Answer(503, {"error": "try later"})
            if key not in self.bookings:
                self.bookings[key] = {
                    "id": f"booking-{len(self.bookings) + 1}",
                    "slot": body.get("slot"),
                }
                slot = body.get("slot")
                slot_id = str(slot.get("id") if isinstance(slot, dict) else slot)
                self.holds.pop(slot_id, None)  # a booking ends the hold on its slot
                self._end_watch(slot_id)
            lose = self.fail_after_booking > 0
            if lose:
                self.fail_after_booking -= 1
            booking = dict(self.bookings[key])
        if self.hold:
            self.post_seen.set()
            self.release.wait(60)
        if lose:
            return Answer(500, {"error": "internal"})
        return Answer(201, booking)

    def _end_watch(self, slot_id: str) -> None:
        """A booked slot ends the watch it was offered to (caller holds the lock): the next
        search of that window starts a new watch, offered the next slot once it appears."""
        watch = self.offered.pop(slot_id, None)
        if watch is not None and not self.fixed_slot:
            self.watches.pop(watch, None)
            self.booked_in[watch] = self.booked_in.get(watch, 0) + 1

    def _admin(self, req: Request) -> Answer:
        if req.method == "GET" and req.path == "/_sandbox/state":
            return Answer(
                200,
                {
                    "appeared": self.appeared(),
                    "searches": self.searches,
                    "bookings": list(self.bookings.values()),
                    "cancelled": self.cancelled,
                    "holds": self.holds,
                    "released": self.released,
                },
            )
        if req.method == "POST" and req.path == "/_sandbox/slots":
            self.forced = True
            return Answer(200, {"appeared": True})
        return Answer(404, {"error": f"no route {req.method} {req.path}"})

    def _page(self) -> str:
        rows = [
            {"what": "slots", "detail": "appeared" if self.appeared() else "none yet"},
            {"what": "searches", "detail": str(self.searches)},
        ]
        rows += [
            {
                "what": b["id"],
                "detail": str(b["slot"]) + (" (cancelled)" if b["id"] in self.cancelled else ""),
            }
            for b in self.bookings.values()
        ]
        return render_page("Sandbox visa appointments", WHAT, rows, ["what", "detail"])


def serve_visa(
    visa: VisaSandbox | None = None, *, host: str = "127.0.0.1", port: int = 0
) -> Served[VisaSandbox]:
    """A sandbox visa service on ``host:port`` (0: a free port), serving from a daemon thread
    until ``shutdown`` (or the end of a ``with`` block), which first lets go of a booking held
    by ``hold``; ``url`` is set on the state."""
    state = visa if visa is not None else VisaSandbox()
    server = JsonServer(state.route, what=WHAT, host=host, port=port).start()
    state.url = server.url
    return Served(state, server, on_stop=state.release.set)
