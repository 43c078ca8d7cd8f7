"""``archplace schedule``: schedule one layer's operators on the cores of a chip.

::

    archplace schedule --problem FILE.json [options]
    archplace schedule --model M --hardware H [--layer block] [--phase fwd|bwd] [--tp T]
                       [--micro-batch B] [--seq-len S] [options]
    options: [--backend list|cpsat|highs|gurobi] [--time-limit S] [--seed N] [--workers N]
             [--dump-problem FILE.json] [--json] [--gantt FILE.png]

The problem format and the backends are described in docs/commands/schedule.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from archplace.base.errors import ConfigError
from archplace.base.outputs import check_image_output, check_outputs, prepare_output, write_text_output
from archplace.cli.derived import given_fields, with_options
from archplace.cli.options import table_console
from archplace.front import api
from archplace.front.specs import ModelSpec
from archplace.reporting.schedule_tables import schedule_table
from archplace.schemas import stamp

_NOT_READ = ("fuse", "recompute_modules", "expert_weighting", "swiglu_fp8_input")
"""The model spec's fields ``schedule`` does not take (it schedules the operators as traced; what
selective recomputation reruns does not change them, and it traces the experts in Hugging
Face's order, :class:`~archplace.workload.options.ExpertWeighting`). The SwiGLU inputs' FP8
storage changes memory, not time."""


@with_options(ModelSpec, exclude=_NOT_READ)
def schedule(
    problem_file: Annotated[Path | None, typer.Option(
        "--problem", help="Schedule the problem in this JSON file.")] = None,
    hardware: Annotated[str, typer.Option(help="Hardware preset or YAML file.")] = "tpuv4",
    layer: Annotated[str, typer.Option(help="embedding | block | head.")] = "block",
    phase: Annotated[str, typer.Option(help="fwd | bwd.")] = "fwd",
    tp: Annotated[int, typer.Option(help="Tensor-parallel width.")] = 1,
    micro_batch: Annotated[int, typer.Option("--micro-batch", help="Samples per micro-batch.")] = 1,
    backend: Annotated[str, typer.Option(help="list | cpsat | highs | gurobi.")] = "cpsat",
    time_limit: Annotated[float, typer.Option("--time-limit", help="Solver time limit, s.")] = 10.0,
    seed: Annotated[int, typer.Option(help="Solver random seed.")] = 0,
    workers: Annotated[int, typer.Option(help="Solver threads; 0 = automatic.")] = 0,
    dump_problem: Annotated[Path | None, typer.Option(
        "--dump-problem", help="Write the problem being solved here (the --problem format).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the schedule as JSON.")] = False,
    gantt: Annotated[Path | None, typer.Option(
        help="Draw the schedule per core into this image (the suffix picks the format: .png, .svg, "
             ".pdf, ...; PNG without a suffix).")] = None,
    **options: Any,
) -> None:
    """Schedule one layer's operators on the tensor and vector cores (minimum makespan)."""
    api.check_scheduler(backend)  # an unknown backend is refused before any work
    solve = api.SolveOptions(time_limit_s=time_limit, seed=seed, workers=workers)
    model = options["model"]
    if (problem_file is None) == (model is None):
        raise ConfigError("schedule needs either --problem FILE.json or --model (not both)")
    check_outputs({"--dump-problem": dump_problem, "--gantt": gantt})  # both, before any is written
    image_format = (check_image_output(gantt, "--gantt", default_format="png") if gantt is not None
                    else None)
    if problem_file is not None:
        problem = api.read_schedule_problem(problem_file)
        source = str(problem_file)
    else:
        model_fields = given_fields(ModelSpec, options, exclude=_NOT_READ)
        problem = api.layer_problem(hardware=hardware, layer=layer, phase=phase, tp=tp,
                                    micro_batch=micro_batch, **model_fields)
        source = f"{model} {layer} {phase} (tp={tp}) on {hardware}"
    if dump_problem is not None:
        write_text_output(dump_problem, "--dump-problem",
                          json.dumps(stamp("schedule-problem", problem.to_dict()), indent=1) + "\n")
    result = api.solve_problem(problem, backend, solve)
    if gantt is not None and image_format is not None:
        from archplace.reporting.gantt import draw_gantt

        prepare_output(gantt, "--gantt")
        try:
            draw_gantt(problem, result.schedule, gantt, title=f"{source}: makespan "
                       f"{result.makespan_s * 1e3:.3f} ms ({result.backend})", image_format=image_format)
        except OSError as exc:
            raise ConfigError(f"--gantt {gantt}: cannot write ({exc.strerror or exc})") from None
    if as_json:
        typer.echo(json.dumps(stamp("schedule", result.to_dict()), indent=1))
    else:
        table_console(160).print(schedule_table(problem, result, source))


def register(app: typer.Typer) -> None:
    """Add the ``schedule`` command to ``app``."""
    app.command(name="schedule")(schedule)
