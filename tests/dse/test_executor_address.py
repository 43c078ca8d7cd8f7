"""A malformed Dask scheduler address is refused before any client is made."""

from __future__ import annotations

import pytest

from archplace.base.errors import ConfigError
from archplace.base.executor import make_executor


@pytest.mark.parametrize(("address", "reason"), [
    ("nonsense", "not of the form tcp://HOST:PORT"),
    ("tcp://", "not of the form tcp://HOST:PORT"),
    ("tcp://10.0.0.5", "not of the form tcp://HOST:PORT"),
    ("tcp://10.0.0.5:99999", "port 99999 is outside 1..65535"),
    ("tcp://10.0.0.5:0", "port 0 is outside 1..65535"),
])
def test_malformed_scheduler_addresses_are_refused(address: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason), make_executor("dask", 1, address):
        pass
