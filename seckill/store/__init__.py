"""The sale's state in Redis: key names, the Lua scripts, the stock decision, the sold-out
flags, each process's activity copies, and recovery from the database; and each process's copy
of the named operators (``operators``), followed in the database as the blocks are."""
