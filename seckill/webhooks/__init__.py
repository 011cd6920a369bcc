"""The webhook dispatcher: events from the outbox to the shop's endpoints."""
