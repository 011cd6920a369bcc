"""ALTCHA challenges (``seckill.store.sale.admission.challenge``) on a real Valkey, one server
and the cluster: a solution is accepted once, for its user and activity only, until it expires;
malformed, tampered, forged and wrong solutions are refused (and do not use up the genuine
one); the difficulty follows the issue rate, stepwise and monotonically; every key is in the
activity's slot; Redis errors reach the caller. Solutions come from the altcha library's own
solver."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from seckill.domain import errors
from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.store.plumbing.connection import close_client
from seckill.store.plumbing.keys import KeySpace
from seckill.store.sale.admission import challenge
from seckill.store.sale.admission.challenge import Challenges
from tests.support.backends import BOTH_BACKENDS
from tests.support.challenge import solve
from tests.support.valkey import keys_of

SECRET = "test-altcha-secret-0123456789abcdef"
SMALL = 2_000  # the tests' base maxnumber: the library's solver takes milliseconds


@pytest.fixture
def challenges(rds: redis.Redis, prefix: str) -> Challenges:
    return Challenges(rds, KeySpace(prefix), SECRET, base=SMALL, cap=16 * SMALL)


def new_aid() -> str:
    return f"a{uuid.uuid4().hex[:10]}"


def fields(payload: str) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(base64.b64decode(payload))
    return decoded


def encode(solution: object) -> str:
    return base64.b64encode(json.dumps(solution).encode()).decode()


def refused(challenges: Challenges, aid: str, uid: str, payload: object) -> str:
    """Verify must refuse: the message."""
    with pytest.raises(errors.ChallengeFailed) as caught:
        challenges.verify(aid, uid, payload)
    assert caught.value.code == "challenge_failed" and caught.value.status == 403
    return caught.value.message


def until_next_second(margin: float = 0.02) -> None:
    time.sleep(math.ceil(time.time()) - time.time() + margin)


@BOTH_BACKENDS
def test_a_challenge_names_its_activity_user_and_expiry(challenges: Challenges) -> None:
    aid = new_aid()
    before = time.time()
    issued = challenges.issue(aid, "alice@example.com")
    assert issued["algorithm"] == "SHA-256" and issued["maxnumber"] == SMALL
    assert len(issued["challenge"]) == 64 and len(issued["signature"]) == 64
    nonce, _, query = issued["salt"].partition("?")
    assert len(nonce) >= 20
    params = dict(part.split("=") for part in query.rstrip("&").split("&"))
    assert params["aid"] == aid and params["uid"] == "alice%40example.com"
    assert before + 300 <= int(params["expires"]) <= time.time() + 301


@BOTH_BACKENDS
def test_a_solution_is_accepted_once(challenges: Challenges, rds: redis.Redis,
                                     prefix: str) -> None:
    aid = new_aid()
    payload = solve(challenges.issue(aid, "alice"))
    challenges.verify(aid, "alice", payload)
    assert "used already" in refused(challenges, aid, "alice", payload)
    used = KeySpace(prefix).challenge_used(aid, fields(payload)["signature"][:32])
    assert rds.get(used) == "1"
    margin = challenge.CLOCK_MARGIN_S * 1000
    assert 299_000 + margin <= rds.pttl(used) <= 301_000 + margin
    # A new challenge for the same user is a new solution.
    challenges.verify(aid, "alice", solve(challenges.issue(aid, "alice")))


@BOTH_BACKENDS
def test_another_users_solution_is_refused_and_stays_its_owners(
        challenges: Challenges) -> None:
    aid = new_aid()
    payload = solve(challenges.issue(aid, "alice"))
    assert "another activity or user" in refused(challenges, aid, "bob", payload)
    assert "another activity or user" in refused(challenges, aid, "alice2", payload)
    challenges.verify(aid, "alice", payload)


@BOTH_BACKENDS
def test_another_activitys_solution_is_refused(challenges: Challenges) -> None:
    aid, other = new_aid(), new_aid()
    payload = solve(challenges.issue(aid, "alice"))
    assert "another activity or user" in refused(challenges, other, "alice", payload)
    challenges.verify(aid, "alice", payload)


def test_a_forged_salt_is_refused(challenges: Challenges) -> None:
    """Rewriting the salt (another user, a later expiry) and rehashing the challenge leaves the
    signature of the original challenge: refused."""
    aid = new_aid()
    genuine = fields(solve(challenges.issue(aid, "alice")))
    for old, new in (("uid=alice", "uid=bob"), ("expires=", "expires=9")):
        salt = genuine["salt"].replace(old, new)
        assert salt != genuine["salt"]
        rehashed = hashlib.sha256(f"{salt}{genuine['number']}".encode()).hexdigest()
        forged = {**genuine, "salt": salt, "challenge": rehashed}
        uid = "bob" if "bob" in salt else "alice"
        assert "not a solution" in refused(challenges, aid, uid, encode(forged))
    challenges.verify(aid, "alice", encode(genuine))


@BOTH_BACKENDS
def test_an_expired_solution_is_refused(rds: redis.Redis, prefix: str) -> None:
    short = Challenges(rds, KeySpace(prefix), SECRET, ttl_s=1, base=SMALL, cap=SMALL)
    aid = new_aid()
    fresh, late = solve(short.issue(aid, "alice")), solve(short.issue(aid, "alice"))
    short.verify(aid, "alice", fresh)  # within its second: accepted
    expires = int(fields(late)["salt"].split("expires=")[1].split("&")[0])
    assert expires <= time.time() + 2
    time.sleep(max(0.0, expires - time.time()) + 0.1)
    assert "expired" in refused(short, aid, "alice", late)


def _number(change: Callable[[int], Any]) -> Callable[[str], object]:
    return lambda payload: encode({**fields(payload), "number": change(fields(payload)["number"])})


def _without(name: str) -> Callable[[str], object]:
    return lambda payload: encode({k: v for k, v in fields(payload).items() if k != name})


MALFORMED: dict[str, Callable[[str], object]] = {
    "wrong number": _number(lambda n: n + 1),
    "number as text": _number(str),
    "number as float": _number(float),
    "number as bool": lambda p: encode({**fields(p), "number": True}),
    "garbled base64": lambda p: p[:10] + "!!" + p[12:],
    "truncated base64": lambda p: p[:-3],
    "base64 of text": lambda p: base64.b64encode(b"not json").decode(),
    "a JSON list": lambda p: encode(list(fields(p).values())),
    "no signature": _without("signature"),
    "no salt": _without("salt"),
    "no number": _without("number"),
    "SHA-1": lambda p: encode({**fields(p), "algorithm": "SHA-1"}),
    "too long": lambda p: p + "=" * 5000,
    "not base64 at all": lambda p: "ünïcode",
    "empty": lambda p: "",
    "missing": lambda p: None,
    "a number": lambda p: 12345,
    "an object": lambda p: fields(p),
    "bytes": lambda p: p.encode(),
}


@pytest.mark.parametrize("corrupt", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_solution_is_refused_and_leaves_the_genuine_one_good(
        challenges: Challenges, corrupt: Callable[[str], object]) -> None:
    aid = new_aid()
    payload = solve(challenges.issue(aid, "alice"))
    refused(challenges, aid, "alice", corrupt(payload))
    challenges.verify(aid, "alice", payload)


TAMPERED: dict[str, Callable[[str, str], str]] = {
    "one hex digit changed": lambda sig, other: sig[:5] + ("0" if sig[5] != "0" else "1")
    + sig[6:],
    "upper case": lambda sig, other: sig.upper(),
    "another challenge's": lambda sig, other: other,
    "truncated": lambda sig, other: sig[:32],
}


@pytest.mark.parametrize("tamper", TAMPERED.values(), ids=TAMPERED.keys())
def test_a_tampered_signature_is_refused(challenges: Challenges,
                                         tamper: Callable[[str, str], str]) -> None:
    aid = new_aid()
    genuine = fields(solve(challenges.issue(aid, "alice")))
    other = challenges.issue(aid, "alice")["signature"]
    tampered = {**genuine, "signature": tamper(genuine["signature"], other)}
    assert tampered != genuine
    assert "not a solution" in refused(challenges, aid, "alice", encode(tampered))
    challenges.verify(aid, "alice", encode(genuine))


@BOTH_BACKENDS
def test_the_difficulty_follows_the_issue_rate(challenges: Challenges, rds: redis.Redis,
                                               prefix: str) -> None:
    """Within one second the n-th challenge is priced at rate n; the next second reads the last
    one's count; once a second has passed with few issues, the price is back to base."""
    aid = new_aid()
    until_next_second()
    second = int(time.time())
    seen = [challenges.issue(aid, f"u{i}")["maxnumber"] for i in range(60)]
    assert int(time.time()) == second, "60 issues took more than a second"
    assert seen == [challenges.difficulty(n) for n in range(1, 61)]
    assert seen[0] == SMALL and seen[-1] == 2 * SMALL == challenges.difficulty(50)
    counter = KeySpace(prefix).challenges_issued(aid, second)
    assert rds.get(counter) == "60"
    assert 0 < rds.ttl(counter) <= challenge.COUNTER_TTL_S
    until_next_second()
    assert challenges.issue(aid, "next")["maxnumber"] == 2 * SMALL  # last second's 60
    until_next_second()
    assert challenges.issue(aid, "later")["maxnumber"] == SMALL  # last second's 1


