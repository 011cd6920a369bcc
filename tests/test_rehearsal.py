"""A rehearsal (``seckill drill --target``): an activity that sells like any other but is left
out of the sale's numbers, and the drill run against a deployment on one."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.support.api import activity_stats, buy, create_activity, expect
from tests.support.cli import clean_environ
from tests.support.metrics import of, scrape
from tests.support.tokens import ADMIN
from tests.support.upstack import running_up, up_env
from tests.support.valkey import keys_of

SECKILL = Path(sys.executable).parent / "seckill"


def test_a_rehearsal_sells_is_shown_as_one_and_stays_out_of_the_sale_gauges(
    client, make_app, rds, prefix
):
    real = create_activity(client, total=5)["id"]
    made = create_activity(client, total=5, rehearsal=True)
    drill = made["id"]
    assert made["rehearsal"] is True and "rehearsal" not in client.get(
        f"/seckill/activities/{real}").get_json()
    assert client.get(f"/seckill/activities/{drill}").get_json()["rehearsal"] is True
    for aid in (real, drill):
        assert buy(client, aid, "alice").status_code == 200
    assert activity_stats(client, drill)["sold"] == 1
    time.sleep(1.1)  # the census is kept a second
    samples = scrape(make_app().test_client())
    assert of(samples, "seckill_activity_sold", activity=real) == 1
    assert of(samples, "seckill_activity_sold", activity=drill) is None
    assert of(samples, "seckill_activity_state", activity=drill, state="open") is None
    # The deployment's health still counts its orders: no worker runs, one is pending.
    assert (of(samples, "seckill_orders_oldest_pending_seconds", activity=drill) or 0) > 0
    rows = {row["id"]: row for row in
            client.get("/admin/console/state", headers=ADMIN).get_json()["activities"]}
    assert rows[drill]["rehearsal"] is True and "rehearsal" not in rows[real]
    # Redis loses it: rebuilt from the database, still a rehearsal.
    rds.delete(*[k for k in keys_of(rds, prefix) if f"{{{drill}}}" in k])
    assert buy(client, drill, "bob").status_code == 200
    assert client.get(f"/admin/activities/{drill}", headers=ADMIN).get_json()["rehearsal"] is True


def test_rehearsal_is_true_or_false(client):
    for value in ("yes", 1, None):
        body = {"id": "r1", "name": "x", "total": 1, "starts_at": "2026-01-01T00:00:00Z",
                "ends_at": "2099-01-01T00:00:00Z", "rehearsal": value}
        answer = expect(client.post("/admin/activities", json=body, headers=ADMIN), 400,
                        "bad_request")
        assert answer["field"] == "rehearsal", answer


def test_the_drill_against_a_running_deployment_uses_one_rehearsal_and_ends_it(tmp_path):
    """``seckill drill --target``: the crowd and the invariants only, on a rehearsal it makes
    and ends; the deployment's other activity is untouched."""
    with running_up(tmp_path, "--ip-rate", "off") as stack:
        other = stack.create_activity(total=3)
        env = {**clean_environ(), **up_env(stack.data)}
        drill = subprocess.run(
            [str(SECKILL), "drill", "--target", stack.base, "--admin-url", stack.admin_base,
             "--users", "200", "--duration", "10", "--report", str(tmp_path / "report")],
            env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180,
        )
        assert drill.returncode == 0, drill.stdout + drill.stderr
        listed = subprocess.run(
            [str(SECKILL), "activity", "list", "--json"], env=env, capture_output=True,
            text=True, timeout=60, check=True).stdout.splitlines()
    rows = {row["id"]: row for row in map(json.loads, listed)}
    rehearsals = [row for row in rows.values() if row.get("rehearsal")]
    assert len(rehearsals) == 1 and rehearsals[0]["state"] == "ended", rows
    assert rehearsals[0]["sold"] > 0
    assert rows[other]["sold"] == 0 and rows[other]["state"] == "open", rows[other]
