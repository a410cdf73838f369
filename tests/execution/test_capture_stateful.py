"""A stateful property-based test of `kiln.capture`: random sequences of eager launches,
captures (with kiln.Params and host copies), replays with new Param values and updates of
single launches (valid and invalid), each step checked against a NumPy model of the array.

A refused update or replay must be a CaptureError that changes nothing; every replay must
equal running its launches eagerly."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

import kiln
from kiln import i32
from tests.helpers import requires_backend

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is not installed (test extra)")
from hypothesis import HealthCheck, Phase, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule  # noqa: E402

N, BLOCK = 16, 4


@kiln.kernel
def add(x: i32[:], k: i32, n: i32):
    i = kiln.global_id(0)
    if i < n:
        x[i] = x[i] + k


@kiln.kernel
def mul_add(x: i32[:], m: i32, k: i32, n: i32):
    i = kiln.global_id(0)
    if i < n:
        x[i] = x[i] * m + k


@dataclass
class Op:
    """One launch: `x[:min(n, threads)] = x * m + k` (`add` when m is None)."""

    grid: int
    k: int
    n: int
    m: int | None = None
    param: str | None = None  # k is this kiln.Param's value
    copy: bool = False  # a copy_from_host of the machine's host array instead

    def launch(self, x: kiln.DeviceArray, k: int | kiln.Param, host: np.ndarray) -> None:
        if self.copy:
            x.copy_from_host(host)
        elif self.m is None:
            add[self.grid, BLOCK](x, k, self.n)
        else:
            mul_add[self.grid, BLOCK](x, self.m, k, self.n)

    def apply(self, model: np.ndarray, k: int, host: np.ndarray) -> None:
        if self.copy:
            model[:] = host
            return
        upto = min(self.n, self.grid * BLOCK)
        m = 1 if self.m is None else self.m
        model[:upto] = model[:upto] * np.int32(m) + np.int32(k)


@dataclass
class Captured:
    graph: kiln.Graph
    ops: list[Op]
    params: dict[str, int] = field(default_factory=dict)

    def k_of(self, op: Op) -> int:
        return self.params[op.param] if op.param is not None else op.k


ops = st.builds(Op, grid=st.integers(1, 5), k=st.integers(-3, 3), n=st.integers(0, N),
                m=st.one_of(st.none(), st.integers(-1, 2)),
                param=st.one_of(st.none(), st.sampled_from(["p", "q"])))


class CaptureMachine(RuleBasedStateMachine):
    backend = "interp"

    def __init__(self) -> None:
        super().__init__()
        self.dev = kiln.device(self.backend)
        self.x = kiln.zeros(N, i32, self.dev)
        self.model = np.zeros(N, np.int32)
        self.host = np.arange(N, dtype=np.int32)
        self.graphs: list[Captured] = []

    @rule(op=ops)
    def eager(self, op: Op) -> None:
        op.launch(self.x, op.k, self.host)
        op.apply(self.model, op.k, self.host)

    @precondition(lambda self: len(self.graphs) < 3)
    @rule(recorded=st.lists(ops, min_size=1, max_size=5), copy_at=st.integers(-1, 5),
          values=st.fixed_dictionaries({"p": st.integers(-3, 3), "q": st.integers(-3, 3)}))
    def capture(self, recorded: list[Op], copy_at: int, values: dict[str, int]) -> None:
        if 0 <= copy_at <= len(recorded):
            recorded.insert(copy_at, Op(1, 0, 0, copy=True))
        with kiln.capture(self.dev) as g:  # recorded, not run: the model is unchanged
            for op in recorded:
                k = kiln.Param(op.param, values[op.param]) if op.param else op.k
                op.launch(self.x, k, self.host)
        used = {op.param for op in recorded if op.param}
        assert g.params == {p: values[p] for p in used}
        assert len(g.launches) == sum(not op.copy for op in recorded)
        self.graphs.append(Captured(g, recorded, {p: values[p] for p in used}))

    @rule(values=st.lists(st.integers(-5, 5), min_size=N, max_size=N))
    def change_host(self, values: list[int]) -> None:
        """In place: the recorded copies read it at their next replay."""
        self.host[:] = values

    @precondition(lambda self: self.graphs)
    @rule(data=st.data())
    def replay(self, data: st.DataObject) -> None:
        c = data.draw(st.sampled_from(self.graphs))
        new = {p: data.draw(st.integers(-3, 3)) for p in c.params if data.draw(st.booleans())}
        c.graph.replay(**new)
        c.params.update(new)
        for op in c.ops:
            op.apply(self.model, c.k_of(op), self.host)

    @precondition(lambda self: self.graphs)
    @rule(data=st.data(), grid=st.one_of(st.none(), st.integers(1, 5)),
          k=st.one_of(st.none(), st.integers(-3, 3)), n=st.one_of(st.none(), st.integers(0, N)))
    def update(self, data: st.DataObject, grid: int | None, k: int | None,
               n: int | None) -> None:
        c = data.draw(st.sampled_from(self.graphs))
        launches = [op for op in c.ops if not op.copy]
        index = data.draw(st.integers(0, len(launches) - 1))
        op = launches[index]
        changes = {name: v for name, v in (("k", k), ("n", n)) if v is not None}
        if "k" in changes and op.param is not None:
            with pytest.raises(kiln.CaptureError, match="kiln.Param"):
                c.graph.update(index, grid=grid, **changes)
            return
        c.graph.update(index, grid=grid, **changes)
        op.grid = op.grid if grid is None else grid
        op.k, op.n = changes.get("k", op.k), changes.get("n", op.n)

    @precondition(lambda self: self.graphs)
    @rule(data=st.data(), bad=st.sampled_from([{"k": 1.5}, {"n": "x"}, {"grid": 0},
                                               {"grid": (1, 1 << 20, 1)}, {"z": 1}]))
    def bad_update(self, data: st.DataObject, bad: dict[str, object]) -> None:
        c = data.draw(st.sampled_from(self.graphs))
        before = [(launch.grid, launch.args) for launch in c.graph.launches]
        with pytest.raises(kiln.CaptureError):
            c.graph.update(0, **bad)  # type: ignore[arg-type]
        assert [(launch.grid, launch.args) for launch in c.graph.launches] == before

    @invariant()
    def same_as_the_model(self) -> None:
        np.testing.assert_array_equal(self.x.numpy(), self.model)


SETTINGS = settings(max_examples=25, stateful_step_count=15, derandomize=True, deadline=None,
                    database=None, phases=(Phase.explicit, Phase.generate),
                    suppress_health_check=list(HealthCheck))
CaptureMachine.TestCase.settings = SETTINGS
test_capture_against_a_numpy_model = CaptureMachine.TestCase


class CpuCaptureMachine(CaptureMachine):
    backend = "cpu"


CpuCaptureMachine.TestCase.settings = settings(SETTINGS, max_examples=8)
test_capture_on_cpu_against_a_numpy_model = requires_backend("cpu", "the cpu backend is "
                                                             "unavailable")(
    pytest.mark.compiler(CpuCaptureMachine.TestCase))
