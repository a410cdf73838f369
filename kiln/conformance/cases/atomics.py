"""Every atomic on every element type the registry allows, and mem_fence.

Totals must be exact, and the old values the atomics return must be consistent with some
serial order of the operations: atomic_add hands out unique slots, atomic_and/or/xor on
distinct bits see a chain of values, atomic_exch passes every value on exactly once.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import kiln
from kiln import f32, f64, i32
from kiln.ir.intrinsics import ATOMIC_TYPES
from kiln.ir.types import ScalarType

from ..checks import assert_equal, assert_permutation, blocks, rng, run
from ..registry import FP64, atomic, case, signatures

BLOCK = 64
N = 200
SLOTS = 3


def _atomic_kernel(name: str) -> kiln.Kernel:
    """`old[i] = atomic(acc, 0, slot[i], value[i])`: one update per thread, 2-D indices."""
    op = getattr(kiln, name)

    def kernel(acc, slot, value, old, n: i32):
        i = kiln.global_id(0)
        if i < n:
            old[i] = op(acc, 0, slot[i], value[i])

    kernel.__name__ = kernel.__qualname__ = f"{name}_kernel"
    types = [(t[:, :], i32[:], t[:], t[:], i32) for t in ATOMIC_TYPES[name]]
    return signatures(*types)(kiln.kernel(kernel))


ATOMIC_KERNELS = {name: _atomic_kernel(name) for name in ATOMIC_TYPES if name != "atomic_cas"}


def _launch(device: kiln.Device, name: str, t: ScalarType, init: np.ndarray,
            slot: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Run one atomic for every (slot, value); return the final array and the old values."""
    acc = init.astype(t.dtype).reshape(1, -1)
    old = np.zeros(len(slot), t.dtype)
    run(device, ATOMIC_KERNELS[name], blocks(len(slot), BLOCK), BLOCK, acc,
        slot.astype(np.int32), value.astype(t.dtype), old, len(slot))
    return acc[0], old


def _per_slot(slot: np.ndarray, *arrays: np.ndarray):
    for s in range(int(slot.max()) + 1):
        yield s, [a[slot == s] for a in arrays]


def check_counting(device: kiln.Device, name: str, t: ScalarType) -> None:
    """atomic_add of 1 hands out 0, 1, 2, ... per slot; atomic_sub of 1 counts down."""
    slot = np.arange(N) % SLOTS
    counts = np.bincount(slot)
    start = np.zeros(SLOTS) if name == "atomic_add" else counts
    final, old = _launch(device, name, t, start, slot, np.ones(N))
    step = 1 if name == "atomic_add" else -1
    assert_equal(final, (start + step * counts).astype(t.dtype), f"{name} {t} totals")
    for s, (olds,) in _per_slot(slot, old):
        first = 0 if name == "atomic_add" else 1
        assert_permutation(olds, np.arange(first, first + counts[s]).astype(t.dtype),
                           f"{name} {t} old values of slot {s} (each must be unique)")


def check_extremum(device: kiln.Device, name: str, t: ScalarType) -> None:
    """The old values of atomic_min/max are the running extremum of some serial order."""
    better = np.minimum if name == "atomic_min" else np.maximum
    slot = np.arange(N) % SLOTS
    r = rng(30)
    if t.is_float:
        value = r.permutation(N).astype(t.dtype) * t.dtype.type(0.5) - 20
    else:
        value = r.permutation(N).astype(t.dtype) + (t.dtype.type(0) if t.kind == "u" else -50)
    init = np.full(SLOTS, 60 if name == "atomic_min" else 10, t.dtype)
    final, old = _launch(device, name, t, init, slot, value)
    for s, (olds, values) in _per_slot(slot, old, value):
        where = f"{name} {t} slot {s}"
        assert_equal(final[s], better(init[s], better.reduce(values)), f"{where} total")
        if not (better(olds, final[s]) == final[s]).all():
            raise AssertionError(f"{where}: an old value is beyond the final value")
        if init[s] not in olds:
            raise AssertionError(f"{where}: no thread saw the initial value {init[s]}")
        for o in np.unique(olds[olds != init[s]]):  # who moved the value to o?
            if not ((values == o) & (better(olds, o) == o) & (olds != o)).any():
                raise AssertionError(f"{where}: old value {o} was never the running extremum")


