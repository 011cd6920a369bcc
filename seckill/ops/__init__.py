"""Running and operating the gateway: the ``seckill`` CLI, ``seckill up`` and its supervisor,
nginx rendering, and the embedded Valkey."""
