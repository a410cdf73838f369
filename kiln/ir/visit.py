"""Generic traversal of IR trees, so passes only handle the nodes they care about."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from .nodes import Expr, Stmt


def children(node: Expr | Stmt) -> Iterator[Expr | Stmt]:
    """Direct sub-expressions and sub-statements of a node, in field order."""
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if isinstance(value, (Expr, Stmt)):
            yield value
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, (Expr, Stmt)):
                    yield item


def walk(nodes: list[Stmt] | list[Expr] | Expr | Stmt) -> Iterator[Expr | Stmt]:
    """Every node under `nodes`, pre-order."""
    stack: list[Any] = list(reversed(nodes)) if isinstance(nodes, list) else [nodes]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(list(children(node))))


class Transformer:
    """Rebuilds an IR tree bottom-up. Override `expr`/`stmt` hooks per node class.

    A method `visit_<ClassName>(node)` is called after the node's children were
    transformed; for statements it may return a Stmt, a list of Stmts, or None (delete).
    """

    def transform_body(self, body: list[Stmt]) -> list[Stmt]:
        out: list[Stmt] = []
        for stmt in body:
            result = self.transform(stmt)
            if result is None:
                continue
            out.extend(result if isinstance(result, list) else [result])
        return out

    def transform(self, node: Any) -> Any:
        for f in dataclasses.fields(node):
            value = getattr(node, f.name)
            if isinstance(value, Expr):
                setattr(node, f.name, self.transform(value))
            elif isinstance(value, list) and value and isinstance(value[0], Stmt):
                setattr(node, f.name, self.transform_body(value))
            elif isinstance(value, list) and value and isinstance(value[0], Expr):
                setattr(node, f.name, [self.transform(v) for v in value])
        method: Callable[[Any], Any] | None = getattr(self, f"visit_{type(node).__name__}", None)
        return method(node) if method else node
