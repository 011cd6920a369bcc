"""The order database (SQLAlchemy Core): the schema, the engine, and the OrderBook."""
