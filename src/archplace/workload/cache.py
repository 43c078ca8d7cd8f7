"""On-disk cache of extracted layer chains.

Tracing a model takes about a second per (micro-batch, TP width); a search
needs the same graphs again and again, across runs too.  Chains are pickled
under a key that covers everything that changes them: the model config, the
extraction options (sequence length, micro-batch, dtype, TP width, SP, fusion,
attention implementation, kernel fusion, train mode), and the torch, transformers and archplace versions.

The directory is ``$ARCHPLACE_CACHE_DIR`` if set, else
``$XDG_CACHE_HOME/archplace/graphs`` (``~/.cache/archplace/graphs``).  A file
that cannot be read is ignored and rewritten; writes are atomic
(write-then-rename), so concurrent searches never see half a file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path

from archplace.outputs import replace_atomically
from archplace.workload.expert_parallel import check_ep
from archplace.workload.expert_tensor import check_etp
from archplace.workload.extract import ExtractOptions, derive_experts, extract_chain, traced_options
from archplace.workload.layers import LayerChain
from archplace.workload.zoo import ModelSpec

log = logging.getLogger(__name__)


def default_cache_dir() -> Path:
    """``$ARCHPLACE_CACHE_DIR``, else ``$XDG_CACHE_HOME/archplace/graphs``, else ``~/.cache/...``."""
    explicit = os.environ.get("ARCHPLACE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "archplace" / "graphs"


def cache_key(spec: ModelSpec, options: ExtractOptions) -> str:
    """Hex digest identifying the chain of ``spec`` under ``options`` with these library versions."""
    payload = {
        "config": json.loads(spec.config_json), "options": asdict(options),
        "versions": {name: version(name) for name in ("torch", "transformers", "archplace")},
        "format": 6,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class GraphCache:
    """A directory of pickled :class:`LayerChain` objects.

    Attributes:
        directory: where the files live (created on first write).
    """

    directory: Path

    def path(self, spec: ModelSpec, options: ExtractOptions) -> Path:
        """File of the chain of ``spec`` under ``options``."""
        return self.directory / f"{spec.name}-{cache_key(spec, options)[:32]}.pkl"

    def load(self, spec: ModelSpec, options: ExtractOptions) -> LayerChain | None:
        """The cached chain, or None when absent or unreadable."""
        path = self.path(spec, options)
        try:
            with path.open("rb") as handle:
                chain = pickle.load(handle)
        except FileNotFoundError:
            return None
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, TypeError) as exc:
            log.warning("ignoring unreadable graph cache file %s (%s)", path, exc)
            return None
        return chain if isinstance(chain, LayerChain) else None

    def store(self, spec: ModelSpec, options: ExtractOptions, chain: LayerChain) -> None:
        """Write ``chain`` atomically; a cache that cannot be written is only logged."""
        path = self.path(spec, options)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            replace_atomically(path, lambda out: pickle.dump(chain, out, protocol=pickle.HIGHEST_PROTOCOL),
                               binary=True)
        except OSError as exc:
            log.warning("cannot write graph cache file %s (%s)", path, exc)

    def chain(self, spec: ModelSpec, options: ExtractOptions) -> LayerChain:
        """The chain from the cache, extracting and storing it on a miss. An expert-parallel
        chain (``options.ep`` > 1, or a capacity factor or load imbalance above 1) is derived
        from the cached traced one (:func:`archplace.workload.extract.derive_experts`).

        Raises:
            ConfigError, ExtractionError: as :func:`extract_chain`.
        """
        if options.shards_experts:  # derived from the cached traced chain, not stored
            check_ep(spec, options.ep)
            check_etp(spec, options.etp)
            return derive_experts(self.chain(spec, traced_options(options)), options)
        cached = self.load(spec, options)
        if cached is not None:
            return cached
        chain = extract_chain(spec, options)
        self.store(spec, options, chain)
        return chain


def cached_chain(spec: ModelSpec, options: ExtractOptions, cache: GraphCache | None = None) -> LayerChain:
    """:meth:`GraphCache.chain` on ``cache`` (default: :func:`default_cache_dir`)."""
    return (cache or GraphCache(default_cache_dir())).chain(spec, options)
