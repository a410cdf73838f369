"""Loaded kernels and the launch fast path.

A `Routine` packs a launch's arguments into one preallocated parameter block, laid out once
per specialisation (from the first launch's argument types) by a generated packing
function, and hands the driver a fixed array of pointers into that block. The driver copies
parameters at launch, so the block is reused immediately; a launch never synchronises.
"""

from __future__ import annotations

import contextlib
import ctypes
import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...ir.types import bf16
from .driver import Context, api, check, error_name
from .shim import record, shim

Dim3 = tuple[int, int, int]
POINTER = "P"
BF16 = bf16.dtype
INVALID_CONTEXT = 201  # CUDA_ERROR_INVALID_CONTEXT
STATIC_SHARED_LIMIT = 48 * 1024  # more needs dynamic shared memory and an attribute


def _align(offset: int, size: int) -> int:
    return (offset + size - 1) // size * size


class ParamBlock:
    """A parameter block for a fixed sequence of C parameter codes (struct format chars)."""

    def __init__(self, codes: Sequence[str]) -> None:
        fmt, offsets, offset = ["<"], [], 0
        for code in codes:
            size = 8 if code == POINTER else struct.calcsize("<" + code)
            start = _align(offset, size)
            fmt.append(f"{start - offset}x" if start > offset else "")
            fmt.append("Q" if code == POINTER else code)
            offsets.append(start)
            offset = start + size
        self.struct = struct.Struct("".join(fmt))
        self.data = ctypes.create_string_buffer(max(self.struct.size, 1))
        base = ctypes.addressof(self.data)
        self.pointers = (ctypes.c_void_p * max(len(codes), 1))(*[base + o for o in offsets])
        self.address = ctypes.addressof(self.pointers)


def _scalar_code(value: Any) -> str:
    dtype = np.asarray(value).dtype
    if dtype == np.bool_:
        return "?"
    if dtype == BF16:
        return "H"
    return {"l": "q", "L": "Q"}.get(dtype.char, dtype.char)  # "<l" packs 4 bytes, not 8


def _scalar_expr(value: Any, i: int) -> str:
    """How the packing function reads scalar argument `i` (a bf16 as its bits)."""
    return f"a[{i}].view('<u2')" if np.asarray(value).dtype == BF16 else f"a[{i}]"


Layout = tuple[list[str], list[str]]
"""Parameter codes (struct format characters) and the expressions that produce them from
the launch arguments `a`."""


def kiln_layout(args: Sequence[Any]) -> Layout:
    """kiln's ABI: arrays as pointer + i32 dimensions, scalars by value
    (see `kiln.ir.abi`)."""
    codes, exprs = [], []
    for i, a in enumerate(args):
        if hasattr(a, "buffer"):  # a DeviceArray
            codes.append(POINTER)
            exprs.append(f"a[{i}].buffer.ptr")
            for axis in range(a.ndim):
                codes.append("i")
                exprs.append(f"a[{i}].shape[{axis}]")
        else:
            codes.append(_scalar_code(a))
            exprs.append(_scalar_expr(a, i))
    return codes, exprs


def raw_layout(args: Sequence[Any]) -> Layout:
    """Hand-written kernels: arrays as pointers, scalars by their NumPy type."""
    codes = [POINTER if hasattr(a, "buffer") else _scalar_code(a) for a in args]
    exprs = [f"a[{i}].buffer.ptr" if c == POINTER else _scalar_expr(a, i)
             for i, (c, a) in enumerate(zip(codes, args))]
    return codes, exprs


def _generate(layout: Layout, body: str, scope: dict[str, Any],
              params: str = "a") -> tuple[ParamBlock, Any]:
    """A parameter block and a function `f(params)` that packs argument list `a` into it,
    then runs `body`."""
    codes, exprs = layout
    block = ParamBlock(codes)
    scope.update(pack_into=block.struct.pack_into, data=block.data, P=block.address)
    pack = f"    pack_into(data, 0, {', '.join(exprs)})\n" if exprs else ""
    source = f"def f({params}):\n{pack}{body or '    pass'}\n"
    exec(compile(source, "<kiln cuda launch>", "exec"), scope)
    return block, scope["f"]


