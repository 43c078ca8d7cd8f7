"""Bounds on the work and memory of one exact plan search, so that no input makes it run for
hours or exhaust memory: it stops with one line naming the numbers instead.

What grows (measured with ``archplace plan`` on GPT-2 configs with a tiny hidden size, 2 cores):

* Memory: the segment tables (:class:`~archplace.placement.tables.SegmentTables`) hold a few
  n x n float arrays per option family (TP width x micro-batch x SP x recompute policy), plus
  cached capacity and time tables per ZeRO sharding and link: 370 MB for one family of a
  2,002-layer chain, 1.4 GB for the whole plan, 17 GB for 10,000 layers. The search keeps the
  tables of at most :data:`TABLE_BYTES` (512 MiB) and rebuilds evicted ones on demand (they are
  pure functions of the layers, so the answer does not change), and refuses chains of more than
  :data:`MAX_CHAIN_LAYERS` layers: there the base tables of one family alone take 200 MB (7 n x n
  arrays), the temporaries of one DP about as much, and both grow with n^2.
* Time: every min-max DP over a split of n layers into s segments visits about
  ``(s - 1) (n - s + 1)^2`` cells, and deep pipelines on large clusters need many DPs (a
  502-layer chain: 2e9 cells in 15 s on 16,384 devices, 8e9 cells in 31 s on 65,536 devices,
  more than 10 minutes on 2**20), while real models need little (gpt3-175b on 4,096 devices:
  5e7 cells). A search stops after :data:`MAX_DP_CELLS` cells, about 40 s at the 2.5e8 cells/s
  measured; the count is deterministic, so the same input always stops at the same point.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import numpy.typing as npt

from archplace.base.errors import ConfigError

MAX_CHAIN_LAYERS = 2_048
"""Most layers of a chain the plan search takes (real models have at most ~200)."""

TABLE_BYTES = 512 * 2**20
"""Most bytes of segment tables a search keeps at once (beyond: least recently used evicted)."""

MAX_DP_CELLS = 10**10
"""Most DP cells (and table entries built) one plan search may visit."""


def check_chain_length(n: int) -> None:
    """Refuse a layer chain too long for the exact plan search.

    Raises:
        ConfigError: more than :data:`MAX_CHAIN_LAYERS` layers, with the table size it would need.
    """
    if n > MAX_CHAIN_LAYERS:
        gib = 7 * 8 * n * n / 2**30
        raise ConfigError(f"the plan search takes chains of at most {MAX_CHAIN_LAYERS:,} layers, got {n:,} "
                          f"(its tables of one option alone would take {gib:,.1f} GiB)")


def dp_cells(n: int, s: int) -> int:
    """Cells of one min-max DP over splits of ``n`` layers into ``s`` segments
    (:func:`archplace.placement.kernels.suffix_min_max`): s - 1 blocks of (n - s + 1)^2 and a
    column."""
    width = max(n - s + 1, 0)
    return max(s - 1, 0) * width * width + width


class WorkMeter:
    """The work of one plan search, in DP cells, against :data:`MAX_DP_CELLS` (not a value
    object: one per search, charged as it goes)."""

    __slots__ = ("cells", "devices", "layers", "limit")

    def __init__(self, *, layers: int, devices: int, limit: int | None = None) -> None:
        self.cells = 0
        self.layers = layers
        self.devices = devices
        self.limit = MAX_DP_CELLS if limit is None else limit

    def charge(self, cells: int) -> None:
        """Add ``cells``.

        Raises:
            ConfigError: the total exceeds the limit; the message gives the chain length, the
                cluster size and how to narrow the search.
        """
        self.cells += cells
        if self.cells > self.limit:
            raise ConfigError(
                f"the plan search is too large: it needs more than {self.limit:.3g} DP cells (about 40 s "
                f"of work) for {self.layers:,} layers on {self.devices:,} devices; narrow it (fewer devices, "
                f"or fixed TP widths, micro-batches, recompute policies and schedules)")


class TableCache:
    """Arrays by key, kept while their bytes stay within ``limit``: the least recently used are
    dropped first (and rebuilt by the caller when asked for again)."""

    __slots__ = ("_bytes", "_items", "limit")

    def __init__(self, limit: int = TABLE_BYTES // 2) -> None:
        self._items: OrderedDict[Hashable, npt.NDArray[Any]] = OrderedDict()
        self._bytes = 0
        self.limit = limit

    def get(self, key: Hashable, make: Callable[[], npt.NDArray[Any]]) -> npt.NDArray[Any]:
        """The array of ``key``, made with ``make()`` when it is not held."""
        array = self._items.get(key)
        if array is not None:
            self._items.move_to_end(key)
            return array
        array = make()
        self._items[key] = array
        self._bytes += array.nbytes
        while self._bytes > self.limit and len(self._items) > 1:
            _, dropped = self._items.popitem(last=False)
            self._bytes -= dropped.nbytes
        return array
