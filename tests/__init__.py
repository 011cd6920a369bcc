"""The test suite. Its helpers (tests/support/) check with plain ``assert`` statements, as the
tests do: pytest rewrites theirs too, so that a failing check there says what it compared."""

import pytest

pytest.register_assert_rewrite("tests.support")
