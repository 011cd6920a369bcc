"""Running and operating the gateway, in three wings:

- :mod:`seckill.ops.cli`: the ``seckill`` command, one module per resource (activities, the
  sale-day verbs, orders, blocks, webhooks, secrets, the AOF), and the store its commands use;
- :mod:`seckill.ops.stack`: the local stack ``seckill up`` runs: its supervisor and children,
  the embedded Valkey or Valkey Cluster, nginx's config and the exporter of its counts;
- :mod:`seckill.ops.drill`: ``seckill drill``, the sale-day fire drill on a stack of its own.

The command line uses the other two; the drill uses the stack (and the command line's
``Failure``); the stack uses neither (pyproject.toml's import contracts).
"""
