"""``with_remaining``, the copy of an activity each gateway process makes after every purchase
(``seckill.store.sale.activity.cache``): the same object ``dataclasses.replace`` gives, for
activities with every kind of field set. A unit test of a pure function (hypothesis draws the
values)."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from seckill.domain.activities import Activity, with_remaining
from seckill.domain.product import Product
from seckill.domain.variants import Variant

COUNTS = st.none() | st.integers(0, 10**6)
ACTIVITIES = st.builds(
    Activity,
    id=st.from_regex(r"[a-z][a-z0-9]{0,20}", fullmatch=True), name=st.text(max_size=20),
    starts_ms=st.integers(0, 2**41), ends_ms=st.integers(0, 2**41), total=COUNTS,
    remaining=COUNTS, per_user_limit=st.integers(1, 100),
    kind=st.sampled_from(["stock", "packets"]),
    amount=COUNTS, seed=st.none() | st.integers(0, 2**32), shards=st.integers(1, 16),
    payment_window=st.integers(0, 3600),
    admission=st.sampled_from(["first_come", "queue", "draw"]),
    queue_opens_ms=COUNTS, challenge=st.booleans(), draw_seed=st.none() | st.text(max_size=8),
    admission_factor=st.floats(1, 10), paused=st.booleans(),
    product=st.builds(Product, description=st.none() | st.text(max_size=8)), sold=COUNTS,
    unflagged=st.booleans(), rehearsal=st.booleans(),
    variants=st.lists(st.builds(Variant, st.sampled_from(["s40", "s41", "s42"]),
                                st.text(max_size=5), st.integers(0, 9), st.integers(0, 9),
                                st.integers(0, 9)), max_size=3).map(tuple),
    limit_by=st.sampled_from(["user", "person"]), person_salt=st.none() | st.text(max_size=8))


@given(ACTIVITIES, COUNTS)
def test_with_remaining_is_replace(activity: Activity, remaining: int | None) -> None:
    copied = with_remaining(activity, remaining)
    assert copied == dataclasses.replace(activity, remaining=remaining)
    assert copied is not activity and copied.remaining == remaining
    for field in dataclasses.fields(Activity):  # every other field is the very same value
        if field.name != "remaining":
            assert getattr(copied, field.name) is getattr(activity, field.name), field.name
