"""The stack's one log format, and a burst of one repeated line collapsed into one summary."""

from __future__ import annotations

import json
import logging
import re

from seckill import logs

LINE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (\S+) (DEBUG|INFO|WARNING|ERROR|"
                  r"CRITICAL) (.*)", re.DOTALL)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Kept(logging.Handler):
    """A real handler that keeps the formatted lines."""

    def __init__(self, component: str = "gunicorn-1", as_json: bool = False) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.setFormatter(logs.Formatter(component, as_json))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def message(formatted: str) -> str:
    found = LINE.fullmatch(formatted)
    assert found is not None, formatted
    return found.group(3)


def collapsing_logger(name: str, window: float = 1.0
                      ) -> tuple[logging.Logger, Kept, Clock, logs.CollapseRepeats]:
    kept, clock = Kept(), Clock()
    collapse = logs.CollapseRepeats(kept, window=window, clock=clock)
    kept.addFilter(collapse)
    logger = logging.getLogger(name)
    logger.handlers[:] = [kept]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger, kept, clock, collapse


def test_a_burst_of_94_lines_prints_the_first_and_one_summary():
    logger, kept, clock, collapse = collapsing_logger("test.burst")
    for n in range(95):
        clock.now = 100.0 + n * 0.006
        logger.warning("rate limit not checked: %s", "ConnectionError")
    assert len(kept.lines) == 1
    clock.now = 101.5
    collapse.flush()  # what the background flusher does
    assert len(kept.lines) == 2
    summary = LINE.fullmatch(kept.lines[1])
    assert summary is not None, kept.lines[1]
    assert summary.group(3) == ("\u2026 \u00d794 in 0.6 s: rate limit not checked: "
                                "ConnectionError")


def test_different_lines_and_a_later_repeat_all_print():
    logger, kept, clock, _ = collapsing_logger("test.mixed")
    logger.warning("a")
    logger.warning("b")
    logger.error("a")  # another level: not a repeat
    clock.now += 2
    logger.warning("a")  # after the window: a new burst, printed
    assert [message(x) for x in kept.lines] == ["a", "b", "a", "a"]


def test_a_repeat_after_the_window_closes_its_burst_with_a_summary_first():
    logger, kept, clock, _ = collapsing_logger("test.close")
    logger.warning("x %d", 1)
    logger.warning("x %d", 2)
    clock.now += 1.5
    logger.warning("x %d", 3)
    assert [message(x) for x in kept.lines] == [
        "x 1", "\u2026 \u00d71 in 0.0 s: x 2", "x 3"]


def test_text_and_json_lines_carry_time_component_level_message():
    record = logging.LogRecord("seckill.x", logging.WARNING, __file__, 1, "hello %s",
                               ("you",), None)
    text = logs.Formatter("orders-worker").format(record)
    found = LINE.fullmatch(text)
    assert found is not None and found.groups() == ("orders-worker", "WARNING", "hello you")
    body = json.loads(logs.Formatter("orders-worker", as_json=True).format(record))
    assert (body["component"], body["level"], body["message"]) == (
        "orders-worker", "WARNING", "hello you")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", body["ts"])
    framed = LINE.fullmatch(logs.line("seckill-up", "INFO", "up", False))
    assert framed is not None and framed.group(1) == "seckill-up"
    assert json.loads(logs.line("seckill-up", "INFO", "up", True))["message"] == "up"


def test_a_redis_outage_under_load_logs_one_line_and_one_summary(make_app, private_valkey):
    """The reported burst, made to happen: Redis goes away and a crowd asks for purchase URLs;
    each request's per-user rate check fails open and logs the same warning."""
    from tests.support.api import create_activity
    from tests.support.tokens import user_headers

    app = make_app(REDIS_URL=private_valkey.url)
    client = app.test_client()
    aid = create_activity(client)["id"]
    for uid in ("warm", "up"):
        assert client.get(f"/seckill/url?activity={aid}",
                          headers=user_headers(uid)).status_code == 200
    kept, clock = Kept(), Clock()
    collapse = logs.CollapseRepeats(kept, clock=clock)
    kept.addFilter(collapse)
    logger = logging.getLogger("seckill")
    logger.addHandler(kept)
    try:
        private_valkey.stop()
        for n in range(60):
            clock.now = 100.0 + n * 0.01
            client.get(f"/seckill/url?activity={aid}", headers=user_headers(f"crowd{n}"))
        clock.now = 102.0
        collapse.flush()
    finally:
        logger.removeHandler(kept)
    rate_lines = [message(x) for x in kept.lines if "rate limit not checked" in x]
    assert len(rate_lines) == 2, kept.lines
    assert rate_lines[0].startswith("rate limit not checked for crowd0 ")
    # The summary names every user it stands for, each once.
    users = ", ".join(f"crowd{n}" for n in range(1, 60))
    assert re.fullmatch(r"\u2026 \u00d759 in 0\.6 s: rate limit not checked for "
                        + re.escape("{" + users + "}") + r" \(fails open\): .*",
                        rate_lines[1]), rate_lines[1]