def test_the_default_curve() -> None:
    curve = Challenges(redis.Redis(), KeySpace("t"), SECRET)
    assert (curve.base, curve.cap) == (challenge.BASE_MAXNUMBER, challenge.CAP_MAXNUMBER)
    table = {0: 50_000, 49.9: 50_000, 50: 100_000, 199: 100_000, 200: 200_000, 799: 200_000,
             800: 400_000, 3_199: 400_000, 3_200: 800_000, 12_799: 800_000, 12_800: 1_000_000,
             1e9: 1_000_000, math.inf: 1_000_000, -1: 50_000, math.nan: 50_000}
    assert {rate: curve.difficulty(rate) for rate in table} == table


@given(
    st.integers(1, 10**7), st.integers(0, 10**7),
    st.floats(allow_nan=False), st.floats(allow_nan=False),
)
def test_the_difficulty_is_monotonic_and_bounded(base: int, extra: int, a: float,
                                                 b: float) -> None:
    curve = Challenges(redis.Redis(), KeySpace("t"), SECRET, base=base, cap=base + extra)
    low, high = sorted((a, b))
    assert base <= curve.difficulty(low) <= curve.difficulty(high) <= base + extra
    assert curve.difficulty(math.inf) == base + extra


@BOTH_BACKENDS
def test_every_key_is_in_the_activitys_slot(challenges: Challenges, rds: redis.Redis,
                                            prefix: str) -> None:
    aid = new_aid()
    challenges.verify(aid, "alice", solve(challenges.issue(aid, "alice")))
    written = keys_of(rds, prefix)
    assert {k.split(":")[2] for k in written} == {"altcha-issued", "altcha-used"}, written
    assert {key_slot(k.encode()) for k in written} == {key_slot(aid.encode())}


