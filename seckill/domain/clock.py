"""Time as the sale speaks it: epoch milliseconds inside, ISO 8601 with an offset in bodies."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from seckill.domain import errors


def now_ms() -> int:
    """The current wall-clock time, in milliseconds since the Unix epoch."""
    return time.time_ns() // 1_000_000


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)
_LAST_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


def iso_from_ms(ms: int) -> str:
    """An epoch-milliseconds time as ISO 8601 UTC (``Z``); milliseconds shown only if not 0."""
    stamp = _EPOCH + timedelta(milliseconds=ms)  # exact: no float seconds
    text = stamp.isoformat(timespec="milliseconds" if ms % 1000 else "seconds")
    return text.replace("+00:00", "Z")


def ms_from_iso(value: Any, field: str) -> int:
    """Epoch milliseconds of an ISO 8601 time with an offset; BadRequest naming ``field``."""
    if not isinstance(value, str) or len(value) > 64:
        raise errors.BadRequest(f"{field} must be an ISO 8601 time with an offset", field=field)
    try:
        stamp = datetime.fromisoformat(value)
    except ValueError:
        raise errors.BadRequest(
            f"{field} is not an ISO 8601 time: {value!r}", field=field
        ) from None
    if stamp.tzinfo is None:
        raise errors.BadRequest(
            f"{field} needs an offset (e.g. 2026-11-21T12:00:00Z)", field=field
        )
    ms = (stamp - _EPOCH) // _ONE_MS  # exact; float seconds would lose a millisecond
    if not 0 <= ms <= _LAST_MS:
        # An offset can push 9999-12-31 past year 9999 (or 0001-01-01 before year 1): such a
        # time could not be written back as ISO 8601 in the activity's body.
        raise errors.BadRequest(f"{field} must be between 1970 and 9999 (UTC)", field=field)
    return ms
