"""archplace as Python functions: the same questions the CLI answers.

Example::

    from archplace import api
    result = api.search("gpt2-xl", space="tiny", devices=1024, global_batch=4096)
    print(result.best.accelerator.name, result.best.throughput_samples_per_s)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from archplace.cost.estimate import estimate_matmul, estimate_model
from archplace.errors import ConfigError
from archplace.hardware.presets import load_cluster, preset_summaries
from archplace.hardware.space import load_space
from archplace.placement.plan import Recompute
from archplace.search.exhaustive import Progress, SearchRequest, SearchResult, run_search
from archplace.workload.cache import cached_chain
from archplace.workload.extract import ExtractOptions
from archplace.workload.summary import chain_summary
from archplace.workload.zoo import load_model, model_preset_summaries

__all__ = ["estimate_matmul", "estimate_model", "graph", "hardware", "models", "search",
           "search_request"]


def models() -> list[dict[str, Any]]:
    """Bundled model presets (name, model_type, layers, hidden, seq_len, source)."""
    return model_preset_summaries()


def hardware() -> list[dict[str, Any]]:
    """Bundled hardware presets (name, peak, HBM, area, source)."""
    return preset_summaries()


def graph(model: str, *, seq_len: int | None = None, micro_batch: int = 1, tp: int = 1,
          sp: bool = False, fuse: bool = False) -> dict[str, Any]:
    """Per-layer totals of ``model``'s operator graphs (per device for ``tp`` > 1).

    Returns:
        ``{"model", "micro_batch", "seq_len", "tp", "sp", "layers": [{"name", "kind", "params",
        "fwd_flop", "bwd_flop", "activation_bytes", "boundary_bytes", "collectives",
        "operators"}], "total": {"params", "fwd_flop", "bwd_flop"}}``; bytes per micro-batch.

    Raises:
        ConfigError: unknown model, bad sizes, a TP width that does not divide the heads,
            KV heads or FFN size.
        ExtractionError: the model code cannot be traced.
    """
    spec = load_model(model)
    if seq_len is not None:
        spec = spec.with_seq_len(seq_len)
    options = ExtractOptions(micro_batch=micro_batch, seq_len=spec.seq_len, tp=tp, sp=sp, fuse=fuse)
    return chain_summary(cached_chain(spec, options), sp=sp)


def parse_recompute(choices: Iterable[str]) -> tuple[Recompute, ...]:
    """``["none", "full"]`` -> Recompute members; ``"both"`` means none and full.

    Raises:
        ConfigError: an unknown choice.
    """
    out: list[Recompute] = []
    for choice in choices:
        if choice == "both":
            out.extend((Recompute.NONE, Recompute.FULL))
            continue
        try:
            out.append(Recompute(choice))
        except ValueError:
            raise ConfigError(
                f"unknown recompute {choice!r}; choose from: none, full, both") from None
    return tuple(dict.fromkeys(out))


def search_request(
    model: str,
    *,
    space: str = "tiny",
    devices: int,
    global_batch: int,
    seq_len: int | None = None,
    micro_batches: Iterable[int] = (1, 2, 4, 8),
    recompute: Iterable[str] = ("both",),
    cluster: str | None = None,
) -> SearchRequest:
    """Load and check everything a search needs, without running it.

    Args:
        model: a model preset name or the path of an HF ``config.json``.
        space: a bundled space name (``tiny``, ``phaze``) or the path of a space YAML file.
        devices: accelerators in the cluster.
        global_batch: samples per iteration.
        seq_len: tokens per sample (default: the model's context length).
        micro_batches: micro-batch sizes to try.
        recompute: ``none``, ``full`` or ``both``.
        cluster: hardware preset (or YAML) whose links the cluster uses (default: the space's base).

    Raises:
        ConfigError: unknown model / space / preset, bad file, non-positive sizes.
    """
    if devices <= 0:
        raise ConfigError(f"--devices must be positive, got {devices}")
    if global_batch <= 0:
        raise ConfigError(f"--global-batch must be positive, got {global_batch}")
    spec = load_model(model)
    if seq_len is not None:
        if seq_len <= 0:
            raise ConfigError(f"--seq-len must be positive, got {seq_len}")
        spec = spec.with_seq_len(seq_len)
    search_space = load_space(space)
    links = load_cluster(cluster or search_space.base, devices)
    return SearchRequest(spec, search_space.designs(), links, global_batch,
                         tuple(micro_batches), parse_recompute(recompute))


def search(model: str, *, progress: Progress | None = None, **options: Any) -> SearchResult:
    """Search a space of accelerators for the one that trains ``model`` fastest.

    Takes the arguments of :func:`search_request` (``space``, ``devices``,
    ``global_batch``, ``seq_len``, ``micro_batches``, ``recompute``, ``cluster``)
    and ``progress``, called with each design's result as it finishes.

    Returns:
        Every evaluated design, best first (``result.best`` is None when nothing fits).

    Raises:
        ConfigError: bad input (see :func:`search_request`).
        ExtractionError: the model code cannot be traced.
    """
    return run_search(search_request(model, **options), progress)
