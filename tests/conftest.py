from __future__ import annotations

import pytest
from django.db import connections


@pytest.fixture
def other_connection(transactional_db):
    """A second, independent connection to the test database (its own session and locks)."""
    conn = connections.create_connection("default")
    conn.ensure_connection()
    yield conn
    conn.close()
