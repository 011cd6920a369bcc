"""Blocks in the database: the operator's list, and the changes every gateway process follows.

Why the database and not Redis: it is where the operator's decisions already live (activities,
pauses, ends) and what Redis is rebuilt from; a block lost with a Redis that lost its data
would let a blocked farm back in without anyone noticing. Reading blocks needs no Redis at all.

A lifted block stays as a row with ``active`` false; every change is numbered, and a process
follows the list by those numbers (``seckill.sql.changes``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from seckill.domain import errors
from seckill.domain.blocks import EVERY, Block, UnknownBlock
from seckill.domain.clock import now_ms
from seckill.sql.changes import ChangedBook, counter_table
from seckill.sql.schema import activities, ensure_schema

metadata = sa.MetaData()

blocks = sa.Table(
    "seckill_blocks",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("kind", sa.String(8), nullable=False),  # user | person
    sa.Column("subject", sa.String(128), nullable=False),
    sa.Column("activity", sa.String(64), nullable=False),  # "" (EVERY): every activity
    sa.Column("reason", sa.String(200), nullable=True),
    sa.Column("created_ms", sa.BigInteger, nullable=False),
    sa.Column("active", sa.Boolean, nullable=False),
    sa.Column("changed", sa.BigInteger, nullable=False),
    sa.UniqueConstraint("kind", "subject", "activity", name="uq_seckill_blocks_target"),
    sa.CheckConstraint("kind IN ('user', 'person')", name="ck_seckill_blocks_kind"),
)
sa.Index("ix_seckill_blocks_changed", blocks.c.changed)

changes = counter_table("seckill_block_changes", metadata)

# A change as a follower reads it: (kind, subject, activity or EVERY, active, changed).
Change = tuple[str, str, str, bool, int]


def _block(row: Any) -> Block:
    return Block(kind=row.kind, subject=row.subject, activity=row.activity or None,
                 reason=row.reason, created_ms=int(row.created_ms), seq=int(row.seq))


class BlockBook(ChangedBook):
    """The operator's blocks in the database."""

    metadata = metadata
    counter = changes

    def _before_create(self) -> None:
        ensure_schema(self.engine)  # a block may name an activity: its table too

    def block(self, block: Block) -> Block:
        """Store ``block`` (blocking again what is blocked replaces its reason); return it as
        stored. UnknownActivity if it names an activity the database does not know."""
        self.ready()
        scope = block.activity or EVERY
        with self.engine.begin() as conn:
            # The counter first: on SQLite too the writer's lock is then taken before any read.
            change = self._next_change(conn)
            if block.activity is not None and conn.execute(
                    sa.select(activities.c.id).where(activities.c.id == block.activity)
            ).first() is None:
                raise errors.UnknownActivity(activity=block.activity)  # rolled back, number too
            target = ((blocks.c.kind == block.kind) & (blocks.c.subject == block.subject)
                      & (blocks.c.activity == scope))
            found = conn.execute(sa.select(blocks).where(target)).first()
            if found is None:
                conn.execute(blocks.insert().values(
                    kind=block.kind, subject=block.subject, activity=scope,
                    reason=block.reason, created_ms=now_ms(), active=True, changed=change))
            elif found.active:
                conn.execute(blocks.update().where(target).values(reason=block.reason,
                                                                  changed=change))
            else:  # lifted once, blocked again: made now, in its old place in the list
                conn.execute(blocks.update().where(target).values(
                    reason=block.reason, created_ms=now_ms(), active=True, changed=change))
            stored = conn.execute(sa.select(blocks).where(target)).one()
        return _block(stored)

    def unblock(self, kind: str, subject: str, activity: str | None) -> Block:
        """Lift the block on ``subject`` (on ``activity``; None: the one on every activity);
        return it. UnknownBlock if there is none."""
        self.ready()
        target = ((blocks.c.kind == kind) & (blocks.c.subject == subject)
                  & (blocks.c.activity == (activity or EVERY)) & blocks.c.active)
        with self.engine.begin() as conn:
            change = self._next_change(conn)  # first: a concurrent lift waits, then finds none
            found = conn.execute(sa.select(blocks).where(target)).first()
            if found is None:
                raise UnknownBlock(**{kind: subject, "activity": activity})
            conn.execute(blocks.update().where(target).values(active=False, changed=change))
        return _block(found)

    def page(self, after: int, limit: int) -> tuple[list[Block], int | None]:
        """Up to ``limit`` blocks in force, in list order after ``after`` (0: from the first),
        and the cursor of the next page (None: this is the last)."""
        if not self.ready():
            return [], None
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(blocks).where(blocks.c.active & (blocks.c.seq > after))
                .order_by(blocks.c.seq).limit(limit + 1)).all()
        found = [_block(row) for row in rows[:limit]]
        return found, (found[-1].seq if len(rows) > limit else None)

    def changes_after(self, seen: int) -> Sequence[Change]:
        """Every block changed after change number ``seen``, in the order of the changes (one
        indexed query; nothing while nothing changed)."""
        if not self.ready():
            return ()
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(blocks.c.kind, blocks.c.subject, blocks.c.activity, blocks.c.active,
                          blocks.c.changed)
                .where(blocks.c.changed > seen).order_by(blocks.c.changed)).all()
        return [(r.kind, r.subject, r.activity, bool(r.active), int(r.changed)) for r in rows]
