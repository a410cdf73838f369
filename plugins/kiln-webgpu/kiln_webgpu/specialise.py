"""An IR pass: device functions specialised per array argument, for targets without
pointers to device memory (WGSL cannot pass a storage or workgroup pointer to a function).

Every array a device function can receive is, in the end, a kernel parameter (a storage
buffer) or a shared array of the kernel (a `var<workgroup>`): both are module-scope
variables in WGSL, which any function may name. So each function is copied once per
combination of arrays its calls pass, its array parameters renamed to the module-scope
variable (`global_name(...)`); the emitter declares and passes scalars only. Bounded
recursion (`bound_recursion`, earlier in the pipeline) has already made every function
non-recursive, so the copies are finite. A local array is the one array a function may
be given by pointer (`ptr<function, array<T, N>>`): its parameter keeps its name, and
its type, from the frontend, its size.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable

from kiln import ArrayType, DeviceFeatureError, UnsupportedError
from kiln.backend import MemorySpace
from kiln.ir import nodes as ir
from kiln.ir.visit import walk

GLOBAL_PREFIX = "kiln.global."
"""Variables named `kiln.global.<name>` are the kernel's module-scope array `<name>` (a
dot never appears in a Python identifier, so no user name collides)."""


BY_POINTER = ""
"""What a local array argument binds its parameter to: nothing at module scope."""


def global_name(name: str) -> str:
    return GLOBAL_PREFIX + name


def specialise_array_arguments(program: ir.Program) -> ir.Program:
    """A new program whose device functions' array parameters are named after the
    module-scope array each copy receives (`global_name`); the emitter passes no arrays.
    Calls keep their array arguments, so kiln still sees which arrays a kernel writes."""
    program = copy.deepcopy(program)
    kernel = program.kernel
    module_arrays = {p.name for p in kernel.params if isinstance(p.type, ArrayType)}
    module_arrays |= {name for name, t in kernel.locals.items()
                      if isinstance(t, ArrayType) and t.space is MemorySpace.SHARED}
    specialiser = _Specialiser({f.name: f for f in program.functions})
    specialiser.rewrite_calls(kernel.body, {name: name for name in module_arrays})
    return dataclasses.replace(program, functions=specialiser.done)


class _Specialiser:
    def __init__(self, functions: dict[str, ir.Function]) -> None:
        self.functions = functions
        self.names: dict[tuple[str, tuple[str, ...]], str] = {}
        self.done: list[ir.Function] = []
        self.count: dict[str, int] = {}

    def rewrite_calls(self, body: list[ir.Stmt], arrays: dict[str, str]) -> None:
        """Point each call at the copy for its array arguments (`arrays`: this body's
        array variables -> module-scope arrays)."""
        for node in walk(body):
            if not isinstance(node, ir.Call):
                continue
            callee = self.functions[node.func]
            bound: list[str] = []
            for param, arg in zip(callee.params, node.args):
                if not isinstance(param.type, ArrayType):
                    continue
                if param.type.space is MemorySpace.LOCAL:
                    bound.append(BY_POINTER)
                    continue
                target = arrays.get(arg.name) if isinstance(arg, ir.Var) else None
                if target is None:
                    raise UnsupportedError(
                        "the webgpu backend passes only the kernel's array parameters and "
                        f"shared arrays to device functions; '{callee.name}' gets a local "
                        "array here (copy it into a shared array, or make the function take "
                        "its elements)", node.loc)
                bound.append(target)
            node.func = self.copy_for(callee, tuple(bound))

    def copy_for(self, callee: ir.Function, bound: tuple[str, ...]) -> str:
        key = (callee.name, bound)
        if key in self.names:
            return self.names[key]
        n = self.count.get(callee.name, 0)
        self.count[callee.name] = n + 1
        name = callee.name if n == 0 else f"{callee.name}_{n}"
        self.names[key] = name
        func = copy.deepcopy(callee)
        func.name = name
        arrays = [p.name for p in func.params if isinstance(p.type, ArrayType)]
        renamed = {a: g for a, g in zip(arrays, bound) if g != BY_POINTER}
        for p in func.params:
            if p.name in renamed:
                p.name = global_name(renamed[p.name])
        for node in walk(func.body):
            if isinstance(node, ir.Var) and node.name in renamed:
                node.name = global_name(renamed[node.name])
        self.rewrite_calls(func.body, {global_name(g): g for g in bound if g != BY_POINTER})
        self.done.append(func)
        return name


INLINED_BODIES = 1024
"""Function bodies a kernel may expand to once every call is inlined (Vulkan, Metal and
D3D12 compilers inline every call of a shader): a bounded recursion that calls itself
twice per level doubles with each level of `max_depth`."""


def check_inlined_size(device_name: str) -> Callable[[ir.Program], ir.Program]:
    """A pass raising DeviceFeatureError when the kernel would inline more than
    INLINED_BODIES function bodies (WGSL has no recursion: bounded copies stand in)."""

    def check(program: ir.Program) -> ir.Program:
        sizes: dict[str, int] = {}
        for func in program.functions:  # callees first
            sizes[func.name] = 1 + sum(sizes.get(n.func, 1) for n in walk(func.body)
                                       if isinstance(n, ir.Call))
        total = 1 + sum(sizes.get(n.func, 1) for n in walk(program.kernel.body)
                        if isinstance(n, ir.Call))
        if total > INLINED_BODIES:
            biggest = max(sizes, key=lambda name: sizes[name])
            raise DeviceFeatureError(
                f"recursion this deep is not supported by device '{device_name}' (webgpu): "
                f"WGSL cannot recurse, so kiln copies '{biggest}' to its max_depth, and every "
                f"call is inlined by the driver: {total} function bodies (at most "
                f"{INLINED_BODIES}); lower max_depth", program.kernel.loc)
        return program

    return check