def check_bits(device: kiln.Device, name: str, t: ScalarType) -> None:
    """Threads of a group flip distinct bits of one word: they must see a chain of values."""
    unsigned = np.dtype(f"u{t.itemsize}")
    bit = np.arange(N) % t.bits
    slot = np.arange(N) // t.bits
    mask = (np.ones(N, np.uint64) << bit.astype(np.uint64)).astype(unsigned)
    clear = name == "atomic_and"
    init = np.full(int(slot.max()) + 1, ~unsigned.type(0) if clear else 0, unsigned)
    value = ~mask if clear else mask
    final, old = _launch(device, name, t, init.view(t.dtype), slot, value.view(t.dtype))
    final, old = final.view(unsigned), old.view(unsigned)
    for s, (olds, masks) in _per_slot(slot, old, mask):
        where = f"{name} {t} slot {s}"
        everything = np.bitwise_or.reduce(masks)
        expected = init[s] & ~everything if clear else init[s] | everything
        assert_equal(final[s], expected, f"{where} total")
        own = (olds & masks) != 0
        if not (own == clear).all():
            raise AssertionError(f"{where}: a thread saw its own bit already flipped")
        order = np.argsort([bin(int(o)).count("1") for o in olds])
        chain = olds[order[::-1]] if clear else olds[order]
        touched = chain ^ init[s]  # bits flipped before each operation: must only grow
        if not ((touched[1:] & touched[:-1]) == touched[:-1]).all() or len(set(chain)) < len(
                chain):
            raise AssertionError(f"{where}: the old values are not a chain of single-bit "
                                 "updates, so no serial order explains them")


def check_exchange(device: kiln.Device, name: str, t: ScalarType) -> None:
    """atomic_exch passes every value on exactly once: olds and the final value together
    are the initial value and all values written."""
    slot = np.arange(N) % SLOTS
    value = np.arange(1, N + 1)
    init = np.full(SLOTS, -1 if t.is_signed or t.is_float else N + 1)
    final, old = _launch(device, name, t, init, slot, value)
    for s, (olds, values) in _per_slot(slot, old, value.astype(t.dtype)):
        assert_permutation(np.append(olds, final[s]),
                           np.append(values, init[s]).astype(t.dtype),
                           f"{name} {t} slot {s}: old values and the final value")


CHECKS: dict[str, tuple[Callable[[kiln.Device, str, ScalarType], None], str]] = {
    "atomic_add": (check_counting, "adding 1: exact totals, unique old values 0, 1, 2, ..."),
    "atomic_sub": (check_counting, "subtracting 1: exact totals, unique old values n, ..., 1"),
    "atomic_min": (check_extremum, "exact minimum; old values are the running minima of "
                                   "some serial order"),
    "atomic_max": (check_extremum, "exact maximum; old values are the running maxima of "
                                   "some serial order"),
    "atomic_and": (check_bits, "clearing distinct bits: the old values form a chain"),
    "atomic_or": (check_bits, "setting distinct bits: the old values form a chain"),
    "atomic_xor": (check_bits, "flipping distinct bits: the old values form a chain"),
    "atomic_exch": (check_exchange, "every value written is passed on exactly once"),
}


def _register(name: str, t: ScalarType) -> None:
    check, description = CHECKS[name]
    requires = (atomic(name, t), FP64) if t == f64 else (atomic(name, t),)
    case(f"{name}_{t}", requires=requires, description=f"{name} on {t}: {description}"
         )(lambda device: check(device, name, t))


for _name in CHECKS:
    for _t in ATOMIC_TYPES[_name]:
        _register(_name, _t)


@signatures(*((t[:], t[:], i32) for t in ATOMIC_TYPES["atomic_cas"]))
@kiln.kernel
def cas_increment(counter, old, n: i32):
    i = kiln.global_id(0)
    if i < n:
        seen = counter[0]
        while True:  # the classic compare-and-swap loop
            previous = kiln.atomic_cas(counter, 0, seen, seen + 1)
            if previous == seen:
                old[i] = seen
                break
            seen = previous


def _check_cas(device: kiln.Device, t: ScalarType) -> None:
    n = 150
    counter, old = np.zeros(1, t.dtype), np.zeros(n, t.dtype)
    run(device, cas_increment, blocks(n, BLOCK), BLOCK, counter, old, n)
    assert_equal(counter[0], t.dtype.type(n), f"atomic_cas {t} total")
    assert_permutation(old, np.arange(n).astype(t.dtype),
                       f"atomic_cas {t} values each thread swapped in (each must be unique)")


for _t in ATOMIC_TYPES["atomic_cas"]:
    case(f"atomic_cas_{_t}", requires=(atomic("atomic_cas", _t),),
         description=f"atomic_cas on {_t}: a compare-and-swap loop counts every thread once"
         )(lambda device, t=_t: _check_cas(device, t))


@kiln.kernel
def publish(data: f32[:], flag: i32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        data[i] = i * 0.5
        kiln.mem_fence()  # orders the data write before the flag write
        flag[i] = 1


@case()
def mem_fence(device):
    """mem_fence between two writes compiles and keeps both."""
    n = 100
    data, flag = np.zeros(n, np.float32), np.zeros(n, np.int32)
    run(device, publish, blocks(n, BLOCK), BLOCK, data, flag, n)
    assert_equal(data, np.arange(n, dtype=np.float32) * 0.5, "data")
    assert_equal(flag, np.ones(n, np.int32), "flag")
