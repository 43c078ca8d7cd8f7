"""``archplace estimate``: per-layer estimates of a model, and of one matmul.

::

    archplace estimate --model M --hardware H [--tp T] [--micro-batch B] [--seq-len S] [--ops] [--json]
    archplace estimate matmul --m M --k K --n N --array RxC [--dataflow ws|os] [--batch B]
                              [--array-timing overlapped|scalesim] [--cores P] [--clock F]
                              [--buffer SIZE] [--hbm-bandwidth BW] [--json]
    archplace estimate matmul --m M --k K --n N --hardware H [--batch B] [--json]
    ... [--kernel-table FILE|NAME]   (also: the latency from a kernel table, beside the model's)

The figures and formulas are those of :mod:`archplace.cost.estimate`.
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any

import typer
from rich.console import Console

from archplace.base.errors import ConfigError
from archplace.base.limits import MAX_ARRAY_DIM
from archplace.base.units import parse_bandwidth, parse_bytes, parse_frequency
from archplace.cli.derived import given_fields, with_options
from archplace.cli.options import table_console
from archplace.cost.estimate import EFFICIENCY_NOTES
from archplace.front.api import estimate_matmul, estimate_model, estimate_preset_matmul
from archplace.front.specs import ModelSpec
from archplace.hw._config import check_plausible
from archplace.profiling.tables import TableGemm, table_gemm
from archplace.reporting.estimate_tables import figures_table, model_table, ops_table
from archplace.schemas import stamp

estimate_app = typer.Typer(
    invoke_without_command=True, add_completion=False, pretty_exceptions_enable=False,
    help="Per-layer time, bound and energy of a model on a hardware preset (or of one matmul).",
)

_ARRAY = re.compile(r"^\s*(\d{1,18})\s*[xX×]\s*(\d{1,18})\s*$")


def _console() -> Console:
    return table_console(160)


_NOT_READ = ("fuse", "recompute_modules", "expert_weighting", "swiglu_fp8_input")
"""The model spec's fields ``estimate`` does not take (it costs the operators as traced; what
selective recomputation reruns does not change them, and it traces the experts in Hugging
Face's order, :class:`~archplace.workload.options.ExpertWeighting`). The SwiGLU inputs' FP8
storage changes memory, not time."""


@estimate_app.callback()
@with_options(ModelSpec, exclude=_NOT_READ)
def estimate(
    ctx: typer.Context,
    hardware: Annotated[str | None, typer.Option(help="Hardware preset or YAML file.")] = None,
    tp: Annotated[int, typer.Option(help="Tensor-parallel width.")] = 1,
    micro_batch: Annotated[int, typer.Option("--micro-batch", help="Samples per micro-batch.")] = 1,
    ops: Annotated[bool, typer.Option("--ops", help="Also list every operator.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    **options: Any,
) -> None:
    """Per-layer forward/backward time on one core and on all cores, bound, energy, achieved
    TFLOP/s and fraction of peak (per operator with --ops)."""
    if ctx.invoked_subcommand is not None:
        return
    if options["model"] is None or hardware is None:
        raise ConfigError("estimate needs --model and --hardware (or: archplace estimate matmul ...)")
    result = estimate_model(hardware=hardware, tp=tp, micro_batch=micro_batch,
                            **given_fields(ModelSpec, options, exclude=_NOT_READ))
    if as_json:
        typer.echo(json.dumps(stamp("estimate", result.to_dict()), indent=2))
    else:
        if ops:
            _console().print(ops_table(result))
        _console().print(model_table(result))


def _array(text: str) -> tuple[int, int]:
    match = _ARRAY.match(text)
    if not match:
        raise ConfigError(f"--array: expected ROWSxCOLS such as 128x128, got {text!r}")
    rows, cols = int(match.group(1)), int(match.group(2))
    if rows <= 0 or cols <= 0:
        raise ConfigError(f"--array: rows and cols must be positive, got {text!r}")
    if max(rows, cols) > MAX_ARRAY_DIM:
        raise ConfigError(f"--array: rows and cols must be at most {MAX_ARRAY_DIM:,}, got {text!r}")
    return rows, cols


@estimate_app.command("matmul")
def matmul(
    m: Annotated[int, typer.Option("--m", help="Rows of the input (tokens).")],
    k: Annotated[int, typer.Option("--k", help="Reduction dimension.")],
    n: Annotated[int, typer.Option("--n", help="Columns of the output.")],
    array: Annotated[str | None, typer.Option(help="Array shape ROWSxCOLS, e.g. 128x128.")] = None,
    hardware: Annotated[str | None, typer.Option(
        help="Hardware preset or YAML file instead of --array (its declared efficiency, if any).")] = None,
    dataflow: Annotated[str, typer.Option(help="ws (weight stationary) or os (output stationary).")] = "ws",
    batch: Annotated[int, typer.Option(help="Independent GEMMs (bmm batch).")] = 1,
    array_timing: Annotated[str, typer.Option(
        "--array-timing", help="overlapped (double-buffered weights) or scalesim (SCALE-Sim's count).")
    ] = "overlapped",
    cores: Annotated[int, typer.Option(help="Arrays working together.")] = 1,
    clock: Annotated[str, typer.Option(help="Array clock, e.g. '1.05 GHz'.")] = "1 GHz",
    buffer: Annotated[str | None, typer.Option(help="Global buffer, e.g. '128 MiB' [unbounded].")] = None,
    hbm_bandwidth: Annotated[str | None, typer.Option(
        "--hbm-bandwidth", help="HBM bandwidth, e.g. '1.2 TB/s' [unbounded].")] = None,
    bytes_per_element: Annotated[int, typer.Option("--bytes-per-element", help="Operand width.")] = 2,
    kernel_table: Annotated[str | None, typer.Option(
        "--kernel-table", help="Also the latency from a kernel table: a file (archplace profile's "
                               "gemm table) or a shipped table's name, e.g. gemm_h100_xla.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
) -> None:
    """Compute cycles, HBM bytes and latency of one matmul on systolic arrays (or, with
    --hardware, its latency and achieved TFLOP/s on a preset; with --kernel-table, beside the
    latency a kernel table gives)."""
    looked_up = None if kernel_table is None else table_gemm(kernel_table, m, k, n, batch=batch)
    if hardware is not None:
        if array is not None:
            raise ConfigError("estimate matmul: give --array or --hardware, not both")
        on_preset = estimate_preset_matmul(hardware, m, k, n, batch=batch).to_dict()
        if as_json:
            typer.echo(json.dumps(stamp("estimate-matmul", _with_table(on_preset, looked_up))))
            return
        _print_figures(f"[{batch}x] {m}x{k} @ {k}x{n} on {hardware}", on_preset,
                       EFFICIENCY_NOTES[on_preset["efficiency_model"]])
        _print_table(looked_up, on_preset)
        return
    if array is None:
        raise ConfigError("estimate matmul needs --array ROWSxCOLS or --hardware PRESET")
    rows, cols = _array(array)
    clock_hz = parse_frequency(clock, "--clock")
    buffer_bytes = math.inf if buffer is None else parse_bytes(buffer, "--buffer")
    bandwidth = math.inf if hbm_bandwidth is None else parse_bandwidth(hbm_bandwidth, "--hbm-bandwidth")
    result = estimate_matmul(  # checks that each figure is a size at all, then its plausibility below
        m, k, n, rows, cols, batch=batch, cores=cores, dataflow=dataflow.lower(),
        array_timing=array_timing.lower(), clock_hz=clock_hz, buffer_bytes=buffer_bytes,
        hbm_bandwidth_bytes_per_s=bandwidth, bytes_per_element=bytes_per_element,
    )
    for field, value, option in (("array_rows", rows, "--array rows"), ("array_cols", cols, "--array cols"),
                                 ("tensor_cores", cores, "--cores"), ("clock", clock_hz, "--clock"),
                                 ("buffer", buffer_bytes, "--buffer"),
                                 ("hbm_bandwidth", bandwidth, "--hbm-bandwidth")):
        if math.isfinite(value):  # infinite: unbounded, the option not given
            check_plausible(field, value, option)
    data = result.to_dict()
    if as_json:
        typer.echo(json.dumps(stamp("estimate-matmul", _with_table(data, looked_up))))
        return
    _print_figures(f"[{batch}x] {m}x{k} @ {k}x{n} on {cores} x {rows}x{cols} ({dataflow.lower()})", data)
    _print_table(looked_up, data)


def _with_table(data: dict[str, object], looked_up: TableGemm | None) -> dict[str, object]:
    return data if looked_up is None else {**data, "kernel_table": looked_up.to_dict()}


def _print_table(looked_up: TableGemm | None, model: dict[str, object]) -> None:
    """The kernel table's figures, and the model's latency over the table's."""
    if looked_up is None:
        return
    figures: dict[str, object] = {**looked_up.to_dict()}
    model_latency = model["latency_s"]
    if isinstance(model_latency, float):
        figures["model_over_table"] = model_latency / looked_up.latency_s
    caption = ("a row of the table" if looked_up.at_table_point
               else "not a row of the table: the table's interpolation")
    _print_figures(f"from kernel table {looked_up.table} ({looked_up.gpu})", figures, caption)


def _print_figures(title: str, data: dict[str, object], caption: str | None = None) -> None:
    _console().print(figures_table(title, data, caption))


def register(app: typer.Typer) -> None:
    """Add the ``estimate`` command group to ``app``."""
    app.add_typer(estimate_app, name="estimate")
