"""The Redis plumbing: connections (single server and cluster), durability waits, the Lua
scripts, key names and where a sharded activity's parts live."""
