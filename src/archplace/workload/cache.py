"""On-disk cache of extracted layer chains.

Tracing a model takes about a second per (micro-batch, TP width); a search
needs the same graphs again and again, across runs too.  Chains are stored under a key that
covers everything that changes them: the model's name and config, the extraction options
(sequence length, micro-batch, dtype, TP width, SP, fusion, attention implementation, kernel
fusion, train mode), and the torch, transformers and archplace versions.

The directory is ``$ARCHPLACE_CACHE_DIR`` if set, else
``$XDG_CACHE_HOME/archplace/graphs`` (``~/.cache/archplace/graphs``), created private (mode
0700).  Whoever else can write there (a shared cache directory, a shared home, a restored CI
cache) must not be able to run code as the user, change results, or stall a run, so:

* a file holds data, never code: the code-free format of :mod:`archplace.workload.chain_codec`
  (JSON behind a header naming the full key and the sha256 checksum of the body), decoded
  strictly; no pickle is read (the ``*.pkl`` files of earlier versions are never opened);
* a file is named by the key alone (``<key>.chain``, 64 hex digits): no model name or other
  input becomes part of a path;
* a file is read only if it is a regular file (opened without following a symbolic link and
  without blocking, so a FIFO never stalls a run) owned by the user and writable by no one else,
  of at most :data:`MAX_FILE_BYTES`;
* a file refused by any of these checks, or that is malformed, for another key or fails its
  checksum, is logged and ignored; the chain is traced again and the file replaced.

Files are written private (mode 0600) to a fresh temporary file beside the final one, renamed
over it once complete, so concurrent searches never see half a file and nothing is ever written
through an existing path.

:func:`cached_chains` gets the chains of many (model, options) pairs at once: of each setting
(everything but the micro-batch) it traces micro-batches 2 and 3 and derives the larger ones
(:mod:`archplace.workload.rebatch`, exact or not used) when that saves traces, and it runs the
traces in parallel on an executor (a search's worker pool, or a local pool of ``jobs``
processes).  The chains are the same whichever way they were obtained.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import stat
import tempfile
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from archplace.base.executor import default_jobs, make_executor
from archplace.workload.chain_codec import ChainCodecError, pack, unpack
from archplace.workload.expert_parallel import check_ep
from archplace.workload.expert_tensor import check_etp
from archplace.workload.extract import ExtractOptions, derive_experts, extract_chain, traced_options
from archplace.workload.layers import LayerChain
from archplace.workload.rebatch import REFERENCE_BATCHES, rebatch_chain
from archplace.workload.zoo import LoadedModel

log = logging.getLogger(__name__)

FORMAT = 15
"""Version of the cache files, part of the key (15: ReLU and squared ReLU unfused under fused
kernels, as Megatron-Core runs them; 14: the loss's passes charged per framework,
archplace.workload.loss_traffic, an operator's footprint; 13: the SwiGLU inputs FP8 option, the loss's
backward one kernel beside a fused final norm; 12: the loss as frameworks run it; 11: layers
carry the FP8 saving of what selective recomputation keeps; 10: a chain holds its cost key, SP
included;
9: layers carry the activation bytes FP8 saves;
8: layers carry the FLOP of MoE padding; 7: the
code-free chain files; 6 and before were pickles)."""

MAX_FILE_BYTES = 64 * 2**20
"""Largest cache file read, bytes; a larger one is refused unread (a llama2-7b chain's file takes
about 5 KB)."""

SUFFIX = ".chain"
"""Ending of the cache files' names."""


