"""The webhook dispatcher (issue #27): events from the outbox to the shop's endpoints."""
