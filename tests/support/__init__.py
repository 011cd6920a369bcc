"""What the tests share: fixtures, clients and helpers that are not tests themselves."""