def default_cache_dir() -> Path:
    """``$ARCHPLACE_CACHE_DIR``, else ``$XDG_CACHE_HOME/archplace/graphs``, else ``~/.cache/...``."""
    explicit = os.environ.get("ARCHPLACE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "archplace" / "graphs"


def cache_key(spec: LoadedModel, options: ExtractOptions) -> str:
    """Hex digest (64 digits, sha256) identifying the chain of ``spec`` under ``options`` with
    these library versions; the model's name is part of it (it is the chain's ``model``)."""
    payload = {
        "model": spec.name, "config": json.loads(spec.config_json), "options": options.identity(),
        "versions": {name: version(name) for name in ("torch", "transformers", "archplace")},
        "format": FORMAT,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


class UnsafeCacheFileError(Exception):
    """A cache file the cache will not read: not a regular file, not the user's own, writable by
    others, or too large."""


def read_private_file(path: Path, limit: int) -> bytes | None:
    """The bytes of ``path`` if it is a regular file owned by this user, writable by no one else,
    of at most ``limit`` bytes; None when there is no such path.

    The file is opened without following a symbolic link and without blocking (a FIFO or a device
    is refused, never waited on); the checks are made on the opened descriptor, so the file read
    is the file checked.

    Raises:
        UnsafeCacheFileError: the path is a symbolic link, not a regular file, owned by another user,
            group- or world-writable, or larger than ``limit`` bytes.
        OSError: the file cannot be opened or read for another reason.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    _check_private(info, limit)  # refuse a FIFO or a device before opening it at all
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):
            raise UnsafeCacheFileError("a symbolic link or a special file") from None
        raise
    try:
        _check_private(os.fstat(fd), limit)
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, min(1 << 20, limit + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise UnsafeCacheFileError(f"larger than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _check_private(info: os.stat_result, limit: int) -> None:
    """Refuse what :func:`read_private_file` refuses, from the file's status.

    Raises:
        UnsafeCacheFileError: as :func:`read_private_file`.
    """
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeCacheFileError("not a regular file")
    if info.st_uid != os.getuid():
        raise UnsafeCacheFileError(f"owned by user {info.st_uid}, not by this user ({os.getuid()})")
    if info.st_mode & 0o022:
        raise UnsafeCacheFileError(f"writable by others (mode {stat.S_IMODE(info.st_mode):o})")
    if info.st_size > limit:
        raise UnsafeCacheFileError(f"{info.st_size} bytes, more than {limit}")


@dataclass(frozen=True)
class GraphCache:
    """A directory of :class:`LayerChain` files (:mod:`archplace.workload.chain_codec`).

    Attributes:
        directory: where the files live (created, mode 0700, on first write).
    """

    directory: Path

    def path(self, spec: LoadedModel, options: ExtractOptions) -> Path:
        """File of the chain of ``spec`` under ``options``: ``<directory>/<key>.chain``, named by
        :func:`cache_key` alone (never by the model's name), always inside ``directory``."""
        return self._path_of(cache_key(spec, options))

    def _path_of(self, key: str) -> Path:
        """File of the chain of the cache key ``key``."""
        return self.directory / f"{key}{SUFFIX}"

    def load(self, spec: LoadedModel, options: ExtractOptions) -> LayerChain | None:
        """The cached chain, or None when absent; a file that is unsafe to read
        (:func:`read_private_file`), unreadable, malformed, of another key or with a wrong
        checksum is logged as a warning and taken as absent (never an error)."""
        key = cache_key(spec, options)
        path = self._path_of(key)
        try:
            data = read_private_file(path, MAX_FILE_BYTES)
            return None if data is None else unpack(data, key)
        except UnsafeCacheFileError as exc:
            log.warning("ignoring graph cache file %s: %s", path, exc)
        except ChainCodecError as exc:
            log.warning("ignoring malformed graph cache file %s (%s)", path, exc)
        except OSError as exc:
            log.warning("ignoring unreadable graph cache file %s (%s)", path, exc)
        return None

    def store(self, spec: LoadedModel, options: ExtractOptions, chain: LayerChain) -> None:
        """Write ``chain`` (mode 0600) to a new temporary file in the directory (created, mode
        0700, when missing) and rename it over the chain's file; a cache that cannot be written
        is only logged."""
        key = cache_key(spec, options)
        path = self._path_of(key)
        try:
            data = pack(key, chain)
        except ChainCodecError as exc:
            log.warning("cannot write graph cache file %s (%s)", path, exc)
            return
        partial = None
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=self.directory)
            partial = Path(name)
            with os.fdopen(fd, "wb") as handle:  # mkstemp: mode 0600, a new file (O_EXCL)
                handle.write(data)
            os.replace(partial, path)
        except OSError as exc:
            log.warning("cannot write graph cache file %s (%s)", path, exc)
            if partial is not None:
                partial.unlink(missing_ok=True)

    def chain(self, spec: LoadedModel, options: ExtractOptions) -> LayerChain:
        """The chain from the cache, extracting and storing it on a miss (derived from the cached
        micro-batch 2 and 3 chains of its setting when both are there,
        :mod:`archplace.workload.rebatch`). An expert-parallel or expert-tensor-parallel chain
        (``options.ep`` or ``options.etp`` > 1, or a capacity factor or load imbalance above 1) is
        derived from the cached traced one (:func:`archplace.workload.extract.derive_experts`).

        Raises:
            ConfigError, ExtractionError: as :func:`extract_chain`.
        """
        return cached_chains([(spec, options)], self)[0]


Wanted = tuple[LoadedModel, ExtractOptions]
"""A model and the options of one of its chains."""


def _trace(spec: LoadedModel, options: ExtractOptions) -> LayerChain:
    """:func:`extract_chain` in a worker (module level, so that a process pool can run it)."""
    return extract_chain(spec, options)


def _setting(options: ExtractOptions) -> ExtractOptions:
    """The options with the first reference micro-batch: what chains derived from each other share."""
    return options.with_key(micro_batch=REFERENCE_BATCHES[0])


POOL_MIN_TRACES = 16
"""Traces worth starting a local pool for: a worker's start (a new interpreter importing torch and
transformers, then its first trace) costs about 7 s of CPU, some 12 traces of a 7B model (0.6 s
each), which two processes share only from about 16 traces on -- on idle cores: on a loaded
machine the pool is slower than tracing here (benchmarks/bench_extract.py --plan)."""


def _extract_all(todo: Sequence[Wanted], cache: GraphCache, executor: Executor | None,
                 jobs: int) -> dict[Wanted, LayerChain]:
    """Trace ``todo`` (distinct pairs), in parallel when there are several and an executor, or
    :data:`POOL_MIN_TRACES` and more than one job (a local pool of ``jobs`` processes, this one
    helping while they start); each chain is stored in the cache by this process. A trace that
    fails in a worker is run again here, so that its error is raised as :func:`extract_chain`
    raises it."""
    found: dict[Wanted, LayerChain] = {}
    if executor is not None and len(todo) > 1:
        found = _extract_on(executor, todo)
    elif jobs > 1 and len(todo) >= POOL_MIN_TRACES:
        with make_executor("local", min(jobs, len(todo))) as pool:
            found = _extract_on(pool, todo) if pool is not None else {}
    for item in todo:
        chain = found.get(item)
        if chain is None:
            chain = found[item] = extract_chain(*item)
        cache.store(*item, chain)
    return found


def _extract_on(executor: Executor, todo: Sequence[Wanted]) -> dict[Wanted, LayerChain]:
    """The chains of ``todo`` traced on ``executor`` and in this process at once: the workers take
    the pairs from the front while this process takes back those not yet started from the end (so
    it works while they start up); those whose trace failed in a worker are left out."""
    futures = [(item, executor.submit(_trace, *item)) for item in todo]
    found: dict[Wanted, LayerChain] = {}
    for item, future in reversed(futures):
        if future.cancel():
            found[item] = extract_chain(*item)
    for item, future in futures:
        if item in found:
            continue
        try:
            found[item] = future.result()
        except Exception as exc:  # noqa: BLE001 -- traced again in this process, which raises it
            log.info("tracing %s in a worker failed (%s); tracing it here", item[0].name, exc)
    return found


def cached_chains(wanted: Sequence[Wanted], cache: GraphCache | None = None, *,
                  executor: Executor | None = None, jobs: int | None = 1) -> list[LayerChain]:
    """The chains of ``wanted`` (model and options pairs), from the cache where it has them.

    The missing ones are traced, except that of a setting (model and options but the micro-batch)
    whose missing micro-batches above 3 are more than its references (micro-batch 2 and 3) not
    otherwise traced, the references are traced and those derived from them
    (:func:`archplace.workload.rebatch.rebatch_chain`; traced after all where it declines). The
    traces run on ``executor`` if given, else on a local pool of up to ``jobs`` processes when
    there are several; either way the chains are those :func:`extract_chain` gives, stored in the
    cache, and the same for any executor or number of jobs.

    Args:
        wanted: the pairs, in the order of the result (a pair may repeat).
        cache: the graph cache (default: :func:`default_cache_dir`).
        executor: where to trace (a search's worker pool), or None.
        jobs: processes tracing when ``executor`` is None and :data:`POOL_MIN_TRACES` traces or
            more are missing: a local pool of ``jobs``, this one helping while they start (1: trace
            here; None: the usable CPUs).

    Raises:
        ConfigError, ExtractionError: as :func:`extract_chain`.
    """
    cache = cache or GraphCache(default_cache_dir())
    jobs = default_jobs() if jobs is None else jobs
    for spec, options in wanted:  # refused before any tracing
        if options.shards_experts:
            check_ep(spec, options.ep)
            check_etp(spec, options.etp)
    chains: dict[Wanted, LayerChain] = {}
    groups: dict[Wanted, list[Wanted]] = {}
    for item in dict.fromkeys((spec, traced_options(options)) for spec, options in wanted):
        if (loaded := cache.load(*item)) is not None:
            chains[item] = loaded
        else:
            groups.setdefault((item[0], _setting(item[1])), []).append(item)
    direct: list[Wanted] = []
    derive: list[Wanted] = []
    for (spec, setting), missing in groups.items():
        refs = [(spec, setting.with_key(micro_batch=b)) for b in REFERENCE_BATCHES]
        for ref in refs:
            if ref not in missing and (loaded := cache.load(*ref)) is not None:
                chains[ref] = loaded
        extra = [r for r in refs if r not in chains and r not in missing]
        above = [item for item in missing if item[1].micro_batch > REFERENCE_BATCHES[-1]]
        if len(above) > len(extra):
            direct.extend(item for item in missing if item not in above)
            direct.extend(extra)
            derive.extend(above)
        else:
            direct.extend(missing)
    chains.update(_extract_all(direct, cache, executor, jobs))
    again = []
    for spec, options in derive:
        one, two = (chains[spec, options.with_key(micro_batch=b)] for b in REFERENCE_BATCHES)
        chain = rebatch_chain(one, two, options.micro_batch)
        if chain is None:
            again.append((spec, options))
        else:
            chains[spec, options] = chain
            cache.store(spec, options, chain)
    if again:
        log.info("%d chains not derivable from micro-batches 2 and 3: traced", len(again))
        chains.update(_extract_all(again, cache, executor, jobs))
    return [_finish(spec, options, chains[spec, traced_options(options)]) for spec, options in wanted]


def _finish(spec: LoadedModel, options: ExtractOptions, chain: LayerChain) -> LayerChain:
    """``chain`` (traced options) as ``options`` ask: expert-parallel, expert-tensor-parallel,
    padded or imbalanced."""
    if not options.shards_experts:
        return chain
    return derive_experts(chain, options)


def cached_chain(spec: LoadedModel, options: ExtractOptions, cache: GraphCache | None = None) -> LayerChain:
    """:meth:`GraphCache.chain` on ``cache`` (default: :func:`default_cache_dir`)."""
    return (cache or GraphCache(default_cache_dir())).chain(spec, options)
