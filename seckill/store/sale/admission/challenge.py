"""ALTCHA proof-of-work challenges for joining the queue of a ``"challenge": true`` activity.

A challenge costs the gateway nothing to remember: its salt carries the activity, the user and
an expiry, and its HMAC signature proves that this gateway issued it, so any process verifies
any solution. Only two things live in Redis, in the activity's slot: a per-second count of the
challenges issued, whose rate sets the next ones' difficulty (a crowd pays more work per join),
and a mark per accepted solution (``SET NX``), so that each is accepted once.
"""

from __future__ import annotations

import base64
import datetime
import math
import time
import urllib.parse
from typing import Any, Final

import altcha
import orjson

from seckill.domain import errors
from seckill.store.plumbing.connection import Client
from seckill.store.plumbing.keys import KeySpace

ALGORITHM: Final = "SHA-256"
# The difficulty curve: maxnumber is BASE_MAXNUMBER while fewer than RISE_FROM challenges are
# issued per second, doubled at each RISE_FACTOR-fold rise of that rate, at most CAP_MAXNUMBER.
# What each step costs a browser: bench/results/altcha_solve.md (python -m bench.altcha_solve).
BASE_MAXNUMBER = 50_000
CAP_MAXNUMBER = 1_000_000
RISE_FROM = 50.0
RISE_FACTOR = 4.0
# How long an issue counter outlives its second: the next second reads it.
COUNTER_TTL_S = 3
# A used-solution mark outlives its challenge's expiry by this much, for gateways whose clocks
# run behind this one's.
CLOCK_MARGIN_S = 60
# A solution is ~300 bytes of base64; anything far longer is not one.
MAX_PAYLOAD_CHARS = 4096
FIELDS = {"algorithm": str, "challenge": str, "number": int, "salt": str, "signature": str}


class Challenges:
    """Issues an activity's ALTCHA challenges to users and accepts each solution once."""

    def __init__(
        self,
        client: Client,
        keys: KeySpace,
        secret: str,
        ttl_s: int = 300,
        *,
        base: int = BASE_MAXNUMBER,
        cap: int = CAP_MAXNUMBER,
    ) -> None:
        if not secret:
            raise ValueError("the challenges' HMAC secret is empty")
        if ttl_s < 1 or base < 1 or cap < base:
            raise ValueError(f"need ttl_s >= 1 and 1 <= base <= cap, not {ttl_s}, {base}, {cap}")
        self.client = client
        self.keys = keys
        self.secret = secret
        self.ttl_s = ttl_s
        self.base = base
        self.cap = cap

    def difficulty(self, joins_per_second: float) -> int:
        """The maxnumber for a rate of challenges issued per second: ``base`` below
        ``RISE_FROM``, doubled at each fourfold rise of the rate from there, at most ``cap``."""
        maxnumber = self.base
        threshold = RISE_FROM
        while joins_per_second >= threshold and maxnumber < self.cap:
            maxnumber *= 2
            threshold *= RISE_FACTOR
        return min(maxnumber, self.cap)

    def issue(self, aid: str, uid: str) -> dict[str, Any]:
        """A new challenge for ``uid`` on ``aid``: the contract's ``algorithm``, ``challenge``,
        ``maxnumber``, ``salt`` (which carries the activity, user and expiry) and
        ``signature``; one round trip counts it and reads the rate."""
        now = time.time()
        rate = self._count_issue(aid, int(now))
        # Rounded up: a solution is good for at least ttl_s (altcha compares whole seconds).
        expires = datetime.datetime.fromtimestamp(math.ceil(now + self.ttl_s), datetime.UTC)
        challenge = altcha.create_challenge_v1(altcha.ChallengeOptionsV1(
            algorithm=ALGORITHM,
            max_number=self.difficulty(rate),
            hmac_key=self.secret,
            expires=expires,
            params={"aid": aid, "uid": uid},
        ))
        return {
            "algorithm": challenge.algorithm,
            "challenge": challenge.challenge,
            "maxnumber": challenge.max_number,
            "salt": challenge.salt,
            "signature": challenge.signature,
        }

    def verify(self, aid: str, uid: str, payload: object) -> None:
        """Accept ``payload`` (the widget's base64 solution) once, for the user and activity
        its challenge was issued to, until it expires; otherwise raise ChallengeFailed."""
        solution = _decode(payload)
        ok, problem = altcha.verify_solution_v1(solution, self.secret, check_expires=True)
        if problem is not None and "expired" in problem:
            raise errors.ChallengeFailed("this challenge has expired: fetch a new one")
        if not ok:
            raise errors.ChallengeFailed("this is not a solution of a challenge we issued")
        # The salt is signed: what it says is what issue() wrote.
        params = _salt_params(solution.salt)
        expires = params.get("expires", "")
        if not expires.isdecimal():
            raise errors.ChallengeFailed("this challenge carries no expiry")
        if params.get("aid") != aid or params.get("uid") != uid:
            raise errors.ChallengeFailed("this challenge was issued for another activity or user")
        mark_ms = (int(expires) + CLOCK_MARGIN_S) * 1000 - int(time.time() * 1000)
        used = self.keys.challenge_used(aid, solution.signature[:32])
        if not self.client.set(used, 1, nx=True, px=max(mark_ms, 1)):
            raise errors.ChallengeFailed("this solution has been used already: solve a new one")

    def _count_issue(self, aid: str, second: int) -> int:
        """Count one issue in this second; the rate: this second's count or the last one's,
        whichever is higher (so a new second does not reset the difficulty)."""
        current = self.keys.challenges_issued(aid, second)
        pipe = self.client.pipeline(transaction=False)
        pipe.incr(current)
        pipe.expire(current, COUNTER_TTL_S)
        pipe.get(self.keys.challenges_issued(aid, second - 1))
        issued, _, previous = pipe.execute()
        return max(int(issued), int(previous or 0))


def _decode(payload: object) -> altcha.PayloadV1:
    """The solution's fields from the base64 JSON the widget sends; ChallengeFailed unless it is
    one, each field of its type (the library would hash a float or a bool number as text)."""
    if not isinstance(payload, str) or not payload:
        raise errors.ChallengeFailed()
    if len(payload) > MAX_PAYLOAD_CHARS:
        raise errors.ChallengeFailed("the challenge solution is too long")
    try:
        fields = orjson.loads(base64.b64decode(payload, validate=True))
    except ValueError:  # binascii.Error, orjson.JSONDecodeError, or not ASCII
        raise errors.ChallengeFailed("the challenge solution is not base64 JSON") from None
    if not isinstance(fields, dict) or any(
        type(fields.get(name)) is not kind for name, kind in FIELDS.items()
    ):
        raise errors.ChallengeFailed("the challenge solution lacks a field or has a wrong one")
    if fields["algorithm"] != ALGORITHM:
        raise errors.ChallengeFailed(f"the challenge solution's algorithm is not {ALGORITHM}")
    return altcha.PayloadV1(ALGORITHM, fields["challenge"], fields["number"], fields["salt"],
                            fields["signature"])


def _salt_params(salt: str) -> dict[str, str]:
    """The parameters in a salt's query part, each present once (else left out)."""
    query = salt.partition("?")[2]
    pairs = urllib.parse.parse_qs(query, keep_blank_values=True)
    return {name: values[0] for name, values in pairs.items() if len(values) == 1}
