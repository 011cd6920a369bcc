"""HTTP: the app factory, the hot routes, the cold routes and their limits, one error mapping."""
