"""This process's copy of the operator's blocks, followed in the background: what the edge's
block filter (``edge.blocks``) asks, answered from memory with no Redis or database call.

A background thread (``seckill.sql.changes.Follower``) asks the database every quarter of a
second for the blocks changed since the last change it applied (one indexed query that returns
nothing while nothing changes), so a block reaches every gateway process within a second; a
change made in this process (the admin API) is applied here at once. The first request that
asks starts the thread and waits for its first reading, at most ``FIRST_WAIT`` seconds: a
restarted gateway refuses the blocked from its first answers.

When the database cannot be read, the copy stays as it was last read (and, before any reading,
empty: nobody is refused). A block then takes effect once the database answers again; the sale
itself never waits on it. Why the database keeps the blocks: ``seckill.sql.blocks``.
"""

from __future__ import annotations

import threading

from seckill.domain.blocks import EVERY, USER, Block
from seckill.sql.blocks import BlockBook
from seckill.sql.changes import FIRST_WAIT, POLL_SECONDS, Follower


class BlockWatch:
    """The blocks in force, as this process last read them, and the thread that follows them."""

    def __init__(self, book: BlockBook, poll_seconds: float = POLL_SECONDS) -> None:
        self.book = book
        # subject -> the activities its blocks cover (EVERY: all). Replaced entry by entry
        # (each value a frozenset): a request reads a whole entry or the one before.
        self._users: dict[str, frozenset[str]] = {}
        self._persons: dict[str, frozenset[str]] = {}
        self._seen = 0  # the number of the last change applied
        self._apply_lock = threading.Lock()
        self._follower = Follower(self.apply_changes, "blocks", poll_seconds)
        # No block at all in force, as the last reading applied found (False before the
        # first one, so that the first request goes through refuses(), which starts the
        # thread): the edge's filter then lets every request pass with no lookup.
        self.none_in_force = False

    # -- what the edge asks ----------------------------------------------------------------

    def refuses(self, uid: str, person: str | None, activity: str | None) -> bool:
        """Whether a block covers this account, or the person behind it, on ``activity``
        (None: a request that names none; only a block on every activity covers it)."""
        if not self._follower.started:
            self.follow()
        scopes = self._users.get(uid)
        if scopes is not None and (EVERY in scopes or activity in scopes):
            return True
        if person is None:
            return False
        scopes = self._persons.get(person)
        return scopes is not None and (EVERY in scopes or activity in scopes)

    # -- following the database ------------------------------------------------------------

    @property
    def failing(self) -> bool:
        """Whether the last reading failed (the copy is then the last one read)."""
        return self._follower.failing

    def follow(self, wait: float = FIRST_WAIT) -> None:
        """Start the thread that follows the blocks (once; not after close) and wait, at most
        ``wait`` seconds, for its first reading."""
        self._follower.follow(wait)

    def apply_changes(self) -> None:
        """Read the blocks changed since the last change applied, and apply them."""
        with self._apply_lock:
            for kind, subject, activity, active, changed in self.book.changes_after(self._seen):
                table = self._users if kind == USER else self._persons
                scopes = table.get(subject, frozenset())
                scopes = scopes | {activity} if active else scopes - {activity}
                if scopes:
                    self.none_in_force = False  # before the entry: never a block unseen
                    table[subject] = scopes
                else:
                    table.pop(subject, None)
                self._seen = changed
            # (Only once the thread follows them: until then refuses() must run, to start it.)
            self.none_in_force = (self._follower.started and not self._users
                                  and not self._persons)

    # -- the operator's changes, heard here at once ------------------------------------------

    def block(self, block: Block) -> Block:
        """Store a block (``BlockBook.block``); this process refuses the buyer from now on."""
        stored = self.book.block(block)
        self._heard()
        return stored

    def unblock(self, kind: str, subject: str, activity: str | None) -> Block:
        """Lift a block (``BlockBook.unblock``); this process lets the buyer in from now on."""
        lifted = self.book.unblock(kind, subject, activity)
        self._heard()
        return lifted

    def page(self, after: int, limit: int) -> tuple[list[Block], int | None]:
        """A page of the blocks in force (``BlockBook.page``), read from the database."""
        return self.book.page(after, limit)

    def _heard(self) -> None:
        self._follower.heard()

    def close(self) -> None:
        """Stop the thread."""
        self._follower.close()
