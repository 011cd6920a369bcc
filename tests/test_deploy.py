"""deploy/: the Grafana dashboard and the Prometheus alert rules parse, promtool accepts the
rules, and every metric they name is one a real gateway (or the nginx exporter) exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from seckill.ops.stack.nginx_metrics import NginxCollector
from seckill.ops.stack.scrape_token import TOKEN_FILE
from tests.support.api import buy, create_activity
from tests.support.servers import require
from tests.support.timing import iso
from tests.support.tokens import ADMIN, METRICS

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
NAME = re.compile(r"\bseckill_[a-z_]+\b")


def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load((DEPLOY / "prometheus-alerts.yml").read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    board = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    return [target["expr"] for panel in board["panels"] for target in panel["targets"]]


def exported_names(text: str) -> set[str]:
    return {sample.name for family in text_string_to_metric_families(text)
            for sample in family.samples}


def test_the_rules_and_the_dashboard_are_complete():
    found = rules()
    assert {rule["alert"] for rule in found} >= {
        "SeckillOrdersPendingTooLong", "SeckillDeadLetters", "SeckillRedisUnreachable",
        "SeckillRateLimiterFailingOpen", "SeckillNginxUpstreamErrors"}
    for rule in found:
        assert rule["labels"]["severity"] in ("warning", "critical"), rule
        assert rule["annotations"]["summary"], rule
        assert NAME.search(rule["expr"]), rule
    board = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    assert board["uid"] and len(board["panels"]) >= 10
    assert len({panel["id"] for panel in board["panels"]}) == len(board["panels"])


def test_every_metric_named_in_deploy_is_exported(client, tmp_path):
    # Every kind of series present: a windowed activity with a sale, a paused queue.
    aid = create_activity(client, total=3, payment_window=60)["id"]
    assert buy(client, aid, "alice").status_code == 200
    queued = create_activity(client, admission="queue", queue_opens_at=iso(-1),
                             starts_at=iso(60))["id"]
    client.post(f"/admin/activities/{queued}/pause", headers=ADMIN)
    names = exported_names(client.get("/metrics", headers=METRICS).get_data(as_text=True))
    log = tmp_path / "access.log"
    log.write_text('2026-11-24T20:55:59+00:00 nginx.access INFO 127.0.0.1 "GET / HTTP/1.1" '
                   "429 88 0.000s outcome=- upstream=-\n")
    registry = CollectorRegistry()
    registry.register(NginxCollector(log))
    names |= exported_names(generate_latest(registry).decode())
    used = {name for expr in [*(r["expr"] for r in rules()), *dashboard_exprs()]
            for name in NAME.findall(expr)}
    assert used - names == set(), sorted(names)
    assert len(used) >= 15


def test_promtool_accepts_the_rules_and_the_config(tmp_path):
    promtool = require(shutil.which("promtool"), "promtool",
                       "sudo apt-get install -y --no-install-recommends prometheus")
    # The gateway's job sends the token `seckill up` writes into its data folder (promtool
    # wants the file to exist): a copy of deploy/ beside a data folder that has one.
    jobs = {job["job_name"]: job for job in
            yaml.safe_load((DEPLOY / "prometheus.yml").read_text())["scrape_configs"]}
    assert jobs["seckill-gateway"]["authorization"]["credentials_file"] \
        == f"../.seckill-data/{TOKEN_FILE}"
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    (tmp_path / ".seckill-data").mkdir()
    (tmp_path / ".seckill-data" / TOKEN_FILE).write_text("a-token\n")
    for command in (["check", "rules", "prometheus-alerts.yml"],
                    ["check", "config", "prometheus.yml"]):
        checked = subprocess.run([promtool, *command], cwd=tmp_path / "deploy",
                                 capture_output=True, text=True, timeout=60, check=False)
        assert checked.returncode == 0, checked.stdout + checked.stderr
