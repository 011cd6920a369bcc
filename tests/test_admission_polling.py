"""A queue poll is one Redis round trip (on the session's single Valkey, whose command
statistics count every call)."""

from __future__ import annotations

from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from tests.support.admission import join, poll, queued_activity, wait_for_start
from tests.support.api import expect


def test_a_poll_is_one_round_trip(client: FlaskClient, app: Flask, rds: Any) -> None:
    """100 polls of a waiting user: 100 EVALSHAs, and 100 socket reads on the server (the
    background threads' few aside): one round trip per poll."""
    activity = queued_activity(client, total=1, starts_in=0.2)
    aid = activity["id"]
    for uid in ("front", "back"):
        expect(join(client, aid, uid), 200)
    wait_for_start(activity)
    poll(client, aid, "back")  # warm: the activity's copy, the script loaded

    def counts() -> tuple[int, int]:
        """EVALSHA calls, and the server's socket reads (round trips; ours, this read's own
        INFO, and the background threads')."""
        calls: Any = rds.info("commandstats")
        reads: Any = rds.info("stats")
        return (int(calls.get("cmdstat_evalsha", {}).get("calls", 0)),
                int(reads["total_reads_processed"]))

    evalsha0, reads0 = counts()
    for _ in range(100):
        poll(client, aid, "back")
    evalsha1, reads1 = counts()
    assert evalsha1 - evalsha0 == 100
    assert reads1 - reads0 <= 100 + 10, reads1 - reads0


def test_a_purchase_ends_the_admission_in_its_own_send_even_after_a_script_flush(
        client: FlaskClient, app: Flask, rds: Any) -> None:
    """The purchase carries "the buyer bought" to the queue in the same send; when Redis has
    forgotten the queue's script (a restart, SCRIPT FLUSH) that command fails and the gateway
    ends the admission with a call of its own: the next user is still admitted at once."""
    from tests.support.admission import buy_admitted, state

    activity = queued_activity(client, total=2, starts_in=0.2)
    aid = activity["id"]
    for uid in ("a", "b", "c"):
        expect(join(client, aid, uid), 200)
    wait_for_start(activity)
    admitted = [u for u in ("a", "b", "c") if poll(client, aid, u)["status"] == "admitted"]
    assert len(admitted) == 2
    rds.script_flush()
    expect(buy_admitted(client, aid, admitted[0]), 200)
    assert app.extensions["seckill"].client.zscore(
        app.extensions["seckill"].keys.admitted(aid), admitted[0]) is None
    now = state(client, aid)
    assert (now["admitted"], now["remaining"]) == (1, 1), now
