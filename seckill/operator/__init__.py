"""The operator's actions, one application layer for both doors: the admin API
(``seckill.web``) and the ``seckill`` command (``seckill.ops``) call these and only translate
the result, or the refusal, to HTTP or to text.

An action is done by an operator (``by``: the admin API's caller, or the command's
``cli:<login>``), validates its input, writes the database and Redis through the process's
``Services``, announces the change to every gateway process, writes its audit line
(``trail``), and returns the result (an ``Activity``, or a small result of its own). Refusals
are the domain's errors (``seckill.domain.errors``). New operator actions go here too.

- ``activities``: find, list, show, create, edit, restock.
- ``levers``: pause, resume, end, and a queue's admission factor.
- ``orders``: cancel and pay an order.
- ``audit``: reconcile an activity with the database (and repair it).
- ``blocks``, ``webhooks``: the blocks, the shop's endpoints.
- ``operators``: named operators and their roles: make, list, revoke.
- ``trail``: the audit line of every action, naming its operator.
"""
