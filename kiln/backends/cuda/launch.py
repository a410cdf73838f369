"""Loaded kernels and the launch fast path.

A `Routine` packs a launch's arguments into one preallocated parameter block, laid out once
per specialisation (from the first launch's argument types) by a generated packing
function, and hands the driver a fixed array of pointers into that block. The driver copies
parameters at launch, so the block is reused immediately; a launch never synchronises.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .driver import Context, api, check, error_name

Dim3 = tuple[int, int, int]
POINTER = "P"


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
    return {"l": "q", "L": "Q"}.get(dtype.char, dtype.char)  # "<l" packs 4 bytes, not 8


def kiln_packer(args: Sequence[Any]) -> tuple[ParamBlock, Callable[[Sequence[Any]], None]]:
    """A block and a packing function for kiln's ABI: arrays as pointer + i32 dimensions,
    scalars by value (see `kiln.codegen.abi`)."""
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
            exprs.append(f"a[{i}]")
    return _packer(codes, exprs)


def raw_packer(args: Sequence[Any]) -> tuple[ParamBlock, Callable[[Sequence[Any]], None]]:
    """Hand-written kernels: arrays as pointers, scalars by their NumPy type."""
    codes = [POINTER if hasattr(a, "buffer") else _scalar_code(a) for a in args]
    exprs = [f"a[{i}].buffer.ptr" if c == POINTER else f"a[{i}]" for i, c in enumerate(codes)]
    return _packer(codes, exprs)


def _packer(codes: list[str], exprs: list[str]) -> tuple[ParamBlock,
                                                         Callable[[Sequence[Any]], None]]:
    block = ParamBlock(codes)
    source = f"def pack(a):\n    pack_into(data, 0, {', '.join(exprs)})\n" if exprs else \
        "def pack(a):\n    pass\n"
    scope: dict[str, Any] = {"pack_into": block.struct.pack_into, "data": block.data}
    exec(compile(source, "<kiln cuda packer>", "exec"), scope)
    return block, scope["pack"]


class Routine:
    """A kernel loaded into one device's context, ready to launch."""

    def __init__(self, context: Context, module: Any, name: str,
                 packer: Callable[[Sequence[Any]], tuple[ParamBlock, Any]] = kiln_packer,
                 shared_bytes: int = 0) -> None:
        self.context = context
        self.module = module
        self.name = name
        self.function = check(api().cuModuleGetFunction(module, name.encode()),
                              f"cuModuleGetFunction({name})")
        self._make_packer = packer
        self._pack: Callable[[Sequence[Any]], None] | None = None
        self._params = 0
        self.shared_bytes = shared_bytes
        self._launch = api().cuLaunchKernel

    def launch(self, grid: Dim3, block: Dim3, args: Sequence[Any], stream: Any) -> None:
        pack = self._pack
        if pack is None:
            param_block, pack = self._make_packer(args)
            self._block, self._params, self._pack = param_block, param_block.address, pack
        self.context.activate()
        pack(args)
        err, = self._launch(self.function, grid[0], grid[1], grid[2], block[0], block[1],
                            block[2], self.shared_bytes, stream, self._params, 0)
        if err:
            raise RuntimeError(f"cuLaunchKernel({self.name}) failed: {error_name(err)}")

    def prepared(self, grid: Dim3, block: Dim3, args: Sequence[Any],
                 stream: Any) -> Callable[[], None]:
        """A launch with its own parameter block, packed once (see kernel.prepare)."""
        param_block, pack = self._make_packer(args)
        pack(args)
        call = functools.partial(self._launch, self.function, *grid, *block, self.shared_bytes,
                                 stream, param_block.address, 0)
        keep = (param_block, tuple(args), self)  # the block and arrays outlive the closure

        def launch() -> None:
            err, = call()
            if err:
                raise RuntimeError(f"cuLaunchKernel({keep[2].name}) failed: {error_name(err)}")

        return launch

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter shutdown the driver may be gone
            api().cuModuleUnload(self.module)


def load_module(context: Context, image: bytes) -> Any:
    """Load a cubin or PTX image into the context (the caller checked the driver first)."""
    context.activate()
    return check(api().cuModuleLoadData(image), "cuModuleLoadData")
