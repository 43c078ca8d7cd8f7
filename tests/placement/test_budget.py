"""The plan search's bounds (archplace.placement.budget): the candidate grid on huge clusters, the
chain-length cap, table memory under eviction, the DP work budget, and layer times that overflow."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from placement_helpers import chains, setups

from archplace.base.errors import ConfigError, InternalError, SolverError
from archplace.hw.cluster import Cluster
from archplace.placement import budget, plan_search, resident, tables
from archplace.placement.choices import SEARCHED_SCHEDULES
from archplace.placement.pipeline import evaluate_plan
from archplace.placement.plan import CostKey, LayerCost, PipelineSchedule, Plan, Recompute, TrainingSetup
from archplace.placement.search import CostFamily, Search, Variant
from archplace.placement.timing import divisors

CLUSTER = dict(intra_node_bandwidth_bytes_per_s=1e11, inter_node_bandwidth_bytes_per_s=1e10,
               intra_node_latency_s=1e-6, inter_node_latency_s=1e-5)


def setup_of(devices: int, global_batch: int, *, divide: bool = True, hbm: float = 1e12) -> TrainingSetup:
    cluster = Cluster(devices=devices, devices_per_node=min(8, devices), **CLUSTER)
    return TrainingSetup(cluster, global_batch, 128, hbm, 1e12, 1e15, dp_must_divide_batch=divide)


def layer(name: str, seconds: float = 1e-3, params: int = 1000, flop: float = 0.0,
          backward: float = 2.0) -> LayerCost:
    return LayerCost(name, fwd_s=seconds, bwd_s=backward * seconds, params=params, activation_bytes=1e6,
                     input_bytes=1e5, boundary_bytes=1e5, working_bytes=1e6, fwd_flop=flop, bwd_flop=2 * flop)


# ------------------------------------------------------------------------ the candidate grid

def dense_grid(setup: TrainingSetup, tp: int, b: int, n: int, v: int, interleaved: bool):
    """Every (p, d) with tp p d <= devices and the micro-batch count of ``timing``, enumerated
    densely (d = 1 .. devices / (tp p)): the grid before DP degrees became divisors."""
    devices = setup.cluster.devices
    out = []
    for p in range(2 if interleaved else 1, min(n // v, devices // tp) + 1):
        s = p * v  # interleaved: only depths with a block-uniform split (equal chunks, or n - 2 even)
        if interleaved and n % s and not (n - 2 >= s and (n - 2) % s == 0):
            continue
        d = np.arange(1, devices // (tp * p) + 1)
        g = setup.global_batch
        valid = g % (b * d) == 0
        m = g // (b * d)
        if interleaved:  # Megatron-Core's interleaved schedule runs any m >= p
            valid &= m >= p
        out += [(p, int(dd), int(mm)) for dd, mm in zip(d[valid], m[valid], strict=True)]
    return out


@settings(max_examples=40)
@given(devices=st.sampled_from([1, 6, 64, 1000, 4096, 2**20]),
       global_batch=st.sampled_from([1, 12, 96, 1024, 2**20, 2**30, 3 * 5 * 7 * 11 * 13]),
       b=st.sampled_from([1, 2, 3, 8]), tp=st.sampled_from([1, 2, 8]), n=st.integers(1, 40),
       schedule=st.sampled_from([(PipelineSchedule.ONE_F_ONE_B, 1), (PipelineSchedule.INTERLEAVED, 2)]))
def test_grid_is_the_dense_enumeration(devices: int, global_batch: int, b: int, tp: int, n: int,
                                       schedule: tuple[PipelineSchedule, int]) -> None:
    kind, v = schedule
    setup = setup_of(devices, global_batch)
    layers = [layer(f"l{i}") for i in range(n)]
    family = CostFamily(CostKey(tp, b, False), Recompute.NONE, layers)
    probe = Search([family], [Variant(kind, v, False, False)], setup, 1)
    p, d, m = probe.grid(probe.states[0].family, n, probe.variants[0])
    got = sorted(zip(p.tolist(), d.tolist(), m.tolist(), strict=True))
    assert got == sorted(dense_grid(setup, tp, b, n, v, kind is PipelineSchedule.INTERLEAVED))


def test_the_micro_batch_reaches_the_dp_in_its_cost_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #25's micro-batch path: the plan search's families hold the cost key they were
    given (its micro-batch and degrees are read through it, not copied), and the plans it returns
    carry that micro-batch."""
    key = CostKey(2, 4, True)
    seen: list[Search] = []
    init = Search.__init__

    def spy(self: Search, *args: object, **kwargs: object) -> None:
        init(self, *args, **kwargs)  # type: ignore[arg-type]
        seen.append(self)

    monkeypatch.setattr(Search, "__init__", spy)
    results = plan_search({key: [layer(f"l{i}") for i in range(4)]}, setup_of(8, 32), top_k=2)
    assert all(state.family.key is key for state in seen[0].states)
    assert {result.plan.micro_batch for result in results} == {4}


