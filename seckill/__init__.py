"""The flash-sale domain: activities, the Lua-backed stock service, orders, and the CLI."""

from __future__ import annotations

__version__ = "0.1.0"
