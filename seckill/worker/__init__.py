"""The orders worker: every activity's order stream into the database, exactly once."""
