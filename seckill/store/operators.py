"""This process's copy of the named operators, followed in the background: what the identity
filter asks of an operator's token, answered from memory with no database call.

A background thread (``seckill.sql.changes.Follower``) asks the database every quarter of a
second for the operators changed since the last change it applied, so a new operator's token
works, and a revoked one is refused, in every gateway process within a second; a change made
in this process (the admin API) is applied here at once. Only a token of a named operator's
form (``sko_...``) is looked up: the bootstrap admin's and a stranger's cost no reading.

When the database cannot be read, the copy stays as it was last read: the levers still answer
to the operators it holds while the database hangs. A process that has read none yet cannot
tell a named operator's token from a forged one: it answers 503 ``unavailable`` (``detail``
``database``) rather than a 401 that would tell an operator their token is wrong.
"""

from __future__ import annotations

import threading

from seckill.domain import errors
from seckill.domain.operators import (
    Operator,
    OperatorRecord,
    is_operator_token,
    new_token,
    token_hash,
)
from seckill.sql.changes import POLL_SECONDS, Follower
from seckill.sql.engine import DATABASE
from seckill.sql.operators import OperatorBook


class OperatorWatch:
    """The named operators in force, as this process last read them, and their writes."""

    def __init__(self, book: OperatorBook, poll_seconds: float = POLL_SECONDS) -> None:
        self.book = book
        # token hash -> the operator in force; replaced entry by entry
        self._by_hash: dict[str, Operator] = {}
        self._seen = 0  # the number of the last change applied
        self._apply_lock = threading.Lock()
        self._follower = Follower(self.apply_changes, "operators", poll_seconds)

    def who(self, token: str) -> Operator | None:
        """The named operator in force whose token this is (None: nobody's); the first call
        starts following the book and waits for its first reading."""
        if not is_operator_token(token):
            return None
        if not self._follower.started:
            self._follower.follow()
        if not self._follower.read_once:
            raise errors.Unavailable("the operators could not be read from the database yet; "
                                     "try again shortly", detail=DATABASE)
        return self._by_hash.get(token_hash(token))

    @property
    def failing(self) -> bool:
        """Whether the last reading failed (the copy is then the last one read)."""
        return self._follower.failing

    def apply_changes(self) -> None:
        """Read the operators changed since the last change applied, and apply them."""
        with self._apply_lock:
            for hashed, name, role, in_force, changed in self.book.changes_after(self._seen):
                if in_force:
                    self._by_hash[hashed] = Operator(name, role)
                else:
                    self._by_hash.pop(hashed, None)
                self._seen = changed

    # -- the admin's changes, heard here at once --------------------------------------------

    def enrol(self, name: str, role: str, by: str) -> tuple[OperatorRecord, str]:
        """Make an operator (``OperatorBook.add``); their token, shown this once, works here
        from now on."""
        token = new_token()
        made = self.book.add(name, role, token_hash(token), by)
        self._follower.heard()
        return made, token

    def revoke(self, name: str, by: str) -> OperatorRecord:
        """Revoke an operator (``OperatorBook.revoke``); refused here from now on."""
        revoked = self.book.revoke(name, by)
        self._follower.heard()
        return revoked

    def roster(self) -> list[OperatorRecord]:
        """Every operator ever made (``OperatorBook.listed``), read from the database."""
        return self.book.listed()

    def close(self) -> None:
        """Stop the thread."""
        self._follower.close()
