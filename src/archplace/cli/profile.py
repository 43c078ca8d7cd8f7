"""``archplace profile``: time kernels on this machine's GPU and write kernel tables.

::

    archplace profile --out-dir DIR [--quick | --grid full|quick|smoke] [--device cuda|cuda:N|cpu]
                      [--dtype bf16|fp16|fp32|fp8] [--max-seconds S] [--kernel K ...] [--tag T]
                      [--preset P] [--attention flash2|cudnn] [--sustained S]

The work is :func:`archplace.profiling.profile`; torch is imported only when the command runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from archplace.base.errors import ConfigError
from archplace.base.outputs import check_output
from archplace.cli.options import plain_console, say_wrote, table_console
from archplace.profiling.grid import KERNELS
from archplace.profiling.run import ProfileResult, check_kernels, check_options, output_paths, profile
from archplace.reporting.plain import PlainTable


def profile_command(
    out_dir: Annotated[Path, typer.Option(
        "-o", "--out-dir", help="Directory of the tables: KERNEL_TAG.csv per kernel class and "
                                "kernel_tables.yaml (a hardware-YAML snippet naming them).")],
    quick: Annotated[bool, typer.Option(
        "--quick", help="The quick grid (64 GEMMs, 12 attention calls, 8 sizes of each other "
                        "kernel): --grid quick.")] = False,
    grid: Annotated[str, typer.Option(
        metavar="full|quick|smoke", help="Grid of shapes: full, quick, or smoke (seconds; the "
                                         "plumbing only).")] = "full",
    device: Annotated[str, typer.Option(metavar="cuda|cuda:N|cpu", help="Device to time on.")] = "cuda",
    dtype: Annotated[str, typer.Option(
        metavar="bf16|fp16|fp32|fp8", help="Operand dtype (fp8: GEMMs via torch._scaled_mm, the "
                                           "other kernels in bf16; attention is always 16-bit).")] = "bf16",
    max_seconds: Annotated[float | None, typer.Option(
        "--max-seconds", help="Budget: no shape starts after it; the rows measured so far are "
                              "written [none].")] = None,
    kernel: Annotated[list[str] | None, typer.Option(
        "--kernel", help=f"Kernel class to time (repeatable): {', '.join(KERNELS)} [all].")] = None,
    tag: Annotated[str, typer.Option(help="Suffix of the files' names.")] = "profiled",
    preset: Annotated[str, typer.Option(
        help="The archplace hardware preset of this GPU, for the tables' header [-: none].")] = "-",
    attention: Annotated[str, typer.Option(
        metavar="flash2|cudnn", help="Attention kernel family: flash2 (PyTorch's FlashAttention-2) or "
                                     "cudnn (cuDNN fused attention; CUDA only).")] = "flash2",
    sustained: Annotated[float, typer.Option(
        "--sustained", metavar="S", help="After the grid, load the GPU with back-to-back GEMMs for "
                                         "S seconds and measure the SM clock it sustains [0: no].")] = 0.0,
) -> None:
    """Time GEMMs, attention, softmax, layer norm, GeLU and an HBM copy on this machine's GPU
    and write kernel tables in the format of the shipped ones (needs torch; a CUDA build for a GPU)."""
    if quick:
        if grid not in ("full", "quick"):
            raise ConfigError(f"--quick and --grid {grid} ask for two grids: give one")
        grid = "quick"
    kernels = check_kernels(kernel or KERNELS)
    check_options(grid=grid, device=device, dtype=dtype, max_seconds=max_seconds, attention=attention,
                  sustained_s=sustained)
    for path in output_paths(out_dir, kernels, tag, sustained=bool(sustained)).values():
        check_output(path, "--out-dir")  # before torch is imported and any kernel runs
    with _progress() as advance:
        result = profile(out_dir, grid=grid, device=device, dtype=dtype, max_seconds=max_seconds,
                         kernels=kernels, tag=tag, preset=preset, progress=advance, attention=attention,
                         sustained_s=sustained)
    table_console(120).print(summary_table(result))
    for table in result.tables:
        say_wrote(Path(table.path))
    if result.sustained_trace is not None:
        say_wrote(Path(result.sustained_trace))
    if result.snippet is not None:
        say_wrote(Path(result.snippet))
    if not result.tables:
        raise ConfigError(f"nothing was measured: {_why(result)}")


def _why(result: ProfileResult) -> str:
    if result.stopped_early:
        return "the --max-seconds budget ended before the first shape"
    return f"every shape failed ({result.skipped[0] if result.skipped else 'no shapes'})"


def _rate(value: float, unit: str) -> str:
    if unit == "FLOP/s":
        return f"{value / 1e12:,.3g} TFLOP/s"
    return f"{value / 1e9:,.3g} GB/s"


def summary_table(result: ProfileResult) -> PlainTable:
    """One line per table written: kernel class, rows, best rate, file; a caption with the
    device, the points measured of those planned, skipped points and a budget stop."""
    table = PlainTable("kernel", "rows", "best", "file",
                       title=f"archplace profile: {result.device}, {result.dtype}, grid {result.grid}")
    for written in result.tables:
        table.add_row(written.kernel, str(written.rows), _rate(written.best_rate, written.rate_unit),
                      written.path)
    notes = [f"{result.measured} of {result.planned} shapes timed in {result.elapsed_s:,.1f} s"]
    if result.stopped_early:
        notes.append("stopped by the --max-seconds budget")
    if result.skipped:
        notes.append(f"{len(result.skipped)} skipped, first: {result.skipped[0]}")
    if result.sustained_summary is not None:
        notes.append(result.sustained_summary)
    table.caption = "; ".join(notes)
    return table


@contextmanager
def _progress() -> Iterator[Callable[[str, int, int], None]]:
    """A progress bar on stderr (shapes timed of the grid), shown only on a terminal."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    console = plain_console(stderr=True)
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("shapes", total=None)

        def advance(kernel: str, done: int, total: int) -> None:
            bar.update(task, description=kernel, completed=done, total=total)

        yield advance


def register(app: typer.Typer) -> None:
    """Add the ``profile`` command to ``app``."""
    app.command(name="profile")(profile_command)
