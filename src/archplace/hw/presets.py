"""Hardware presets: YAML files with human units and a source for every number.

A preset file has a top-level ``source`` (one line: where the numbers come from),
an ``accelerator`` section and an optional ``cluster`` section::

    source: "TPUv4 (Jouppi et al., ISCA 2023)"
    accelerator:
      name: tpuv4
      tensor_cores: {value: 8, source: "2 TensorCores x 4 MXUs"}
      array_rows: 128
      array_cols: 128
      vector_cores: 2
      vector_lanes: 128
      buffer: 128 MiB
      hbm: 32 GiB
      hbm_bandwidth: 1.2 TB/s
      clock: 1.05 GHz
      bytes_per_element: 2
      dataflow: ws                       # optional: ws (default) | os
      array_timing: overlapped           # optional: overlapped (default) | scalesim
      fp8_speedup: 2                     # optional: FP8 GEMM rate / bf16 rate; absent: no FP8
    cluster:
      devices_per_node: 4
      intra_node_bandwidth: 300 GB/s     # per device and direction
      inter_node_bandwidth: 300 GB/s
      intra_node_latency: 1 us           # alpha of the alpha-beta model
      inter_node_latency: 2 us
      topology: torus3d                  # switched | ring | torus2d | torus3d
      nics_per_node: 8                   # optional: the node's NICs (default devices_per_node)
      nccl_generation: hopper            # optional: NVIDIA GPUs, NCCL's collective model
    datasheet:                           # optional: published figures, for comparison only
      peak_tflop_per_s: 275
      tdp_w: 192
    efficiency:                          # optional: what real kernels sustain (known chips only)
      sms: {value: 108, source: "..."}   # every field needs its source
      gemm_tiles: {value: [256x128, 128x256], source: "..."}
      gemm_sustained: {value: 0.859, source: "..."}
      hbm: {value: 0.9, source: "..."}
      attention_fwd: {value: 0.73, source: "..."}
      attention_bwd: {value: 0.63, source: "..."}
      intra_node_collective: {value: 0.767, source: "..."}
      inter_node_collective: {value: 0.96, source: "..."}
      attention_kernel: {value: flash2/a100-80gb, source: "..."}  # optional: FAMILY/PRESET
      kernel_tables: {value: [gemm_h100_xla], source: "..."}  # optional: measured tables (stems
                                         # of archplace/cost/measured or CSV paths)
      kernel_floor: {value: 5.232 us, source: "..."}          # optional: least kernel time
      sustained_clock: {value: 1.228 GHz, source: "..."}      # optional: clock under sustained
                                         # load at the power limit (archplace.cost.clock)
      sustained_clock_fp8: {value: 1.65 GHz, source: "..."}   # optional: the same for FP8 GEMMs

Without an ``efficiency`` section the chip runs on the cycle model (its efficiency is what
the cycle counts give); with one, :mod:`archplace.cost.efficiency` costs its operators and
the cluster's links carry the collective efficiencies (:class:`Cluster`).

Bundled presets live in ``archplace/hw/presets/*.yaml`` and are found by
name; any other argument containing a ``/`` or ending in ``.yaml`` is read as a
path.  Every problem raises one :class:`ConfigError` line naming the file and field.

Cluster presets (``archplace/hw/clusters/*.yaml``, e.g. ``phaze-paper``) hold links
only: a top-level ``source`` and a ``cluster`` section as above, no chip.  :func:`load_cluster`
takes their names as well as those of the hardware presets, so they go with any chip or
search space (``--cluster phaze-paper``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from archplace.base import limits
from archplace.base.errors import ConfigError
from archplace.base.units import format_bytes, parse_bandwidth, parse_bytes, parse_frequency, parse_time
from archplace.cost.attention_tables import table_for
from archplace.cost.nccl_constants import GENERATIONS
from archplace.hw import _config
from archplace.hw._config import PLAUSIBLE
from archplace.hw.accelerator import (
    FRAMEWORK_OVERLAPS,
    Accelerator,
    ArrayTiming,
    Dataflow,
    KernelEfficiency,
    enum_member,
)
from archplace.hw.area import area_mm2
from archplace.hw.cluster import Cluster, Topology
from archplace.hw.power import tdp_w

_FOLDER = "presets"
_KIND = "hardware preset"
_CLUSTER_FOLDER = "clusters"
_CLUSTER_KIND = "cluster preset"
_TOP_FIELDS = ("source", "description", "accelerator", "cluster", "datasheet", "efficiency",
               "calibration")  # calibration: archplace calibrate's record, read by no loader
_ACCELERATOR_FIELDS = (
    "name", "tensor_cores", "array_rows", "array_cols", "vector_cores", "vector_lanes",
    "buffer", "hbm", "hbm_bandwidth", "clock", "bytes_per_element",
)
_ACCELERATOR_OPTIONAL = ("dataflow", "array_timing", "fp8_speedup")
_DATASHEET_FIELDS = ("peak_tflop_per_s", "tdp_w")
_KERNEL_FRACTIONS = ("gemm_sustained", "hbm", "attention_fwd", "attention_bwd")
_LINK_FRACTIONS = ("intra_node_collective", "inter_node_collective")
_EFFICIENCY_FIELDS = ("sms", "gemm_tiles", *_KERNEL_FRACTIONS, *_LINK_FRACTIONS)
_EFFICIENCY_OPTIONAL = ("attention_kernel", "collective_sms", "overlap_memory_bound_share",
                        "kernel_tables", "kernel_floor",  # archplace.cost.kernel_tables
                        "sustained_clock",  # archplace.cost.clock
                        "sustained_clock_fp8",
                        *FRAMEWORK_OVERLAPS)  # archplace.placement.tp_overlap, pipeline, ep_overlap
_CLUSTER_FIELDS = (
    "devices_per_node", "intra_node_bandwidth", "inter_node_bandwidth",
    "intra_node_latency", "inter_node_latency", "topology",
)
_CLUSTER_OPTIONAL = ("nics_per_node", "nccl_generation")


def accelerator_preset_names() -> list[str]:
    """Names of the bundled hardware presets, sorted (e.g. ``["tpuv4"]``)."""
    return _config.bundled_names(_FOLDER)


def cluster_preset_names() -> list[str]:
    """Names of the bundled cluster presets (links only, no chip), sorted (``["phaze-paper"]``)."""
    return _config.bundled_names(_CLUSTER_FOLDER)


def _read_cluster_preset(name: str, devices: int) -> Cluster:
    config = _config.resolve(name, _CLUSTER_FOLDER, _CLUSTER_KIND)
    data = _config.read_mapping(config)
    _config.check_keys(data, config.label, required=["source", "cluster"], optional=["description"])
    _config.text_field(data["source"], f"{config.label}: source")
    section = _config.section(data, "cluster", config.label)
    return _parse_cluster(section, f"{config.label}: cluster", devices)


def _read(name_or_path: str | os.PathLike[str]) -> tuple[str, dict[str, Any]]:
    config = _config.resolve(name_or_path, _FOLDER, _KIND)
    data = _config.read_mapping(config)
    _config.check_keys(data, config.label, required=["accelerator"], optional=_TOP_FIELDS)
    if "source" in data:
        _config.text_field(data["source"], f"{config.label}: source")
    return config.label, data


def parse_accelerator(section: dict[str, Any], where: str) -> Accelerator:
    """Build an :class:`Accelerator` from a preset's ``accelerator`` mapping.

    Args:
        section: the mapping (fields as in the module docstring).
        where: prefix for messages, e.g. ``"tpuv4.yaml: accelerator"``.

    Raises:
        ConfigError: a missing or unknown field, a non-positive or unparsable value, or one
            outside its plausibility range (:data:`archplace.hw._config.PLAUSIBLE`).
    """
    _config.check_keys(section, where, required=_ACCELERATOR_FIELDS, optional=_ACCELERATOR_OPTIONAL)

    def count(key: str) -> int:
        return _config.positive_int(section[key], f"{where}.{key}", PLAUSIBLE[key])

    def amount(key: str, parser: Callable[[str | int | float, str], float]) -> float:
        return _config.quantity(section[key], parser, f"{where}.{key}", plausible=PLAUSIBLE[key])

    return Accelerator(
        name=_config.text_field(section["name"], f"{where}.name"),
        tensor_cores=count("tensor_cores"),
        array_rows=count("array_rows"),
        array_cols=count("array_cols"),
        vector_cores=count("vector_cores"),
        vector_lanes=count("vector_lanes"),
        buffer_bytes=amount("buffer", parse_bytes),
        hbm_bytes=amount("hbm", parse_bytes),
        hbm_bandwidth_bytes_per_s=amount("hbm_bandwidth", parse_bandwidth),
        clock_hz=amount("clock", parse_frequency),
        bytes_per_element=count("bytes_per_element"),
        dataflow=_dataflow(section.get("dataflow", Dataflow.WS.value), f"{where}.dataflow"),
        array_timing=parse_array_timing(section.get("array_timing", ArrayTiming.OVERLAPPED.value),
                                        f"{where}.array_timing"),
        fp8_speedup=parse_fp8_speedup(section.get("fp8_speedup"), f"{where}.fp8_speedup"),
    )


def parse_fp8_speedup(raw: Any, where: str) -> float | None:
    """The optional ``fp8_speedup`` of an ``accelerator`` section: how many times faster the
    arrays run a GEMM with FP8 operands than with bf16 ones (a bare number >= 1, or
    ``{value: 2, source: "..."}``); None (the field left out): the chip has no FP8 tensor cores
    and FP8 training is refused on it (:func:`archplace.cost.precision.check_precision`).

    Raises:
        ConfigError: not a bare number, below 1, or above its plausibility range (16).
    """
    if raw is None:
        return None
    speedup = _config.quantity(raw, _plain_number, where)
    if speedup < 1.0:
        raise ConfigError(f"{where}: must be >= 1 (FP8 GEMMs are not slower than bf16 ones), "
                          f"got {speedup!r}")
    return PLAUSIBLE["fp8_speedup"].check(speedup, where)


def _dataflow(raw: Any, where: str) -> Dataflow:
    return enum_member(Dataflow, _config.text_field(raw, where), where, "dataflow")


def parse_array_timing(raw: Any, where: str) -> ArrayTiming:
    """An :class:`ArrayTiming` from its text (bare or ``{value: ..., source: ...}``).

    Raises:
        ConfigError: not text, or not one of ``overlapped``, ``scalesim`` (the message
            names ``where`` and lists the choices).
    """
    return enum_member(ArrayTiming, _config.text_field(raw, where), where, "array_timing")


def _parse_cluster(section: dict[str, Any], where: str, devices: int) -> Cluster:
    _config.check_keys(section, where, required=_CLUSTER_FIELDS, optional=_CLUSTER_OPTIONAL)
    per_node = _config.positive_int(section["devices_per_node"], f"{where}.devices_per_node",
                                    PLAUSIBLE["devices_per_node"])
    nics = None if "nics_per_node" not in section else _config.positive_int(
        section["nics_per_node"], f"{where}.nics_per_node", PLAUSIBLE["devices_per_node"])
    generation = None if "nccl_generation" not in section else _config.text_field(
        section["nccl_generation"], f"{where}.nccl_generation")
    if generation is not None and generation not in GENERATIONS:
        raise ConfigError(f"{where}.nccl_generation: unknown generation {generation!r}; choose from: "
                          f"{', '.join(GENERATIONS)}")
    topology_text = _config.text_field(section["topology"], f"{where}.topology")
    try:
        topology = Topology(topology_text)
    except ValueError:
        choices = ", ".join(t.value for t in Topology)
        raise ConfigError(
            f"{where}.topology: unknown topology {topology_text!r}; choose from: {choices}"
        ) from None
    def amount(key: str, parser: Callable[[str | int | float, str], float]) -> float:
        return _config.quantity(section[key], parser, f"{where}.{key}", allow_zero=parser is parse_time,
                                plausible=PLAUSIBLE[key])

    return Cluster(
        devices=devices,
        devices_per_node=min(per_node, devices),
        intra_node_bandwidth_bytes_per_s=amount("intra_node_bandwidth", parse_bandwidth),
        inter_node_bandwidth_bytes_per_s=amount("inter_node_bandwidth", parse_bandwidth),
        intra_node_latency_s=amount("intra_node_latency", parse_time),
        inter_node_latency_s=amount("inter_node_latency", parse_time),
        topology=topology,
        nics_per_node=nics,
        nccl_generation=generation,
    )


def _cited(raw: Any, where: str) -> Any:
    """The value of an ``efficiency`` field, which must be ``{value: ..., source: "..."}``."""
    value, source = _config.unwrap(raw, where)
    if source is None or not source.strip():
        raise ConfigError(f"{where}: expected {{value: ..., source: \"...\"}}: every efficiency "
                          f"figure needs its source")
    return value


def _fraction(raw: Any, where: str) -> float:
    value = _cited(raw, where)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 < value <= 1.0:
        raise ConfigError(f"{where}: expected a fraction in (0, 1], got {value!r}")
    return float(value)


def _tile(raw: Any, where: str) -> tuple[int, int]:
    text = str(raw).lower().replace(" ", "")
    parts = text.split("x")
    if len(parts) != 2 or not all(p.isdigit() and 0 < len(p) <= 6 and int(p) > 0 for p in parts):
        raise ConfigError(f"{where}: expected a tile ROWSxCOLS such as 256x128, got {raw!r}")
    for part in parts:
        PLAUSIBLE["gemm_tiles"].check(int(part), where)
    return int(parts[0]), int(parts[1])


def _efficiency_section(data: dict[str, Any], label: str) -> dict[str, Any] | None:
    if "efficiency" not in data:
        return None
    section = _config.section(data, "efficiency", label)
    _config.check_keys(section, f"{label}: efficiency", required=_EFFICIENCY_FIELDS,
                       optional=_EFFICIENCY_OPTIONAL)
    return section


def parse_efficiency(section: dict[str, Any], where: str) -> KernelEfficiency:
    """The :class:`KernelEfficiency` of a preset's ``efficiency`` mapping (module docstring).

    Raises:
        ConfigError: a missing or unknown field, a field without its source, a count that is not
            a positive whole number, a malformed tile, or a fraction outside (0, 1].
    """
    _config.check_keys(section, where, required=_EFFICIENCY_FIELDS, optional=_EFFICIENCY_OPTIONAL)
    _cited(section["sms"], f"{where}.sms")
    sms = _config.positive_int(section["sms"], f"{where}.sms", PLAUSIBLE["sms"])
    tiles = _config.value_list(_cited(section["gemm_tiles"], f"{where}.gemm_tiles"), f"{where}.gemm_tiles")
    fractions = {name: _fraction(section[name], f"{where}.{name}") for name in _KERNEL_FRACTIONS}
    for name in _LINK_FRACTIONS:
        _fraction(section[name], f"{where}.{name}")
    overlap: dict[str, Any] = {}  # optional: the defaults of KernelEfficiency otherwise (checked there)
    if "collective_sms" in section:
        overlap["collective_sms"] = _cited(section["collective_sms"], f"{where}.collective_sms")
    if "overlap_memory_bound_share" in section:
        overlap["overlap_memory_bound_share"] = _cited(section["overlap_memory_bound_share"],
                                                       f"{where}.overlap_memory_bound_share")
    for flag in FRAMEWORK_OVERLAPS:
        if flag in section:
            overlap[flag] = _cited(section[flag], f"{where}.{flag}")
    tables: tuple[str, ...] = ()
    floor_s = 0.0
    if "kernel_tables" in section:  # shipped table stems or CSV paths (relative to the working folder)
        names = _config.value_list(_cited(section["kernel_tables"], f"{where}.kernel_tables"),
                                   f"{where}.kernel_tables")
        tables = tuple(str(n) for n in names)
    if "kernel_floor" in section:
        _cited(section["kernel_floor"], f"{where}.kernel_floor")
        floor_s = _config.quantity(section["kernel_floor"], parse_time, f"{where}.kernel_floor",
                                   allow_zero=True, plausible=PLAUSIBLE["kernel_floor"])
    sustained_hz = 0.0
    if "sustained_clock" in section:
        _cited(section["sustained_clock"], f"{where}.sustained_clock")
        sustained_hz = _config.quantity(section["sustained_clock"], parse_frequency,
                                        f"{where}.sustained_clock", plausible=PLAUSIBLE["clock"])
    sustained_fp8_hz = 0.0
    if "sustained_clock_fp8" in section:
        _cited(section["sustained_clock_fp8"], f"{where}.sustained_clock_fp8")
        sustained_fp8_hz = _config.quantity(section["sustained_clock_fp8"], parse_frequency,
                                            f"{where}.sustained_clock_fp8", plausible=PLAUSIBLE["clock"])
    if tables:
        from archplace.cost.kernel_tables import chip_tables  # a missing or malformed table fails here
        chip_tables(tables, floor_s)
    return KernelEfficiency(
        sms=sms, gemm_tiles=tuple(_tile(t, f"{where}.gemm_tiles[{i}]") for i, t in enumerate(tiles)),
        gemm_sustained=fractions["gemm_sustained"], hbm=fractions["hbm"],
        attention_fwd=fractions["attention_fwd"], attention_bwd=fractions["attention_bwd"],
        attention_kernel=_attention_kernel(section.get("attention_kernel"), where), **overlap,
        kernel_tables=tables, kernel_floor_s=floor_s, sustained_clock_hz=sustained_hz,
        sustained_clock_fp8_hz=sustained_fp8_hz)


def _attention_kernel(raw: Any, where: str) -> str | None:
    """The optional ``attention_kernel`` (``FAMILY/PRESET``) of an ``efficiency`` section, checked
    against the shipped attention tables (:mod:`archplace.cost.attention_tables`)."""
    if raw is None:
        return None
    value = _config.text_field(_cited(raw, f"{where}.attention_kernel"), f"{where}.attention_kernel")
    family, _, preset = value.partition("/")
    try:
        table_for(family, preset)
    except ConfigError as exc:
        raise ConfigError(f"{where}.attention_kernel: {exc}") from None
    return value


def load_accelerator(name_or_path: str | os.PathLike[str]) -> Accelerator:
    """The accelerator of a bundled preset (by name) or of a preset file (by path), with its
    :class:`KernelEfficiency` when the preset has an ``efficiency`` section.

    Raises:
        ConfigError: unknown name (``unknown hardware preset 'x'; choose from: tpuv4``),
            missing file, malformed YAML, missing/unknown/non-positive field, unknown unit, a
            value outside its plausibility range (:data:`archplace.hw._config.PLAUSIBLE`;
            the ``cluster`` and ``datasheet`` sections are checked too), or a bad ``efficiency``
            section (:func:`parse_efficiency`).
    """
    label, data = _read(name_or_path)
    section = _config.section(data, "accelerator", label)
    acc = parse_accelerator(section, f"{label}: accelerator")
    _datasheet(data, label)  # every section of the file is checked, used here or not
    if "cluster" in data:
        _parse_cluster(_config.section(data, "cluster", label), f"{label}: cluster", 1)
    efficiency = _efficiency_section(data, label)
    if efficiency is None:
        return acc
    return replace(acc, efficiency=parse_efficiency(efficiency, f"{label}: efficiency"))


def efficiency_sources(name_or_path: str | os.PathLike[str]) -> dict[str, str]:
    """``{field: source}`` of a preset's ``efficiency`` section ({} without one).

    Raises:
        ConfigError: as :func:`load_accelerator`.
    """
    label, data = _read(name_or_path)
    section = _efficiency_section(data, label)
    if section is None:
        return {}
    return {name: str(_config.unwrap(section[name], name)[1]) for name in _EFFICIENCY_FIELDS}


def load_cluster(name_or_path: str | os.PathLike[str], devices: int) -> Cluster:
    """A cluster of ``devices`` accelerators with the links of a preset's ``cluster`` section,
    and the collective efficiency of each link from its ``efficiency`` section (1 without one).

    ``name_or_path`` is a hardware preset, a cluster preset (:func:`cluster_preset_names`, links
    only) or the path of a hardware file.  ``devices_per_node`` is capped at ``devices`` (a
    cluster smaller than one node).

    Raises:
        ConfigError: as :func:`load_accelerator` (an unknown name lists the hardware and the
            cluster presets), a preset without a ``cluster`` section, an unknown topology, or
            a non-positive ``devices``.
    """
    if isinstance(devices, bool) or not isinstance(devices, int) or devices <= 0:
        raise ConfigError(f"devices must be a positive whole number, got {devices!r}")
    limits.whole("devices", devices, 1, limits.MAX_DEVICES)
    clusters = cluster_preset_names()
    if isinstance(name_or_path, str) and name_or_path in clusters:
        return _read_cluster_preset(name_or_path, devices)
    try:
        label, data = _read(name_or_path)
    except ConfigError as exc:
        if str(exc).startswith(f"unknown {_KIND} "):
            raise ConfigError(f"{exc}; cluster presets: {', '.join(clusters)}") from None
        raise
    section = _config.section(data, "cluster", label)
    cluster = _parse_cluster(section, f"{label}: cluster", devices)
    efficiency = _efficiency_section(data, label)
    if efficiency is None:
        return cluster
    where = f"{label}: efficiency"
    return replace(cluster,
                   intra_node_efficiency=_fraction(efficiency["intra_node_collective"],
                                                   f"{where}.intra_node_collective"),
                   inter_node_efficiency=_fraction(efficiency["inter_node_collective"],
                                                   f"{where}.inter_node_collective"))


def preset_source(name_or_path: str | os.PathLike[str]) -> str:
    """The top-level ``source`` line of a preset ("" when it has none).

    Raises:
        ConfigError: as :func:`load_accelerator`.
    """
    _, data = _read(name_or_path)
    source, _ = _config.unwrap(data.get("source", ""), "source")
    return str(source)


def _plain_number(value: str | int | float, what: str) -> float:
    if isinstance(value, str):
        raise ConfigError(f"{what}: expected a bare number, got {value!r}")
    return float(value)


def preset_datasheet(name_or_path: str | os.PathLike[str]) -> dict[str, float]:
    """The published figures of a preset's optional ``datasheet`` section.

    Returns:
        ``{"peak_flop_per_s": ..., "tdp_w": ...}`` with the keys the file gives (FLOP/s and
        watts; the file writes ``peak_tflop_per_s`` and ``tdp_w``); ``{}`` without a section.

    Raises:
        ConfigError: as :func:`load_accelerator`, an unknown field or a non-positive value.
    """
    label, data = _read(name_or_path)
    return _datasheet(data, label)


def _datasheet(data: dict[str, Any], label: str) -> dict[str, float]:
    if "datasheet" not in data:
        return {}
    where = f"{label}: datasheet"
    section = _config.section(data, "datasheet", label)
    _config.check_keys(section, where, required=(), optional=_DATASHEET_FIELDS)
    out: dict[str, float] = {}
    if "peak_tflop_per_s" in section:
        out["peak_flop_per_s"] = 1e12 * _config.quantity(
            section["peak_tflop_per_s"], _plain_number, f"{where}.peak_tflop_per_s",
            plausible=PLAUSIBLE["peak_tflop_per_s"])
    if "tdp_w" in section:
        out["tdp_w"] = _config.quantity(section["tdp_w"], _plain_number, f"{where}.tdp_w",
                                        plausible=PLAUSIBLE["tdp_w"])
    return out


def preset_summaries() -> list[dict[str, Any]]:
    """One row per bundled preset, for an ``archplace hardware`` listing.

    Returns:
        ``[{"name", "peak_tflop_per_s", "hbm_bytes", "hbm", "hbm_bandwidth_bytes_per_s",
        "area_mm2", "tdp_w", "datasheet_tdp_w", "source"}, ...]`` sorted by name; ``hbm`` is
        human text (``32.0 GiB``); ``tdp_w`` is the power model's, ``datasheet_tdp_w`` the
        published one (``None`` when the preset gives none).
    """
    rows: list[dict[str, Any]] = []
    for name in accelerator_preset_names():
        acc = load_accelerator(name)
        sheet = preset_datasheet(name)
        rows.append({
            "name": name,
            "peak_tflop_per_s": acc.peak_flop_per_s / 1e12,
            "hbm_bytes": acc.hbm_bytes,
            "hbm": format_bytes(acc.hbm_bytes),
            "hbm_bandwidth_bytes_per_s": acc.hbm_bandwidth_bytes_per_s,
            "area_mm2": area_mm2(acc),
            "tdp_w": tdp_w(acc),
            "datasheet_tdp_w": sheet.get("tdp_w"),
            "source": preset_source(name),
        })
    return rows
