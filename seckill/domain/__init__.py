"""The domain layer: the sale in its own words (activities, orders, outcomes, packets).

Pure code: no Redis, no SQL, no HTTP; the other layers build on it.
"""
