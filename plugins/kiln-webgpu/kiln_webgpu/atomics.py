"""Atomics in WGSL: arrays that atomics touch are arrays of `atomic<T>`.

WGSL's atomic built-ins work only on `atomic<i32>` and `atomic<u32>` variables, so an array
that any atomic operation touches is declared as an array of them (f32: its bits in an
`atomic<u32>`), and every plain load and store of it becomes `atomicLoad` / `atomicStore`.
Float add/min/max are compare-exchange loops on the bits, `atomic_cas` a strong
compare-and-swap from WGSL's weak one; these are helper functions per array, since WGSL
cannot pass a pointer to device memory to a function.
"""

from __future__ import annotations

from typing import Any

from kiln import ArrayType, ScalarType, f32
from kiln.backend import intrinsics
from kiln.codegen import CExpr
from kiln.ir import nodes as ir
from kiln.ir.visit import walk

from .specialise import GLOBAL_PREFIX

ATOMIC_FUNCTIONS = {"atomic_add": "atomicAdd", "atomic_sub": "atomicSub",
                    "atomic_min": "atomicMin", "atomic_max": "atomicMax",
                    "atomic_and": "atomicAnd", "atomic_or": "atomicOr",
                    "atomic_xor": "atomicXor", "atomic_exch": "atomicExchange"}
FLOAT_UPDATES = {"atomic_add": "{a} + v", "atomic_min": "min({a}, v)",
                 "atomic_max": "max({a}, v)"}
"""Float read-modify-writes done as compare-and-swap loops on the bits."""


def _written_by_emitter(emitter: Any, call: ir.IntrinsicCall, args: list[str]) -> str:
    """Atomics take `&array[i]`, which only the emitter can write (`AtomicArrays`)."""
    return str(emitter.expr_IntrinsicCall(call).text)


ATOMIC_SPELLINGS = dict.fromkeys(intrinsics.names("atomic"), _written_by_emitter)
"""Spellings of every atomic, so kiln's implementation check sees that this backend runs
them."""


class AtomicArrays:
    """The emitter's part for atomics (mixed into `WGSLEmitter`)."""

    atomic_arrays: set[str]
    _atomic_helpers: dict[str, str]

    def is_atomic(self, array: str) -> bool:
        return array.removeprefix(GLOBAL_PREFIX) in self.atomic_arrays

    def element_type(self, array: str, elem: ScalarType) -> str:
        if self.is_atomic(array):
            return "atomic<u32>" if elem is f32 else f"atomic<{self.ctype(elem)}>"
        return self.ctype(elem)

    def stmt_Store(self, s: ir.Store) -> None:
        target = self.element(s.array, s.indices)
        value = self.converted(s.value, s.array.type.elem)  # type: ignore[union-attr]
        if self.is_atomic(s.array.name):
            bits = f"bitcast<u32>({value})" if s.array.type.elem is f32 else value  # type: ignore
            self.line(f"atomicStore(&{target}, {bits});", s.loc)
        else:
            self.line(f"{target} = {value};", s.loc)

    def expr_Load(self, e: ir.Load) -> CExpr:
        element = self.element(e.array, e.indices)
        if not self.is_atomic(e.array.name):
            return CExpr(element)
        if e.array.type.elem is f32:  # type: ignore[union-attr]
            return CExpr(f"bitcast<f32>(atomicLoad(&{element}))")
        return CExpr(f"atomicLoad(&{element})")

    def expr_IntrinsicCall(self, e: ir.IntrinsicCall) -> CExpr:
        if intrinsics[e.name].category != "atomic":
            return super().expr_IntrinsicCall(e)
        array = e.args[0]
        assert isinstance(array, ir.Var) and isinstance(array.type, ArrayType)
        nidx = array.type.ndim
        index = self.linear_index(array, e.args[1:1 + nidx])
        values = [self.expr(a).text for a in e.args[1 + nidx:]]
        elem = array.type.elem
        name = self.var(array.name)
        if elem is f32 or e.name == "atomic_cas":
            helper = self.atomic_helper(e.name, name, elem)
            return CExpr(f"{helper}({', '.join([index, *values])})")
        return CExpr(f"{ATOMIC_FUNCTIONS[e.name]}(&{name}[{index}], {values[0]})")

    def atomic_helper(self, op: str, array: str, elem: ScalarType) -> str:
        """A helper doing atomic `op` on `array` (WGSL passes no storage pointers)."""
        helper = f"kiln_{op}_{array}"
        if helper in self._atomic_helpers:
            return helper
        t = self.ctype(elem)
        if op == "atomic_cas":  # a strong compare-and-swap from the weak one
            text = f"""fn {helper}(i: i32, expected: {t}, v: {t}) -> {t} {{
    var old: {t};
    loop {{
        let r = atomicCompareExchangeWeak(&{array}[i], expected, v);
        old = r.old_value;
        if (r.exchanged || old != expected) {{ break; }}
    }}
    return old;
}}"""
        elif op == "atomic_exch":
            text = f"""fn {helper}(i: i32, v: f32) -> f32 {{
    return bitcast<f32>(atomicExchange(&{array}[i], bitcast<u32>(v)));
}}"""
        else:
            new = FLOAT_UPDATES[op].format(a="bitcast<f32>(old)")
            text = f"""fn {helper}(i: i32, v: f32) -> f32 {{
    var old = atomicLoad(&{array}[i]);
    loop {{
        let r = atomicCompareExchangeWeak(&{array}[i], old, bitcast<u32>({new}));
        if (r.exchanged) {{ break; }}
        old = r.old_value;
    }}
    return bitcast<f32>(old);
}}"""
        self._atomic_helpers[helper] = text
        return helper


def atomic_arrays(program: ir.Program) -> set[str]:
    """Names of the kernel's arrays some atomic operation touches (in any function)."""
    return {n.args[0].name.removeprefix(GLOBAL_PREFIX)  # type: ignore[attr-defined]
            for f in [program.kernel, *program.functions] for n in walk(f.body)
            if isinstance(n, ir.IntrinsicCall) and intrinsics[n.name].category == "atomic"}
