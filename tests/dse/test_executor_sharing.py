"""Values shared by many tasks: scattered once on Dask, never hashed; the value itself elsewhere."""

from __future__ import annotations

from typing import Any

from archplace.base.executor import DaskExecutor, make_executor, shared


class Unhashable:
    """Items that fail Dask's hash (``tokenize``) and reach a worker as a plain list."""

    def __init__(self, items: list[int]) -> None:
        self.items = items

    def __dask_tokenize__(self) -> Any:
        raise AssertionError("Dask hashed a task's argument")

    def __reduce__(self) -> tuple[type[list[int]], tuple[list[int]]]:
        return list, (self.items,)


def test_local_executors_take_the_value_itself() -> None:
    value = Unhashable([1, 2])
    assert shared(None, value) is value
    with make_executor("local", 2) as pool:
        assert pool is not None and shared(pool, value) is value
        assert pool.submit(sum, value).result() == 3


def test_dask_tasks_neither_hash_their_arguments_nor_a_shared_value() -> None:
    with make_executor("dask", 1) as executor:
        assert isinstance(executor, DaskExecutor)
        assert executor.submit(sum, Unhashable([1, 2, 3])).result() == 6
        handle = shared(executor, Unhashable([4, 5]))
        assert not isinstance(handle, Unhashable)  # a future of the workers' copy
        assert [f.result() for f in [executor.submit(sum, handle), executor.submit(len, handle)]] == [9, 2]