@given(st.integers(1, 10**6))
def test_divisors(q: int) -> None:
    found = divisors(q)
    assert found == sorted(found) and found[0] == 1 and found[-1] == q
    assert all(q % d == 0 for d in found)
    if q <= 2000:
        assert found == [d for d in range(1, q + 1) if q % d == 0]


# ------------------------------------------------------------------------ chain length and work

def test_a_chain_longer_than_the_cap_is_refused_before_any_table() -> None:
    layers = [layer(f"l{i}") for i in range(budget.MAX_CHAIN_LAYERS + 1)]
    with pytest.raises(ConfigError, match=r"^the plan search takes chains of at most 2,048 layers, got "
                                          r"2,049 \(its tables of one option alone would take 0.2 GiB\)$"):
        plan_search({(1, 1, False): layers}, setup_of(8, 8))


def test_the_work_budget_ends_a_search_too_large(monkeypatch: pytest.MonkeyPatch) -> None:
    layers = [layer(f"l{i}", seconds=1e-3 * (1 + i % 3)) for i in range(30)]
    setup = setup_of(64, 64)
    found = plan_search({(1, 1, False): layers}, setup)[0]  # fine within the real budget
    assert found.iteration_time_s > 0
    monkeypatch.setattr(budget, "MAX_DP_CELLS", 1_000)
    with pytest.raises(ConfigError, match=r"^the plan search is too large: it needs more than 1e\+03 "
                                          r"DP cells \(about 40 s of work\) for 30 layers on 64 devices; "
                                          r"narrow it"):
        plan_search({(1, 1, False): layers}, setup)


def test_dp_cells_counts_the_kernel_blocks() -> None:
    assert budget.dp_cells(10, 1) == 10  # one column
    assert budget.dp_cells(10, 3) == 2 * 8 * 8 + 8
    assert budget.dp_cells(3, 5) == 0


def test_table_cache_keeps_the_most_recent_within_its_bytes() -> None:
    cache = budget.TableCache(limit=3 * 8 * 4)  # three arrays of four floats
    made: list[str] = []

    def maker(key: str):
        def make():
            made.append(key)
            return np.zeros(4)
        return make

    for key in ("a", "b", "c"):
        cache.get(key, maker(key))
    cache.get("a", maker("a"))  # a is now the most recent: b goes first
    cache.get("d", maker("d"))
    cache.get("a", maker("a"))
    cache.get("b", maker("b"))  # rebuilt
    assert made == ["a", "b", "c", "d", "b"]


# ------------------------------------------------------------------------ memory under eviction

