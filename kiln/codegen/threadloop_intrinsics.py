"""Intrinsic spellings of thread-loop C (`ThreadLoopEmitter.spellings`): index names, fences,
atomics.

The index intrinsics are the variables `ThreadLoopEmitter`'s loops define
(`kiln_thread_idx_x`, `kiln_block_idx_x`, `kiln_grid_dim_x`, ...); barriers are gone after
`lower_thread_loops`. Atomics on global memory use gcc/clang `__atomic` builtins (relaxed,
as CUDA's are); float add/min/max and integer min/max are compare-and-swap loops. Atomics
on shared and local arrays need no atomicity (one OS thread runs a whole block) and use the
`plain_*` helpers.
"""

from __future__ import annotations

from typing import Any

from ..ir import nodes as ir
from ..ir.intrinsics import INDEX_BASES, Spelling
from ..ir.types import ScalarType
from .helpers import HelperTemplate

RELAXED = "__ATOMIC_RELAXED"
OPS = ("add", "sub", "min", "max", "and", "or", "xor", "exch")
BUILTIN = {"add": "__atomic_fetch_add", "sub": "__atomic_fetch_sub", "and": "__atomic_fetch_and",
           "or": "__atomic_fetch_or", "xor": "__atomic_fetch_xor", "exch": "__atomic_exchange_n"}


SYMBOL = {"add": "+", "sub": "-", "and": "&", "or": "|", "xor": "^"}


def _update(op: str, t: ScalarType) -> str:
    """The new value, from the `old` one and the operand `v`."""
    if op in ("min", "max"):
        if t.is_float:
            return f"f{op}{{F}}(old, v)"
        return f"v {'<' if op == 'min' else '>'} old ? v : old"
    return "v" if op == "exch" else f"old {SYMBOL[op]} v"


def _cas_loop(op: str) -> HelperTemplate:
    def template(t: ScalarType) -> str:
        return ("{Q} {T} kiln_atomic_" + op + "_{t}({T} *p, {T} v) {\n"
                "    {T} old, next;\n"
                f"    __atomic_load(p, &old, {RELAXED});\n"
                "    do {\n"
                f"        next = {_update(op, t)};\n"
                "    } while (!__atomic_compare_exchange(p, &old, &next, 1, "
                f"{RELAXED}, {RELAXED}));\n"
                "    return old;\n"
                "}")

    return template


def _plain(op: str) -> HelperTemplate:
    def template(t: ScalarType) -> str:
        return ("{Q} {T} kiln_plain_" + op + "_{t}({T} *p, {T} v) { {T} old = *p; *p = "
                + _update(op, t) + "; return old; }")

    return template


ATOMIC_HELPERS: dict[str, HelperTemplate] = {f"atomic_{op}": _cas_loop(op) for op in OPS}
ATOMIC_HELPERS.update({f"plain_{op}": _plain(op) for op in OPS})
ATOMIC_HELPERS["atomic_cas"] = lambda t: (
    "{Q} {T} kiln_atomic_cas_{t}({T} *p, {T} cmp, {T} v) {\n"
    f"    __atomic_compare_exchange_n(p, &cmp, v, 0, {RELAXED}, {RELAXED});\n"
    "    return cmp;\n"
    "}")
ATOMIC_HELPERS["plain_cas"] = lambda t: (
    "{Q} {T} kiln_plain_cas_{t}({T} *p, {T} cmp, {T} v) "
    "{ {T} old = *p; if (old == cmp) *p = v; return old; }")


def _atomic(op: str) -> Any:
    def spell(emitter: Any, call: ir.IntrinsicCall, args: list[str]) -> str:
        t = call.type
        assert isinstance(t, ScalarType)
        if op in BUILTIN and t.is_int:
            return f"{BUILTIN[op]}({args[0]}, {args[1]}, {RELAXED})"
        return f"{emitter.use_helper(f'atomic_{op}', t)}({', '.join(args)})"

    return spell


THREAD_LOOP_IMPLS: dict[str, Spelling] = {f"{b}_{a}": f"kiln_{b}_{a}"
                                     for b in INDEX_BASES for a in "xyz"}
THREAD_LOOP_IMPLS.update({f"atomic_{op}": _atomic(op) for op in OPS})
THREAD_LOOP_IMPLS["atomic_cas"] = _atomic("cas")
THREAD_LOOP_IMPLS["mem_fence"] = "__atomic_thread_fence(__ATOMIC_SEQ_CST)"
THREAD_LOOP_IMPLS["barrier"] = "/* barrier */ (void)0"
