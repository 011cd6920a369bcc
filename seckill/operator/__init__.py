"""The operator's actions, one application layer for both doors: the admin API
(``seckill.web``) and the ``seckill`` command (``seckill.ops``) call these and only translate
the result, or the refusal, to HTTP or to text.

An action validates its input, writes the database and Redis through the process's
``Services``, announces the change to every gateway process, and returns the result (an
``Activity``, or a small result of its own). Refusals are the domain's errors
(``seckill.domain.errors``). New operator actions (drops, blocks, webhooks) go here too.

- ``activities``: find, list, show, create, edit, restock.
- ``levers``: pause, resume, end, and a queue's admission factor.
- ``orders``: cancel and pay an order.
- ``audit``: reconcile an activity with the database (and repair it).
"""