@settings(max_examples=25)
@given(data=st.data())
def test_evicting_every_table_changes_no_plan(data: st.DataObject) -> None:
    """With a table budget of one byte every access evicts the other families' tables and drops
    the caches: the search rebuilds them and must return exactly the same plans."""
    layers = data.draw(chains(max_layers=7))
    setup = data.draw(setups(layers))
    costs = {(1, 1, False): layers, (2, 1, False): layers}
    options = dict(recomputes=tuple(Recompute), schedules=SEARCHED_SCHEDULES, chunks=(2,), top_k=3)
    try:
        expected = plan_search(costs, setup, **options)
    except Exception as exc:  # noqa: BLE001 - the same outcome is expected below
        expected = type(exc)
    held: list[Search] = []
    run = Search.run

    def spy(self: Search):
        held.append(self)
        return run(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(resident, "TABLE_BYTES", 1)
        patch.setattr(Search, "run", spy)
        try:
            got = plan_search(costs, setup, **options)
        except Exception as exc:  # noqa: BLE001
            got = type(exc)
    assert got == expected
    assert sum(state.tables is not None for state in held[0].states) <= 1


def test_evicting_tables_on_a_longer_chain_changes_no_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    layers = [layer(f"l{i}", seconds=1e-3 * (1 + i % 4), params=10**6 * (1 + i % 3)) for i in range(40)]
    setup = setup_of(64, 256, hbm=4e8)  # the model state needs 4 or more stages
    costs = {(1, b, False): layers for b in (1, 2)}
    expected = plan_search(costs, setup, top_k=5)
    monkeypatch.setattr(resident, "TABLE_BYTES", 1)
    assert plan_search(costs, setup, top_k=5) == expected
    assert len(expected) == 5


def test_blocked_sweep_equals_one_block(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    for n in (1, 2, 7, 40):
        values = rng.uniform(0.1, 3.0, n)
        upper = np.arange(n)[None, :] >= np.arange(n)[:, None]
        table = np.cumsum(np.where(upper, values[None, :], 0.0), axis=1)  # distinct segment sums
        whole = tables._min_max_by_count(table, upper)
        monkeypatch.setattr(tables, "THRESHOLD_BLOCK", n)  # one threshold per block
        meter = budget.WorkMeter(layers=n, devices=1)
        assert np.array_equal(tables._min_max_by_count(table, upper, meter), whole)
        assert meter.cells > 0
        monkeypatch.undo()
        # the brute force: the least max over every split into s segments
        for s in range(1, min(n, 4) + 1):
            best = np.inf
            for cuts in _splits(n, s):
                best = min(best, max(table[a, e] for a, e in cuts))
            assert whole[s] == best


def _splits(n: int, s: int):
    import itertools
    for cuts in itertools.combinations(range(1, n), s - 1):
        bounds = (0, *cuts, n)
        yield [(bounds[k], bounds[k + 1] - 1) for k in range(s)]


# ------------------------------------------------------------------------ overflow and MFU

def test_layer_times_that_overflow_are_refused() -> None:
    huge = [layer(f"l{i}", seconds=1e308, backward=1.0) for i in range(3)]
    with pytest.raises(ConfigError,
                       match=r"^layer times overflow: 3 layers \(the slowest, 'l0', fwd_s 1e\+308 s"):
        plan_search({(1, 1, False): huge}, setup_of(8, 8))


def test_an_iteration_that_overflows_is_a_solver_error_without_warnings() -> None:
    large = [layer(f"l{i}", seconds=1e300) for i in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NumPy's overflow warnings would be extra stderr lines
        with pytest.raises(SolverError, match=r"^iteration time overflows \(compute inf s"):
            plan_search({(1, 1, False): large}, setup_of(8, 2**30))


def test_mfu_above_one_is_an_internal_error() -> None:
    """evaluate_plan asserts MFU <= 1: layer FLOP faster than the peak are a bug of the caller."""
    setup = setup_of(8, 8)
    fast = [layer("a", seconds=1e-3, flop=1e13), layer("b", seconds=1e-3, flop=1e13)]  # 1e16 FLOP/s
    plan = Plan(tp=1, pp=1, dp=1, micro_batch=1, recompute=Recompute.NONE, stages=((0, 1),))
    with pytest.raises(InternalError, match=r"^MFU \d+(\.\d+)? > 1"):
        evaluate_plan(fast, setup, plan)
    honest = [layer("a", seconds=1e-3, flop=1e12), layer("b", seconds=1e-3, flop=1e12)]
    assert 0 < evaluate_plan(honest, setup, plan).mfu <= 1
