"""The status array through which compiled kernels report run-time checks.

A program with `checks` has one more kernel parameter, last: an `i32[STATUS_WORDS]` array,
zero at the launch. A failing check writes its code (`k + 1` for `checks[k]`) to word 0;
a check with details (`RuntimeCheck.details`) first claims word 0 with a compare-and-swap
and then writes the failing index, its extent and the thread to the words named in
`WORDS`, which the executor reads at the launch's next synchronisation
(`kiln.runtime.status`). Passes that add checks (recursion depth, bounds) share one
array: `Status` finds the one a previous pass added.
"""

from __future__ import annotations

from .. import nodes as ir
from ..types import ArrayType, i32
from ..visit import walk
from .common import all_functions

STATUS_TYPE = ArrayType(i32, 1)
WORDS = ir.STATUS_WORDS_NAMES
STATUS_WORDS = len(WORDS)


def fresh(name: str, taken: set[str]) -> str:
    """`name`, or `name_N` where that is taken; the result is taken from now on."""
    candidate, n = name, 1
    while candidate in taken:
        candidate, n = f"{name}_{n}", n + 1
    taken.add(candidate)
    return candidate


def callees(func: ir.Function) -> set[str]:
    return {n.func for n in walk(func.body) if isinstance(n, ir.Call)}


class Status:
    """The program's status array: a kernel parameter passed down to every function that
    reaches a reporter (`thread`), and the checks whose codes reporters write to it."""

    def __init__(self, program: ir.Program) -> None:
        self.program = program
        params = program.kernel.params
        self.existing = bool(program.checks) and params[-1].type == STATUS_TYPE
        if self.existing:
            self.name = params[-1].name
        else:
            used = {f.name for f in all_functions(program)}
            for f in all_functions(program):
                used |= {*f.locals, *(p.name for p in f.params)}
            self.name = fresh("kiln_status", used)
        self.reporters: set[str] = set()

    def var(self) -> ir.Var:
        return ir.Var(STATUS_TYPE, self.name)

    def add(self, check: ir.RuntimeCheck) -> int:
        """The code (1-based) that reports `check`."""
        self.program.checks.append(check)
        return len(self.program.checks)

    def thread(self) -> None:
        """Add the status parameter to the kernel (last) and to every function that reaches a
        reporter, and pass it in every call of those (where it is not passed yet)."""
        program = self.program
        needs = set(self.reporters)
        grown = True
        while grown:
            callers = {f.name for f in program.functions if callees(f) & needs}
            grown = not callers <= needs
            needs |= callers
        for func in all_functions(program):
            has = any(p.name == self.name for p in func.params)
            if (func.name in needs or func.is_kernel) and not has:
                func.params.append(ir.Param(self.name, STATUS_TYPE))
            for call in walk(func.body):
                if isinstance(call, ir.Call) and call.func in needs and not any(
                        isinstance(a, ir.Var) and a.name == self.name for a in call.args):
                    call.args.append(ir.Var(STATUS_TYPE, self.name))
