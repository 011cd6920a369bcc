"""A book of the operator's decisions that every gateway process follows by change number.

Every change (a block and its lift, an operator and their revocation) takes the next number of
one counter row, in the same transaction as the change, and stamps it on the changed row; a
row that is undone stays, marked. So a process follows the book with one indexed query, "rows
changed after the last number I saw", that returns nothing while nothing changes: no full
reload per change, however long the book. Writers take the counter row first, so they commit
in the order of their numbers and a reader never skips one.

A book's tables have a ``MetaData`` of their own: created on first use by whoever needs them
(the gateway's first reading, an operator's first change), and a read-only command on a
database without them reads an empty book rather than failing.

:class:`Follower` is the reading side: the thread that applies a book's changes to a process's
copy every quarter of a second. When the database cannot be read the copy stays as it was last
read, and the thread says so in the log once per streak.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import ClassVar

import sqlalchemy as sa

log = logging.getLogger(__name__)

# How often each process asks for changes: a change reaches it within this, plus the read; a
# quarter of the contract's second leaves the rest for a busy worker or a slow read (measured
# on blocks: blocked everywhere 0.21-0.24 s after the 201, let in 0.07-0.13 s after the lift).
POLL_SECONDS = 0.25
FIRST_WAIT = 1.0  # seconds the first request waits for the first reading


def counter_table(name: str, metadata: sa.MetaData) -> sa.Table:
    """A book's counter: one row (id 1), the number of its last change."""
    return sa.Table(name, metadata,
                    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
                    sa.Column("seq", sa.BigInteger, nullable=False))


class ChangedBook:
    """A book whose changes are numbered by its :attr:`counter` (a subclass names its
    ``metadata`` and ``counter``)."""

    metadata: ClassVar[sa.MetaData]
    counter: ClassVar[sa.Table]

    def __init__(self, engine: sa.Engine, read_only: bool = False) -> None:
        self.engine = engine
        self.read_only = read_only  # a command that writes nothing: tables are never created
        self._ready = False
        self._lock = threading.Lock()

    def _before_create(self) -> None:
        """What the book's tables need first (another book's tables they refer to)."""

    def ready(self) -> bool:
        """Whether the tables exist; created (with the counter row) if not, unless read-only.
        Several processes may race here: the loser's "already exists" is harmless."""
        if self._ready:
            return True
        with self._lock:
            if self._ready:
                return True
            if self.read_only:
                self._ready = sa.inspect(self.engine).has_table(self.counter.name)
                return self._ready
            self._before_create()
            for attempt in range(3):
                try:
                    self.metadata.create_all(self.engine, checkfirst=True)
                    with self.engine.begin() as conn:
                        if conn.execute(sa.select(self.counter.c.seq)).first() is None:
                            conn.execute(self.counter.insert().values(id=1, seq=0))
                    break
                except (sa.exc.IntegrityError, sa.exc.ProgrammingError,
                        sa.exc.OperationalError):
                    if attempt == 2:
                        raise
            self._ready = True
            return True

    def _next_change(self, conn: sa.Connection) -> int:
        """Take the counter row (writers wait here for each other) and its next number."""
        counter = self.counter
        conn.execute(counter.update().where(counter.c.id == 1).values(seq=counter.c.seq + 1))
        return int(conn.execute(sa.select(counter.c.seq).where(counter.c.id == 1)).scalar_one())


class Follower:
    """The thread that keeps a process's copy of a book: ``apply`` (read the changes since the
    last one applied, and apply them) every ``poll_seconds``, from the first :meth:`follow`
    until :meth:`close`. ``what`` names the book in the log."""

    def __init__(self, apply: Callable[[], None], what: str,
                 poll_seconds: float = POLL_SECONDS) -> None:
        self.apply = apply
        self.what = what
        self.poll_seconds = poll_seconds
        self._start_lock = threading.Lock()
        self._first_round = threading.Event()  # the first reading was tried (read or failed)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failing = False  # whether the last reading failed (logged once per streak)
        self.read_once = False  # whether a reading ever succeeded

    @property
    def started(self) -> bool:
        """Whether the thread was started (this process keeps a copy)."""
        return self._thread is not None

    def follow(self, wait: float = FIRST_WAIT) -> None:
        """Start the thread (once; not after close) and wait, at most ``wait`` seconds, for
        its first reading."""
        with self._start_lock:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name=f"seckill-{self.what}",
                                                daemon=True)
                self._thread.start()
        self._first_round.wait(wait)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.apply()
                if self.failing:
                    log.info("%s read again from the database", self.what)
                self.failing = False
                self.read_once = True
            except Exception as exc:  # the database away (or a bug): keep the last copy
                if not self.failing:
                    log.warning("%s not read from the database (%s: %s); the last copy stays "
                                "in force until it answers", self.what, type(exc).__name__, exc)
                self.failing = True
            self._first_round.set()
            self._stop.wait(self.poll_seconds)

    def heard(self) -> None:
        """A change made in this process: applied here at once when this process keeps a copy
        (a command that keeps none does not read the whole book for nothing)."""
        if self._thread is None:
            return
        try:
            self.apply()
        except Exception as exc:  # stored; the thread applies it on its next round
            log.warning("%s: a change stored, not yet applied here: %s: %s", self.what,
                        type(exc).__name__, exc)

    def close(self) -> None:
        """Stop the thread."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=3)