def test_a_message_spanning_lines_stays_one_text_line():
    # A database error's text carries its statement on a second line ("...\n[SQL: CREATE
    # TABLE ...]"): logged with %s at start-up it broke `seckill up`'s one-line format (a CI
    # run of test_up_logs saw a bare "[SQL: " line). The message's own line breaks are shown
    # as "\n"; only a traceback, which the record asks for, follows on lines of its own.
    record = logging.LogRecord("seckill.sql.schema", logging.INFO, __file__, 1,
                               "schema creation raced (%s); checking again",
                               ("table x already exists\n[SQL: \nCREATE TABLE x ()]",), None)
    text = logs.Formatter("gunicorn-1").format(record)
    assert "\n" not in text
    found = LINE.fullmatch(text)
    assert found is not None and found.group(3) == (
        "schema creation raced (table x already exists\\n[SQL: \\nCREATE TABLE x ()]); "
        "checking again")
    as_json = json.loads(logs.Formatter("gunicorn-1", as_json=True).format(record))
    assert as_json["message"].startswith("schema creation raced (table x already exists\n")


def test_a_summary_names_every_activity_its_repeats_were_about():
    """Two activities rebuilt within one window: the second's line is a repeat of the first's
    template, and its summary says fl2, never fl1 again."""
    logger, kept, clock, collapse = collapsing_logger("test.rebuilt")
    template = ("activity %s: parts %s rebuilt from the database: %s units left to them, "
                "%s in transit between the others")
    logger.warning(template, "fl1", [1], 10, 0)
    clock.now += 0.2
    logger.warning(template, "fl2", [0, 2], 7, 3)
    clock.now += 1.5
    collapse.flush()
    assert [message(x) for x in kept.lines] == [
        "activity fl1: parts [1] rebuilt from the database: 10 units left to them, "
        "0 in transit between the others",
        "\u2026 \u00d71 in 0.2 s: activity fl2: parts [0, 2] rebuilt from the database: 7 units "
        "left to them, 3 in transit between the others"]


def test_a_summary_lists_each_differing_value_once_with_its_count():
    logger, kept, clock, collapse = collapsing_logger("test.values")
    logger.warning("rate limit not checked for %s (fails open): %s", "u0", "refused")
    for uid, error in [("u1", "refused"), ("u2", "timeout"), ("u1", "refused"),
                       ("u3", "refused")]:
        clock.now += 0.1
        logger.warning("rate limit not checked for %s (fails open): %s", uid, error)
    logger.warning("%d%% of %s held (%.1f s)", 50, "a", 1.25)
    logger.warning("%d%% of %s held (%.1f s)", 60, "a", 1.25)
    logger.warning("by name: %(who)s", {"who": "ann"})
    logger.warning("by name: %(who)s", {"who": "bob"})
    clock.now += 1.5
    collapse.flush()
    assert sorted(message(x) for x in kept.lines[3:]) == sorted([
        "\u2026 \u00d74 in 0.4 s: rate limit not checked for {u1 \u00d72, u2, u3} (fails open): "
        "{refused \u00d73, timeout}",
        "\u2026 \u00d71 in 0.0 s: 60% of a held (1.2 s)",
        "\u2026 \u00d71 in 0.0 s: by name: bob"]), kept.lines
    logger.warning("by name: %(who)s", {"who": "ann"})
    logger.warning("by name: %(who)s", {"who": "bob"})
    logger.warning("by name: %(who)s", {"who": "cy"})
    clock.now += 1.5
    collapse.flush()
    # Not by position (a mapping): the whole messages, each once.
    assert message(kept.lines[-1]) == "\u2026 \u00d72 in 0.0 s: {by name: bob, by name: cy}"
