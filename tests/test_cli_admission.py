"""``seckill activity create --admission`` and ``seckill activity admission``, run as real
processes: the admin API's validation and answers, a queue the gateway then serves."""

from __future__ import annotations

import json
import time

from tests.support.admission import join, poll, state
from tests.support.api import expect
from tests.support.backends import redis_backend  # noqa: F401  (each test on both)
from tests.support.cli import assert_one_line_error, seckill


def test_a_queue_made_and_tuned_from_the_command_line(client, env):
    made = seckill("activity", "create", "--id", "cliqueue", "--name", "Queued", "--total", "2",
                   "--starts-in", "1", "--duration", "3600", "--admission", "queue",
                   "--challenge", env=env)
    assert made.returncode == 0, made.stderr
    view = json.loads(made.stdout)
    assert (view["admission"], view["challenge"], view["admission_factor"]) == (
        "queue", True, 1.0)
    draw = seckill("activity", "create", "--id", "clidraw", "--name", "Drawn", "--total", "2",
                   "--starts-in", "60", "--duration", "3600", "--admission", "draw",
                   "--queue-opens-in", "30", env=env)
    assert draw.returncode == 0, draw.stderr
    assert len(json.loads(draw.stdout)["draw_commitment"]) == 64
    expect(join(client, "clidraw", "early"), 403, "not_open")
    plain = seckill("activity", "create", "--id", "cliplain", "--name", "Plain", "--total", "2",
                    "--duration", "3600", "--queue-opens-in", "5", env=env)
    assert_one_line_error(plain, 2, "queue_opens_at")
    late = seckill("activity", "create", "--id", "clilate", "--name", "Late", "--total", "2",
                   "--starts-in", "5", "--duration", "3600", "--admission", "queue",
                   "--queue-opens-in", "10", env=env)
    assert_one_line_error(late, 2, "before starts_at")

    tuned = seckill("activity", "admission", "cliqueue", "--factor", "2", env=env)
    assert tuned.returncode == 0, tuned.stderr
    assert json.loads(tuned.stdout)["admission_factor"] == 2
    assert_one_line_error(seckill("activity", "admission", "cliqueue", "--factor", "0",
                                  env=env), 2, "factor")
    assert_one_line_error(seckill("activity", "admission", "cliplainx", "--factor", "1",
                                  env=env), 1, "no activity")
    time.sleep(1.1)
    assert state(client, "cliqueue")["state"] == "open"
    assert poll(client, "cliqueue", "nobody")["status"] == "none"