class Routine:
    """A kernel loaded into one device's context, ready to launch."""

    def __init__(self, context: Context, module: Any, name: str,
                 layout: Callable[[Sequence[Any]], Layout] = kiln_layout,
                 shared_bytes: int = 0) -> None:
        self.context = context
        self.module = module
        self.name = name
        self.function = check(api().cuModuleGetFunction(module, name.encode()),
                              f"cuModuleGetFunction({name})")
        self.layout = layout
        self.shared_bytes = shared_bytes
        if shared_bytes > STATIC_SHARED_LIMIT:  # opt in to the device's larger limit
            attribute = api().CUfunction_attribute
            check(api().cuFuncSetAttribute(
                self.function, attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                shared_bytes), f"cuFuncSetAttribute({name}, {shared_bytes} bytes shared)")
        self._pack: Callable[[Sequence[Any]], None] | None = None

    def launch(self, grid: Dim3, block: Dim3, args: Sequence[Any], stream: Any) -> None:
        """Pack (into this routine's block, laid out at the first launch) and launch on
        `stream` (a kiln `StreamHandle`)."""
        self.call(grid, block, self.pack(args), stream.stream)

    def pack(self, args: Sequence[Any]) -> int:
        """Pack `args` into this routine's parameter block (laid out at the first call);
        the address of its pointer array, which the driver copies from at a launch."""
        if self._pack is None:
            self._block, self._pack = _generate(self.layout(args), "", {})
        self._pack(args)
        return self._block.address

    def call(self, grid: Dim3, block: Dim3, params: int, stream: Any) -> None:
        err, = api().cuLaunchKernel(self.function, *grid, *block, self.shared_bytes, stream,
                                    params, 0)
        if err == INVALID_CONTEXT:  # first launch from this thread: make the context current
            self.context.activate()
            err, = api().cuLaunchKernel(self.function, *grid, *block, self.shared_bytes,
                                        stream, params, 0)
        if err:
            raise RuntimeError(f"cuLaunchKernel({self.name}) failed: {error_name(err)}")

    def _scope(self, grid: Dim3, block: Dim3, stream: Any) -> tuple[dict[str, Any], str]:
        """Names and body of a generated launch of this kernel with parameter block `P` at
        dimensions `g`, `b` (`_bind` completes the names once `P` is known). With the shim,
        the launch record holds the dimensions last launched (`L`): the same ones (the same
        tuples) cost one C call with one argument, others a call that stores them first."""
        scope = {"launch": api().cuLaunchKernel, "F": self.function, "S": stream,
                 "retry": self.call, "G": grid, "B": block, "run": shim(), "L": [grid, block]}
        if scope["run"] is not None:  # one C call with a prebuilt record (`shim`)
            scope["run_at"] = scope["run"].at
            body = ("    if g is L[0] and b is L[1]:\n        err = run(R)\n"
                    "    else:\n        L[0], L[1] = g, b\n"
                    "        err = run_at(R, g[0], g[1], g[2], b[0], b[1], b[2])\n"
                    "    if err:\n        retry(g, b, P, S)")
        else:
            body = (f"    err, = launch(F, *g, *b, {self.shared_bytes}, S, P, 0)\n"
                    "    if err:\n        retry(g, b, P, S)")
        return scope, body

    def _bind(self, scope: dict[str, Any], params: int) -> None:
        """Fill in the parameter block's address (and the shim's launch record)."""
        scope["P"] = params
        if scope["run"] is not None:
            scope["keep_record"], scope["R"] = record(
                self.function, scope["G"], scope["B"], self.shared_bytes, scope["S"], params)

    def launch_target(self, args: Sequence[Any], stream: Any
                      ) -> Callable[[Dim3, Dim3, Sequence[Any]], None]:
        """`f(grid, block, args)`: pack and launch in one generated function, for arguments
        laid out like `args` (the executor's fast path checks that they are)."""
        scope, body = self._scope((1, 1, 1), (1, 1, 1), stream.stream)
        param_block, run = _generate(self.layout(args), body, scope, "g, b, a")
        self._bind(scope, param_block.address)
        scope["keep"] = param_block  # alive as long as the function
        return run

    def prepare_launch(self, grid: Dim3, block: Dim3, args: Sequence[Any],
                       stream: Any) -> Callable[[], None]:
        """A launch with its own parameter block, packed once (see kernel.prepare)."""
        param_block, pack = _generate(self.layout(args), "", {})
        pack(args)
        scope, body = self._scope(grid, block, stream.stream)
        self._bind(scope, param_block.address)
        scope["keep"] = (param_block, tuple(args))
        scope["g"], scope["b"] = grid, block  # the record's own: always the one-argument call
        exec(compile(f"def f():\n{body}\n", "<kiln cuda prepared launch>", "exec"), scope)
        return scope["f"]

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter shutdown the driver may be gone
            api().cuModuleUnload(self.module)


def load_module(context: Context, image: bytes) -> Any:
    """Load a cubin or PTX image into the context (the caller checked the driver first)."""
    context.activate()
    return check(api().cuModuleLoadData(image), "cuModuleLoadData")
