"""Login lockout that nobody can turn against a colleague (django-axes, database handler).

Three rules, all over the failures of the last QASSIST_LOGIN_LOCKOUT_MINUTES:

- **A username from one address** (the pair) is locked after QASSIST_LOGIN_FAILURE_LIMIT
  failures. Someone guessing a colleague's password locks only their own guessing: the
  colleague, from any other address, logs in as usual.
- **An address** is locked after QASSIST_LOGIN_ADDRESS_FAILURE_LIMIT failures for any usernames:
  one machine spraying passwords over many accounts stops. Higher than the pair's limit, so that
  an office behind one NAT address is not locked by a few people's typos.
- **A username under attack from many addresses** is slowed down, not locked: once it has had
  QASSIST_LOGIN_FAILURE_LIMIT failures from all addresses together, an address that has itself
  failed for it may try it again only QASSIST_LOGIN_USER_THROTTLE_SECONDS after the username's
  latest failure. The attack's addresses share one slow lane, so a botnet gets about one guess
  per interval however many addresses it has, while an address that has not failed for this
  username (the person at their own desk) goes straight through. An address the username has
  logged in from (in the last KNOWN_ADDRESS_DAYS) keeps a lane of its own: it waits the
  interval after its own latest failure, not the attack's, so an owner who mistyped once is
  not held out by attackers guessing from fresh addresses every few seconds (issue #32: the
  shared lane never came free). Nothing sleeps on the server: a delay held per request would
  let an attacker tie up the web process's threads.

Attempts refused while a lock holds are not recorded (AXES_RESET_COOL_OFF_ON_FAILURE_DURING_-
LOCKOUT is off): trying again during a lockout never extends it. A lock ends by itself, or when
staff lift it (Admin › Axes › Access attempts: delete the rows; `manage.py axes_reset_username
NAME` or `axes_reset_ip ADDRESS`). A successful login clears its own pair's failures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from axes.attempts import get_cool_off_threshold
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username, get_cool_off
from axes.models import AccessAttempt, AccessLog
from django.conf import settings
from django.db.models import Max, QuerySet, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from qassist.errors import json_error, wants_json

PAIR = "pair"
ADDRESS = "address"
THROTTLE = "throttle"
_ATTR = "qassist_lockout"


@dataclass(frozen=True)
class Lockout:
    """Why logging in is refused (PAIR, ADDRESS or THROTTLE), and until when."""

    reason: str
    until: datetime

    def seconds_left(self, now: datetime | None = None) -> int:
        left = (self.until - (now or timezone.now())).total_seconds()
        return max(1, math.ceil(left))


def _failures(attempts: QuerySet[AccessAttempt]) -> tuple[int, datetime | None]:
    row = attempts.aggregate(n=Sum("failures_since_start"), last=Max("attempt_time"))
    return int(row["n"] or 0), row["last"]


KNOWN_ADDRESS_DAYS = 90


def _known_address(username: str, address: str | None) -> bool:
    """Whether `username` logged in successfully from `address` lately (axes' access log)."""
    if not address:
        return False
    since = timezone.now() - timedelta(days=KNOWN_ADDRESS_DAYS)
    found = AccessLog.objects.filter(username=username, ip_address=address)
    return bool(found.filter(attempt_time__gte=since).exists())


class LoginLockoutHandler(AxesDatabaseHandler):  # type: ignore[misc]  # axes is untyped
    """Axes' database handler, with the rules above instead of one limit per parameter."""

    def lockout(
        self, request: HttpRequest, credentials: dict[str, Any] | None, *, throttle: bool
    ) -> Lockout | None:
        """The lock this login attempt meets, if any. `throttle`: also the slow lane of a
        username under attack (checked before an attempt, not after a failure is counted)."""
        cool_off = get_cool_off(request) or timedelta(0)
        recent = AccessAttempt.objects.filter(attempt_time__gte=get_cool_off_threshold(request))
        username = get_client_username(request, credentials)
        address = request.axes_ip_address  # type: ignore[attr-defined]
        pair, pair_last = _failures(recent.filter(username=username, ip_address=address))
        if pair_last is not None and pair >= settings.AXES_FAILURE_LIMIT:
            return Lockout(PAIR, pair_last + cool_off)
        if address:
            from_address, address_last = _failures(recent.filter(ip_address=address))
            if (
                address_last is not None
                and from_address >= settings.QASSIST_LOGIN_ADDRESS_FAILURE_LIMIT
            ):
                return Lockout(ADDRESS, address_last + cool_off)
        if throttle and username and pair:
            user, user_last = _failures(recent.filter(username=username))
            lane = timedelta(seconds=float(settings.QASSIST_LOGIN_USER_THROTTLE_SECONDS))
            if user_last is not None and user >= settings.AXES_FAILURE_LIMIT:
                # The owner's own address: its own lane, timed from its own latest failure.
                last = pair_last if _known_address(username, address) else user_last
                if last is not None and timezone.now() < last + lane:
                    return Lockout(THROTTLE, last + lane)
        return None

    def is_locked(self, request: HttpRequest, credentials: dict[str, Any] | None = None) -> bool:
        lock = self.lockout(request, credentials, throttle=True)
        setattr(request, _ATTR, lock)
        return lock is not None

    def get_failures(self, request: HttpRequest, credentials: dict[str, Any] | None = None) -> int:
        """What axes compares with AXES_FAILURE_LIMIT after counting a failure: the limit
        itself when a rule now locks, else the pair's failures."""
        lock = self.lockout(request, credentials, throttle=False)
        if lock is not None:
            setattr(request, _ATTR, lock)
            return int(settings.AXES_FAILURE_LIMIT)
        pair = self.get_user_attempts(request, credentials)
        return max((_failures(attempts)[0] for attempts in pair), default=0)


_EXPLAINED = {
    PAIR: "Too many failed logins to this account from this address.",
    ADDRESS: "Too many failed logins from this address.",
    THROTTLE: "This account has had many failed logins from several places, so each of "
    "them may try again only now and then.",
}


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None, credentials: Any = None
) -> HttpResponse:
    """The 429 for a refused login (AXES_LOCKOUT_CALLABLE): why, until when, and who can lift
    it; JSON for a fetch call, the page for people. `Retry-After` either way."""
    lock: Lockout | None = getattr(request, _ATTR, None)
    if lock is None:  # not ours (should not happen): the longest a lock lasts
        lock = Lockout(PAIR, timezone.now() + (get_cool_off(request) or timedelta(0)))
    seconds = lock.seconds_left()
    message = (
        f"{_EXPLAINED[lock.reason]} Try again in {_duration(seconds)}; attempts made meanwhile "
        "are not counted. An administrator can lift the lock sooner."
    )
    if wants_json(request):
        return json_error("login_locked", message, status=429, retry_after=seconds)
    context = {
        "reason": lock.reason,
        "explained": _EXPLAINED[lock.reason],
        "until": lock.until,
        "wait": _duration(seconds),
    }
    response = render(request, "registration/locked_out.html", context, status=429)
    response.headers["Retry-After"] = str(seconds)
    return response


def _duration(seconds: int) -> str:
    if seconds < 90:
        return f"{seconds} seconds"
    return f"{math.ceil(seconds / 60)} minutes"
