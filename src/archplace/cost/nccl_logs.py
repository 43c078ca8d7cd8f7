"""Measured collective bandwidth (nccl-tests style logs) and NCCL's prediction for them.

A log file is CSV with ``#`` comment lines first: its provenance (source repository, path,
commit, hardware) and one line of ``key: value`` pairs separated by ``;`` that describes the
machine (one line in the file; wrapped here)::

    # ranks: 16; nodes: 2; gpus_per_node: 8; nics_per_node: 8; nic_gbps: 25; \
    #   generation: ampere; nvlink_links: 12
    size_bytes,op,algbw_gbps,busbw_gbps
    1048576,all_reduce,8.96,16.8

(GB/s = 1e9 bytes/s, as nccl-tests prints them).  :func:`compare` puts NCCL's predicted bus
bandwidth (:mod:`archplace.cost.nccl`) next to every measured row.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from archplace.base.errors import ConfigError
from archplace.cost import nccl

_KEYS = ("ranks", "nodes", "gpus_per_node", "nics_per_node", "nic_gbps", "generation", "nvlink_links")
COLUMNS = ("size_bytes", "op", "algbw_gbps", "busbw_gbps")


@dataclass(frozen=True)
class MeasuredLog:
    """One measured log: its ``name`` (file stem), machine description ``machine`` (the keys
    of the module docstring, text values) and ``rows`` (a DataFrame with :data:`COLUMNS`)."""

    name: str
    machine: dict[str, str]
    rows: pd.DataFrame

    def communicator(self) -> nccl.Communicator:
        """The NCCL communicator of the logged run: ``gpus_per_node`` ranks on each of
        ``nodes`` nodes, NVLink ``nvlink_links x SMxx_NVLINK_BW``, every NIC of the node used.

        Raises:
            ConfigError: an unknown generation or a bad number.
        """
        m = self.machine
        gen = nccl.generation(m["generation"])
        try:
            per_node, nodes = int(m["gpus_per_node"]), int(m["nodes"])
            links, nics, nic = int(m["nvlink_links"]), int(m["nics_per_node"]), float(m["nic_gbps"])
        except ValueError as exc:
            raise ConfigError(f"nccl log {self.name}: {exc}") from None
        used = nics if nics <= per_node else per_node * (nics // per_node)
        return nccl.Communicator(gen, per_node, nodes, links * gen.nvlink_gbps, nic,
                                 max(1, min(used, nics)))


def read_log(path: str | os.PathLike[str]) -> MeasuredLog:
    """Read one log file (module docstring).

    Raises:
        ConfigError: no machine line, a missing key, or missing columns.
    """
    text = Path(path).read_text(encoding="utf-8")
    machine: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# ranks:"):
            for part in line[1:].split(";"):
                key, _, value = part.partition(":")
                machine[key.strip()] = value.strip()
    missing = [k for k in _KEYS if k not in machine]
    if missing:
        raise ConfigError(f"nccl log {path}: the machine line lacks {', '.join(missing)}")
    rows = pd.read_csv(io.StringIO(text), comment="#")
    if list(rows.columns) != list(COLUMNS):
        raise ConfigError(f"nccl log {path}: expected columns {', '.join(COLUMNS)}, got "
                          f"{', '.join(map(str, rows.columns))}")
    return MeasuredLog(Path(path).stem, machine, rows)


def compare(log: MeasuredLog) -> pd.DataFrame:
    """The log's rows with ``predicted_busbw_gbps``, ``algorithm``, ``protocol`` (NCCL's choice)
    and ``error`` (predicted / measured - 1) added, and the same for the pipelined charge
    (``pipelined_busbw_gbps``, ``pipelined_error``; :func:`archplace.cost.nccl.pipelined_time_s`)."""
    comm = log.communicator()
    out = log.rows.copy()
    predicted, pipelined, algos, protos = [], [], [], []
    for size, op in zip(out["size_bytes"], out["op"], strict=True):
        _, choice = nccl.best(str(op), float(size), comm)
        predicted.append(nccl.bus_bandwidth_gbps(str(op), float(size), comm))
        pipelined.append(nccl.bus_bandwidth_gbps(str(op), float(size), comm, pipelined=True))
        algos.append(choice.algorithm)
        protos.append(choice.protocol)
    out["predicted_busbw_gbps"] = predicted
    out["algorithm"] = algos
    out["protocol"] = protos
    out["error"] = out["predicted_busbw_gbps"] / out["busbw_gbps"] - 1.0
    out["pipelined_busbw_gbps"] = pipelined
    out["pipelined_error"] = out["pipelined_busbw_gbps"] / out["busbw_gbps"] - 1.0
    return out