def test_bad_settings_are_refused(rds: redis.Redis, prefix: str) -> None:
    keys = KeySpace(prefix)
    with pytest.raises(ValueError, match="secret"):
        Challenges(rds, keys, "")
    for ttl_s, base, cap in ((0, 10, 10), (1, 0, 10), (1, 10, 9)):
        with pytest.raises(ValueError, match="ttl_s"):
            Challenges(rds, keys, SECRET, ttl_s, base=base, cap=cap)
    Challenges(rds, keys, SECRET, 1, base=10, cap=10)


@pytest.fixture
def stopped_valkey(tmp_path: Path) -> Iterator[EmbeddedValkey]:
    server = EmbeddedValkey(tmp_path / "valkey", appendfsync="everysec").start()
    yield server
    server.stop()


def test_redis_errors_reach_the_caller(stopped_valkey: EmbeddedValkey) -> None:
    client = redis.Redis.from_url(stopped_valkey.url, decode_responses=True, socket_timeout=2)
    try:
        down = Challenges(client, KeySpace("t"), SECRET, base=SMALL, cap=SMALL)
        aid = new_aid()
        payload = solve(down.issue(aid, "alice"))
        stopped_valkey.stop()
        with pytest.raises(redis.RedisError):
            down.issue(aid, "alice")
        with pytest.raises(redis.RedisError):
            down.verify(aid, "alice", payload)
    finally:
        close_client(client)
