"""``archplace profile``: time the grid's kernels on one device and write one table per kernel
class, in the format of the shipped measured tables.

torch is imported inside :func:`profile` only (importing archplace must stay cheap).
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import platform
import re
import shlex
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from archplace.base.errors import ConfigError
from archplace.base.outputs import check_output, write_text_output
from archplace.profiling import kernels as K
from archplace.profiling.grid import GRIDS, KERNELS, AttentionPoint, GemmPoint, Grid, RowwisePoint
from archplace.profiling.grid import grid as make_grid
from archplace.profiling.sustained import (
    SustainedClock,
    measure_sustained_clock,
    nvml_readers,
    sm_clock_hz,
    trace_text,
)
from archplace.profiling.tables import Row, table_text
from archplace.profiling.timer import l2_flush_buffer, time_call

#: ``progress(kernel, done, total)``: called after each grid point (done counts the whole run).
Progress = Callable[[str, int, int], None]

_DEVICE = re.compile(r"^(cpu|cuda)(?::(\d{1,4}))?$")
_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

#: The file of the hardware-YAML snippet written beside the tables.
SNIPPET = "kernel_tables.yaml"

#: The kernel classes a hardware preset's ``efficiency.kernel_tables`` takes (GEMM tables and the
#: softmax, layer-norm and GeLU bandwidth curves); the copy and attention tables are not named
#: in the snippet.
PRESET_KERNELS = ("gemm", "softmax", "layernorm", "gelu")


@dataclass(frozen=True, slots=True)
class ProfiledTable:
    """One written table.

    Attributes:
        kernel: its kernel class; path: its file; rows: points measured.
        best_rate: the highest rate over its rows, in ``rate_unit`` (FLOP/s for GEMMs and
            attention, bytes/s for the others: see :func:`rate`).
        fastest_s: the shortest latency over its rows, seconds.
    """

    kernel: str
    path: str
    rows: int
    best_rate: float
    rate_unit: str
    fastest_s: float


@dataclass(frozen=True, slots=True)
class ProfileResult:
    """What :func:`profile` measured and wrote.

    Attributes:
        device: the device's name (``NVIDIA H100 80GB HBM3``); dtype, grid: as asked.
        tables: the tables written, in :data:`~archplace.profiling.grid.KERNELS` order.
        snippet: the hardware-YAML snippet naming the tables (None when no table was written).
        planned, measured: grid points asked for and timed.
        skipped: points that could not run (out of memory, unsupported), one line each.
        stopped_early: the ``max_seconds`` budget ended the run before the grid did.
        elapsed_s: seconds the run took.
        made_by: the equivalent ``archplace profile`` command (each table's ``made_by``).
        sustained_clock_hz: the throughput-equivalent clock sustained under GEMM load (Hz), when
            measured (:mod:`archplace.profiling.sustained`); sustained_summary: that in words;
            sustained_trace: the trace file.
    """

    device: str
    dtype: str
    grid: str
    tables: tuple[ProfiledTable, ...]
    snippet: str | None
    planned: int
    measured: int
    skipped: tuple[str, ...]
    stopped_early: bool
    elapsed_s: float
    made_by: str
    sustained_clock_hz: float | None = None
    sustained_summary: str | None = None
    sustained_trace: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready): every field, ``tables`` as a list of dicts."""
        data = asdict(self)
        data["skipped"] = list(self.skipped)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProfileResult:
        """The inverse of :meth:`to_dict`."""
        fields = dict(data)
        fields["tables"] = tuple(ProfiledTable(**table) for table in data["tables"])
        fields["skipped"] = tuple(data["skipped"])
        return cls(**fields)


def check_kernels(kernels: Sequence[str]) -> tuple[str, ...]:
    """The kernel classes asked for, in :data:`KERNELS` order, each once.

    Raises:
        ConfigError: none, or an unknown class.
    """
    unknown = [k for k in kernels if k not in KERNELS]
    if unknown or not kernels:
        raise ConfigError(f"kernel: {', '.join(map(repr, unknown)) or 'none given'}; choose from "
                          f"{', '.join(KERNELS)}", fields=("kernel",))
    return tuple(k for k in KERNELS if k in kernels)


def output_paths(out_dir: str | os.PathLike[str], kernels: Sequence[str], tag: str, *,
                 sustained: bool = False) -> dict[str, Path]:
    """The files a run writes: ``KERNEL_TAG.csv`` per kernel class, the snippet
    (:data:`SNIPPET`) and, with ``sustained``, the clock trace ``sustained_TAG.csv``, keyed by
    kernel class (and ``snippet``, ``sustained``).

    Raises:
        ConfigError: a tag that is not a plain name (letters, digits, ``_ . -``, at most 64).
    """
    if not _TAG.match(tag):
        raise ConfigError(f"tag {tag!r} must be a plain name: letters, digits, '_', '.', '-' "
                          "(at most 64, starting with a letter or digit)", fields=("tag",))
    root = Path(out_dir)
    paths = {kernel: root / f"{kernel}_{tag}.csv" for kernel in check_kernels(kernels)}
    if sustained:
        paths["sustained"] = root / f"sustained_{tag}.csv"
    paths["snippet"] = root / SNIPPET
    return paths


def check_options(*, grid: str, device: str, dtype: str, max_seconds: float | None,
                  attention: str = "flash2", sustained_s: float = 0.0) -> None:
    """Refuse bad options before torch is imported.

    Raises:
        ConfigError: an unknown grid, a device other than ``cpu``, ``cuda`` or ``cuda:N``, an
            unknown dtype, a budget that is not a positive finite number of seconds, an unknown
            attention family, ``cudnn`` attention or a sustained-clock run on the CPU, or a
            sustained-clock duration that is negative or not finite.
    """
    if grid not in GRIDS:
        raise ConfigError(f"grid {grid!r}: choose from {', '.join(GRIDS)}", fields=("grid",))
    if not _DEVICE.match(device):
        raise ConfigError(f"device {device!r}: expected cpu, cuda or cuda:N", fields=("device",))
    if dtype not in K.DTYPES:
        raise ConfigError(f"dtype {dtype!r}: choose from {', '.join(K.DTYPES)}", fields=("dtype",))
    if max_seconds is not None and not (0 < max_seconds < float("inf")):
        raise ConfigError(f"max_seconds {max_seconds!r} must be a positive number of seconds",
                          fields=("max_seconds",))
    if attention not in K.ATTENTION_BACKENDS:
        raise ConfigError(f"attention {attention!r}: choose from {', '.join(K.ATTENTION_BACKENDS)}",
                          fields=("attention",))
    cpu = device == "cpu"
    if attention != "flash2" and cpu:
        raise ConfigError(f"attention {attention}: a CUDA backend; on the CPU only flash2 (PyTorch's "
                          "CPU flash kernel) runs", fields=("attention",))
    if not (0 <= sustained_s < float("inf")):
        raise ConfigError(f"sustained {sustained_s!r} must be a number of seconds >= 0 (0: not measured)",
                          fields=("sustained",))
    if sustained_s and cpu:
        raise ConfigError("sustained: the SM clock under load is a GPU's (NVML); not measured on the CPU",
                          fields=("sustained",))


def command_line(out_dir: str | os.PathLike[str], *, grid: str, device: str, dtype: str,
                 max_seconds: float | None, kernels: Sequence[str], tag: str, preset: str,
                 attention: str = "flash2", sustained_s: float = 0.0) -> str:
    """The ``archplace profile`` command that makes these tables (the tables' ``made_by``)."""
    words = ["archplace", "profile", "--out-dir", os.fspath(out_dir), "--grid", grid,
             "--device", device, "--dtype", dtype]
    if max_seconds is not None:
        words += ["--max-seconds", f"{max_seconds:g}"]
    if tuple(kernels) != KERNELS:
        for kernel in kernels:
            words += ["--kernel", kernel]
    if attention != "flash2":
        words += ["--attention", attention]
    if sustained_s:
        words += ["--sustained", f"{sustained_s:g}"]
    if tag != "profiled":
        words += ["--tag", tag]
    if preset != "-":
        words += ["--preset", preset]
    return shlex.join(words)


def attention_flop(point: AttentionPoint) -> float:
    """FLOP of one attention call as the FlashAttention-2 paper counts them (arXiv:2307.08691
    sec. 4.1): forward ``4 * seq**2 * head_dim * heads * batch``, halved when causal; backward
    2.5 times the forward."""
    flop = 4.0 * point.seq**2 * point.head_dim * point.heads * point.batch
    flop /= 2.0 if point.causal else 1.0
    return flop * (2.5 if point.direction == "bwd" else 1.0)


def rate(kernel: str, point: object, dtype: str, latency_s: float) -> tuple[float, str]:
    """The rate of one measured point: FLOP/s for ``gemm`` and ``attention``
    (:func:`attention_flop`); for the others bytes/s moved, each element read once and written
    once (``2 * bytes``, as STREAM counts its Copy kernel: J. McCalpin, "Memory Bandwidth and
    Machine Balance", IEEE TCCA Newsletter 1995, sec. 2)."""
    if isinstance(point, GemmPoint):
        return point.flop / latency_s, "FLOP/s"
    if isinstance(point, AttentionPoint):
        return attention_flop(point) / latency_s, "FLOP/s"
    width = K.ELEMENT_BYTES[dtype]
    if isinstance(point, RowwisePoint):
        return 2.0 * point.rows * point.cols * width / latency_s, "B/s"
    if kernel == "copy":
        return 2.0 * int(point) / latency_s, "B/s"  # type: ignore[call-overload]
    return 2.0 * int(point) * width / latency_s, "B/s"  # type: ignore[call-overload]


def _device(torch: Any, text: str, dtype: str) -> tuple[Any, str]:
    """The torch device of ``text`` and its name.

    Raises:
        ConfigError: CUDA asked for and absent, an index past the last GPU, or fp8 on a GPU
            older than compute capability 8.9 (Ada/Hopper, the first with FP8 tensor cores).
    """
    device = torch.device(text)
    if device.type == "cpu":
        return device, _cpu_name()
    if not torch.cuda.is_available():
        why = "built without CUDA" if torch.version.cuda is None else "sees no CUDA device"
        raise ConfigError(f"device {text!r}: torch {torch.__version__} {why}; use a machine with a "
                          "CUDA GPU and a CUDA build of torch, or device cpu", fields=("device",))
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index >= torch.cuda.device_count():
        raise ConfigError(f"device {text!r}: there are {torch.cuda.device_count()} CUDA devices",
                          fields=("device",))
    device = torch.device("cuda", index)
    if dtype == "fp8" and torch.cuda.get_device_capability(device) < (8, 9):
        raise ConfigError(f"dtype fp8 needs compute capability 8.9 or later; {text!r} has "
                          f"{torch.cuda.get_device_capability(device)}", fields=("dtype",))
    return device, torch.cuda.get_device_name(device)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return "CPU " + line.partition(":")[2].strip()
    except OSError:
        pass
    return f"CPU {platform.machine() or 'unknown'}"


def _call(torch: Any, device: Any, kernel: str, point: object, dtype: str) -> K.Call:
    if kernel == "gemm":
        return K.gemm_call(torch, device, point, dtype)  # type: ignore[arg-type]
    if kernel == "attention":
        return K.attention_call(torch, device, point, dtype)  # type: ignore[arg-type]
    if kernel in ("softmax", "layernorm"):
        return K.rowwise_call(torch, device, kernel, point, dtype)  # type: ignore[arg-type]
    if kernel == "gelu":
        return K.gelu_call(torch, device, point, dtype)  # type: ignore[arg-type]
    return K.copy_call(torch, device, point)  # type: ignore[arg-type]


def row_of(kernel: str, point: object, dtype: str, latency_s: float) -> Row:
    """The table row of one measured point."""
    if isinstance(point, GemmPoint):
        sizes: dict[str, int | str] = {"batch": point.batch, "m": point.m, "n": point.n, "k": point.k,
                                       "calls": 1}
    elif isinstance(point, AttentionPoint):
        sizes = {"batch": point.batch, "heads": point.heads, "seq_len": point.seq, "head_dim": point.head_dim,
                 "causal": int(point.causal), "direction": point.direction,
                 "tflop_per_s": repr(attention_flop(point) / latency_s / 1e12)}
    elif isinstance(point, RowwisePoint):
        sizes = {"rows": point.rows, "cols": point.cols}
    elif kernel == "copy":
        sizes = {"bytes": int(point)}  # type: ignore[call-overload]
    else:
        sizes = {"elements": int(point)}  # type: ignore[call-overload]
    return Row("-", sizes, dtype, latency_s)


def header(kernel: str, *, device_name: str, preset: str, dtype: str, torch_version: str,
           cuda_version: str, date: str, made_by: str, the_grid: Grid, cuda: bool,
           attention: str = "flash2", clocks_mhz: Sequence[float] = ()) -> dict[str, str]:
    """The ``# key: value`` lines of one profiled table (module docstring of
    :mod:`archplace.profiling.tables`); an attention table also names its ``family``
    (:func:`~archplace.profiling.kernels.attention_family`) and ``use: model``, as
    :mod:`archplace.cost.attention_tables` requires.  With ``clocks_mhz`` (the SM clock read
    after each shape), ``clock`` is their median, the clock :mod:`archplace.cost.clock` scales
    the rows from."""
    if kernel == "attention":
        library = K.attention_library(attention)
    else:
        library = K.LIBRARY["gemm-fp8" if kernel == "gemm" and dtype == "fp8" else kernel]
    timer = ("CUDA events around each call, the L2 cache flushed (256 MiB zeroed) before each"
             if cuda else "time.perf_counter around each call")
    extra = {"family": K.attention_family(cuda, attention), "use": "model"} if kernel == "attention" else {}
    if clocks_mhz:
        median_ghz = statistics.median(clocks_mhz) / 1e3
        extra["clock"] = (f"{median_ghz:.4g} GHz (median SM clock of {len(clocks_mhz)} "
                          f"NVML readings, one after each shape's timed calls; {min(clocks_mhz):.0f} to "
                          f"{max(clocks_mhz):.0f} MHz)")
    units = ("TFLOP/s = FLOP / median seconds / 1e12, FLOP as the FlashAttention-2 paper counts them "
             "(4*batch*heads*seq_len^2*head_dim forward, halved when causal, 2.5x backward)"
             if kernel == "attention" else "seconds per call, unchanged")
    return {
        "kernel": kernel, **extra, "source_repo": "local", "source_path": "-", "source_commit": "-",
        "gpu": device_name, "preset": preset, "dtype": dtype,
        "library": f"PyTorch {torch_version} {library}{' (cuBLAS)' if cuda and kernel == 'gemm' else ''}",
        "measured": (f"{kernel} on {device_name} by archplace profile (grid {the_grid.name}); median of "
                     f"{the_grid.repeats} timed calls after {the_grid.warmup} warm-up calls; {timer}"),
        "units": units, "made_by": made_by, "timing": "kernel",
        "device": device_name, "torch": torch_version, "cuda": cuda_version, "date": date,
        "grid": the_grid.name, "warmup": str(the_grid.warmup), "repeats": str(the_grid.repeats),
    }


def profile(out_dir: str | os.PathLike[str], *, grid: str = "quick", device: str = "cuda",
            dtype: str = "bf16", max_seconds: float | None = None, kernels: Sequence[str] = KERNELS,
            tag: str = "profiled", preset: str = "-", progress: Progress | None = None,
            clock: Callable[[], float] = time.monotonic, attention: str = "flash2",
            sustained_s: float = 0.0) -> ProfileResult:
    """Time the kernels of a grid on one device and write one table per kernel class into
    ``out_dir`` (``KERNEL_TAG.csv``, readable with
    :func:`archplace.cost.measured_tables.read_table`), and a hardware-YAML snippet naming them.

    Args:
        out_dir: the directory of the tables (made when the first table is written).
        grid: ``full``, ``quick`` or ``smoke`` (:func:`archplace.profiling.grid.grid`).
        device: ``cuda``, ``cuda:N`` or ``cpu``.
        dtype: ``bf16``, ``fp16``, ``fp32`` or ``fp8`` (GEMMs only; the other kernels then in bf16).
        max_seconds: budget: no grid point starts once it is spent (the one under way finishes);
            the points measured so far are written.  None: no budget.
        kernels: the kernel classes to time (:data:`~archplace.profiling.grid.KERNELS`).
        tag: the files' suffix; preset: the archplace hardware preset of the device, for the
            tables' ``preset`` header (``-``: none).
        progress: called after each grid point.
        clock: the budget's clock (seconds; tests pass a fake one).
        attention: the attention kernel family (:data:`~archplace.profiling.kernels.ATTENTION_BACKENDS`).
        sustained_s: after the grid, load the GPU with back-to-back GEMMs for this many seconds
            and measure the SM clock it sustains (:mod:`archplace.profiling.sustained`); written
            to ``sustained_TAG.csv`` and the snippet's ``sustained_clock``.  0: not measured.

    Raises:
        ConfigError: a bad option (named as its field), CUDA asked for and absent, or an
            output that cannot be written (:func:`archplace.base.outputs.check_output`), all checked
            before any kernel runs.
    """
    check_options(grid=grid, device=device, dtype=dtype, max_seconds=max_seconds, attention=attention,
                  sustained_s=sustained_s)
    paths = output_paths(out_dir, kernels, tag, sustained=bool(sustained_s))
    chosen = check_kernels(kernels)
    for path in paths.values():
        check_output(path, "out_dir")
    made_by = command_line(out_dir, grid=grid, device=device, dtype=dtype, max_seconds=max_seconds,
                           kernels=chosen, tag=tag, preset=preset, attention=attention,
                           sustained_s=sustained_s)
    import torch

    start = clock()
    torch_device, name = _device(torch, device, dtype)
    cuda = torch_device.type == "cuda"
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    the_grid = make_grid(grid, K.ELEMENT_BYTES[K.kernel_dtype("softmax", dtype)])
    flush = l2_flush_buffer(torch, torch_device)
    planned = sum(the_grid.points(kernel) for kernel in chosen)
    done = measured = 0
    skipped: list[str] = []
    tables: list[ProfiledTable] = []
    stopped = False
    for kernel in chosen:
        rows: list[Row] = []
        best = (0.0, "")
        fastest = float("inf")
        clocks_mhz: list[float] = []
        kind = K.kernel_dtype(kernel, dtype)
        backend = (K.attention_backend(torch, attention) if kernel == "attention"
                   else contextlib.nullcontext())
        with backend:  # one SDPA backend for every attention row
            for point in the_grid.shapes(kernel):
                if max_seconds is not None and clock() - start >= max_seconds:
                    stopped = True
                    break
                call: K.Call | None = None
                try:
                    call = _call(torch, torch_device, kernel, point, kind)
                    latency = time_call(torch, torch_device, call, warmup=the_grid.warmup,
                                        repeats=the_grid.repeats, flush=flush)
                except (RuntimeError, NotImplementedError) as exc:  # torch.OutOfMemoryError is one
                    skipped.append(f"{kernel} {point}: {' '.join(str(exc).split())[:200]}")
                else:
                    rows.append(row_of(kernel, point, kind, latency))
                    best = max(best, rate(kernel, point, kind, latency))
                    fastest = min(fastest, latency)
                    measured += 1
                    if cuda and not math.isnan(hz := sm_clock_hz(torch, torch_device)):
                        clocks_mhz.append(hz / 1e6)  # none read (no NVML): no clock header
                finally:
                    del call  # the operands go before the next point's are made
                    if cuda:
                        torch.cuda.empty_cache()
                done += 1
                if progress is not None:
                    progress(kernel, done, planned)
        if rows:
            head = header(kernel, device_name=name, preset=preset, dtype=kind,
                          torch_version=torch.__version__, cuda_version=torch.version.cuda or "-",
                          date=date, made_by=made_by, the_grid=the_grid, cuda=cuda, attention=attention,
                          clocks_mhz=clocks_mhz)
            write_text_output(paths[kernel], "out_dir", table_text(kernel, head, rows))
            tables.append(ProfiledTable(kernel, os.fspath(paths[kernel]), len(rows), *best, fastest))
        if stopped:
            break
    sustained: SustainedClock | None = None
    if sustained_s:
        read_hz, read_w = nvml_readers(torch, torch_device)
        sustained = measure_sustained_clock(torch, torch_device, sustained_s, read_clock_hz=read_hz,
                                            read_power_w=read_w, dtype=K.kernel_dtype("gemm", dtype))
        sustained = _against_gemm_table(sustained, tables)
        base = {"source_repo": "local", "gpu": name, "preset": preset, "torch": torch.__version__,
                "cuda": torch.version.cuda or "-", "date": date, "made_by": made_by}
        write_text_output(paths["sustained"], "out_dir", trace_text(sustained, base))
    snippet = None
    if tables or sustained is not None:
        write_text_output(paths["snippet"], "out_dir",
                          snippet_text(tables, name, date, made_by, sustained=sustained,
                                       trace=paths.get("sustained")))
        snippet = os.fspath(paths["snippet"])
    return ProfileResult(name, dtype, grid, tuple(tables), snippet, planned, measured, tuple(skipped),
                         stopped, clock() - start, made_by,
                         sustained.effective_hz if sustained else None,
                         sustained.summary() if sustained else None,
                         os.fspath(paths["sustained"]) if sustained else None)


def _against_gemm_table(sustained: SustainedClock, tables: Sequence[ProfiledTable]) -> SustainedClock:
    """``sustained`` with this run's GEMM table as its reference (:mod:`archplace.profiling.sustained`),
    when the run measured one with a ``clock`` header: the table's clock and its latency of the
    load's shape (its own interpolation); unchanged otherwise."""
    from archplace.cost.clock import table_clock_hz
    from archplace.cost.measured_tables import gemm_latency, read_table

    path = next((t.path for t in tables if t.kernel == "gemm"), None)
    if path is None:
        return sustained
    table = read_table(Path(path))
    clock_hz = table_clock_hz(table)
    if clock_hz <= 0.0:
        return sustained
    size = sustained.size
    latency_s = gemm_latency(table, size, size, size)
    return sustained.against(Path(path).name, clock_hz, 2.0 * size**3 / latency_s / 1e12)


def snippet_text(tables: Sequence[ProfiledTable], device_name: str, date: str, made_by: str, *,
                 sustained: SustainedClock | None = None, trace: Path | None = None) -> str:
    """A hardware-YAML fragment to paste into a copy of the device's hardware preset:
    ``efficiency.kernel_tables`` names the tables of :data:`PRESET_KERNELS` (absolute paths),
    ``efficiency.kernel_floor`` is the fastest GEMM measured (the smallest GEMM of the grid:
    a kernel doing almost no work, whose time is the launch-to-completion floor), when GEMMs
    were measured, and ``efficiency.sustained_clock`` the clock measured under load, when it was."""
    import yaml

    source = " ".join(f"measured on {device_name} by archplace profile, {date}: {made_by}".split())
    named = [t for t in tables if t.kernel in PRESET_KERNELS]
    efficiency: dict[str, Any] = {}
    if named:
        efficiency["kernel_tables"] = {"value": [os.fspath(Path(t.path).resolve()) for t in named],
                                       "source": source}
    gemm = next((t for t in tables if t.kernel == "gemm"), None)
    if gemm is not None:
        efficiency["kernel_floor"] = {
            "value": f"{gemm.fastest_s * 1e6:.4g} us",
            "source": f"the fastest GEMM of {Path(gemm.path).name} (the grid's smallest shapes), {source}"}
    if sustained is not None:
        efficiency["sustained_clock"] = {
            "value": f"{sustained.effective_hz / 1e9:.4g} GHz",
            "source": f"{sustained.summary()} ({Path(trace).name if trace else 'trace'}), {source}"}
    others = ", ".join(Path(t.path).name for t in tables if t.kernel not in PRESET_KERNELS)
    note = f"# Not named here (a preset does not read them): {others}.\n" if others else ""
    body = yaml.safe_dump({"efficiency": efficiency}, sort_keys=False, width=1 << 20, allow_unicode=True)
    return ("# Kernel tables measured by archplace profile: paste the entries under efficiency into\n"
            "# a copy of this device's hardware preset (archplace hardware lists them).\n"
            + note + (body if efficiency else ""))
