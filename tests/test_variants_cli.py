"""``seckill activity create ... --variant 40:EU-40:50 --variant 41:EU-41:80`` (or a JSON
file of them) and ``seckill activity restock AID UNITS --variant 40``, run as
real processes against the stores a gateway is serving (the single server: the commands take
the admin API's path, which the cluster runs of tests/test_variants*.py cover)."""

from __future__ import annotations

import json
import subprocess

from seckill.worker.options import WorkerOptions
from seckill.worker.orders import OrdersWorker
from tests.support.api import buy, expect
from tests.support.cli import assert_one_line_error, seckill
from tests.support.tokens import ADMIN


def test_variants_from_the_command_line(client, env, tmp_path):
    made = seckill("activity", "create", "--id", "clisize", "--name", "Sneaker", "--variant",
                   "40:EU-40:50", "--variant", "41:EU 41: wide:80", "--per-user-limit", "2",
                   "--duration", "3600", env=env)
    assert made.returncode == 0, made.stderr
    view = json.loads(made.stdout)
    assert view["total"] == 130 and view["per_user_limit"] == 2
    assert [(v["id"], v["name"], v["total"]) for v in view["variants"]] == [
        ("40", "EU-40", 50), ("41", "EU 41: wide", 80)]
    expect(buy(client, "clisize", "ann", {"variant": "41", "quantity": 2}), 200)

    restocked = seckill("activity", "restock", "clisize", "5", "--variant", "41", env=env)
    assert restocked.returncode == 0, restocked.stderr
    variants = {v["id"]: v for v in json.loads(restocked.stdout)["variants"]}
    assert (variants["41"]["total"], variants["41"]["remaining"]) == (85, 83)
    assert_one_line_error(seckill("activity", "restock", "clisize", "5", env=env), 2,
                          "variant")
    assert_one_line_error(seckill("activity", "restock", "clisize", "5", "--variant", "42",
                                  env=env), 1, "unknown_variant")
    # Redis loses it: show reads the database alone (the stored orders' units are gone).
    services = client.application.extensions["seckill"]
    OrdersWorker(services.client, services.keys, services.book,
                 WorkerOptions(block_ms=1, poll_ms=1)).step()
    for key in services.client.scan_iter(match=f"{services.keys.prefix}:{{clisize}}:*"):
        services.client.delete(key)
    shown = seckill("activity", "show", "clisize", env=env)
    assert shown.returncode == 0, shown.stderr
    assert {v["id"]: v["remaining"] for v in json.loads(shown.stdout)["variants"]} == {
        "40": 50, "41": 83}

    sizes = tmp_path / "sizes.json"
    sizes.write_text(json.dumps([{"id": "S", "name": "Small", "total": 3},
                                 {"id": "M", "name": "Medium", "total": 4}]))
    filed = seckill("activity", "create", "--id", "clifile", "--name", "Shirt",
                    "--variants-file", str(sizes), "--duration", "3600", env=env)
    assert filed.returncode == 0, filed.stderr
    assert [v["id"] for v in json.loads(filed.stdout)["variants"]] == ["S", "M"]
    stats = expect(client.get("/admin/activities/clifile/stats", headers=ADMIN), 200)
    assert stats["variants"]["M"] == {"total": 4, "remaining": 4, "sold": 0}


def test_bad_variants_are_refused_in_one_line(env, tmp_path):
    def create(*extra: str) -> subprocess.CompletedProcess[str]:
        return seckill("activity", "create", "--id", "clibad", "--name", "X", "--duration",
                       "60", *extra, env=env)

    assert_one_line_error(create("--variant", "40"), 2, "ID:NAME:TOTAL")
    assert_one_line_error(create("--variant", "4/0:EU:1"), 2, "variants[0].id")
    assert_one_line_error(create("--variant", "40:A:1", "--total", "5"), 2, "total")
    broken = tmp_path / "broken.json"
    broken.write_text("[{")
    assert_one_line_error(create("--variants-file", str(broken)), 2, "not JSON")


def test_limit_by_person_from_the_command_line(env):
    """``--limit-by person``: refused in one line while no person claim is named, made once
    the deployment names one."""
    assert_one_line_error(seckill("activity", "create", "--id", "cliperson0", "--name", "Seat",
                                  "--total", "5", "--limit-by", "person", "--duration", "3600",
                                  env=env), 2, "limit_by")
    made = seckill("activity", "create", "--id", "cliperson1", "--name", "Seat", "--total", "5",
                   "--limit-by", "person", "--duration", "3600",
                   env={**env, "SECKILL_PERSON_CLAIM": "person"})
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["limit_by"] == "person"
