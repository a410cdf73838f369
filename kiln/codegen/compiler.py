"""The compiler part of C-family backends: the shared emitter renders the source, the
backend's `finish` turns it into a binary (or leaves that to its loader)."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar

from ..framework.backend import CompiledKernel, Compiler
from ..ir.abi import kernel_abi
from ..ir.intrinsics import Spelling
from ..ir.nodes import Program
from ..options import KernelOptions
from .emitter import CEmitter

if TYPE_CHECKING:
    from ..runtime.device import Device


class SourceCompiler(Compiler):
    """`emitter` renders a lowered program; the entry point's name comes from the emitter
    and the parameter layout from the program (nobody parses generated source)."""

    emitter: ClassVar[type[CEmitter]]

    def generate_source(self, program: Program) -> str:
        return self.emitter().emit(program)

    def intrinsic_implementation(self, name: str) -> Spelling:
        return self.emitter.implementation(name)

    def compile(self, program: Program, device: Device,
                options: KernelOptions) -> CompiledKernel:
        emitter = self.emitter()
        source = emitter.emit(program)
        kernel = CompiledKernel(emitter.entry_name, tuple(kernel_abi(program)), source,
                                options=options,
                                metadata=MappingProxyType({"kernel": program.kernel.name}))
        return self.finish(kernel, device)

    def finish(self, kernel: CompiledKernel, device: Device) -> CompiledKernel:
        """Compile the source to a binary where the compiler does it (default: the loader
        builds the binary, e.g. per block shape or through a compile cache)."""
        return kernel
