"""The one way to walk and rewrite IR: `walk`, `Visitor` and `Transformer`.

- `walk(nodes)` iterates every node under a tree, pre-order: for passes that look for
  something (`any(isinstance(n, ir.Call) for n in walk(body))`); `children`,
  `child_exprs`, `child_blocks` and `map_exprs` reach one node's direct parts.
- `Visitor` computes a value per node: a method `visit_<NodeClass>(node)` handles that
  class and its subclasses (a method for a base class, `visit_Stmt`, catches every
  statement without a method of its own); `generic_visit` handles the rest (by default:
  visits the children, returns None). Call `self.visit(child)` to recurse.
- `Transformer` rebuilds a tree bottom-up: `visit_<NodeClass>(node)` is called once the
  node's children were transformed, and returns the replacement (a statement may become a
  list of statements, or None to delete it).
- `@handles(NodeClass, when=predicate)` marks a method as the handler of the nodes of that
  class for which the predicate holds (DaCe's dispatcher); others go to the method named
  for the class. The C emitter's dialects use it.

Dispatch goes through a table per visitor class, filled once per node class (the first
time a node of that class is visited), so a visit costs one dict lookup: not a `getattr`
by name per node, and node classes a plugin adds later are handled like kiln's own. A
visitor class may name its methods with other prefixes (`visit_prefixes`), as the C
emitter's `stmt_<Node>`/`expr_<Node>` do.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Generic, TypeVar

from .nodes import Expr, Stmt

Node = Expr | Stmt
R = TypeVar("R")
Handler = Callable[[Any, Any], Any]
"""An unbound visitor method: `(visitor, node) -> result`."""
Predicate = Callable[[Any, Any], bool]
"""`(visitor, node) -> bool`: whether a `@handles` method takes this node."""

_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields(node_type: type) -> tuple[str, ...]:
    """Names of a node class's fields but `loc` (cached: `dataclasses.fields` is slow)."""
    names = _FIELDS.get(node_type)
    if names is None:
        names = tuple(f.name for f in dataclasses.fields(node_type) if f.name != "loc")
        _FIELDS[node_type] = names
    return names


def children(node: Node) -> Iterator[Node]:
    """Direct sub-expressions and sub-statements of a node, in field order."""
    for name in _fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, (Expr, Stmt)):
            yield value
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, (Expr, Stmt)):
                    yield item


def child_exprs(node: Node) -> list[Expr]:
    """The expressions directly inside a node (fields and lists of them), in field order."""
    return [c for c in children(node) if isinstance(c, Expr)]


def child_blocks(node: Node) -> list[list[Stmt]]:
    """The non-empty statement lists (bodies, branches) directly inside a node."""
    values = (getattr(node, name) for name in _fields(type(node)))
    return [v for v in values if isinstance(v, list) and v and isinstance(v[0], Stmt)]


def map_exprs(node: Node, fn: Callable[[Expr], Expr]) -> None:
    """Replace each expression directly inside `node` by `fn(expr)`, in field order."""
    for name in _fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, Expr):
            setattr(node, name, fn(value))
        elif isinstance(value, list) and value and isinstance(value[0], Expr):
            setattr(node, name, [fn(v) for v in value])


def walk(nodes: list[Stmt] | list[Expr] | Node) -> Iterator[Node]:
    """Every node under `nodes`, pre-order."""
    stack: list[Any] = list(reversed(nodes)) if isinstance(nodes, list) else [nodes]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(list(children(node))))


def handles(node_type: type, when: Predicate | None = None) -> Callable[[Handler], Handler]:
    """Mark a visitor method as the handler of the `node_type` nodes for which `when` holds
    (all of them without `when`); it takes precedence over the method named for the class."""

    def mark(method: Handler) -> Handler:
        method._kiln_handles = (node_type, when)  # type: ignore[attr-defined]
        return method

    return mark


class Visitor(Generic[R]):
    """A computation over IR, one method per node class (see the module docstring)."""

    visit_prefixes: ClassVar[tuple[str, ...]] = ("visit_",)
    """How handler methods are named: `<prefix><NodeClass>`."""
    _named: ClassVar[dict[str, Handler]] = {}
    _guarded: ClassVar[dict[type, list[tuple[Predicate | None, Handler]]]] = {}
    _table: ClassVar[dict[type, Handler]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._build_tables()

    @classmethod
    def _build_tables(cls) -> None:
        """Collect the class's handler methods (the table fills as node classes appear)."""
        named: dict[str, Handler] = {}
        guarded: dict[type, list[tuple[Predicate | None, Handler]]] = {}
        for name in dir(cls):
            for prefix in cls.visit_prefixes:
                if name.startswith(prefix):
                    named[name[len(prefix):]] = getattr(cls, name)
        for klass in cls.__mro__:  # most derived first, so a subclass's handlers win
            for attr in vars(klass).values():
                mark = getattr(attr, "_kiln_handles", None)
                if mark is not None:
                    guarded.setdefault(mark[0], []).append((mark[1], attr))
        cls._named, cls._guarded, cls._table = named, guarded, {}

    def visit(self, node: Node) -> R:
        """Dispatch `node` to its handler and return the handler's result."""
        try:
            handler = self._table[type(node)]
        except KeyError:
            handler = type(self)._resolve(type(node))
        result: R = handler(self, node)
        return result

    @classmethod
    def _resolve(cls, node_type: type) -> Handler:
        """The handler of a node class, found once: the method named for the nearest class
        of its MRO (else `generic_visit`), behind the `@handles` methods that may take it."""
        method: Handler = cls.generic_visit
        for klass in node_type.__mro__:
            if klass.__name__ in cls._named:
                method = cls._named[klass.__name__]
                break
        guards = [g for klass in node_type.__mro__ for g in cls._guarded.get(klass, ())]
        if not guards:
            handler = method
        elif guards[0][0] is None:  # unconditional
            handler = guards[0][1]
        else:
            handler = _guarded_handler(guards, method)
        cls._table[node_type] = handler
        return handler

    def generic_visit(self, node: Node) -> Any:
        """Nodes without a handler: visit their children; the result is None."""
        for child in children(node):
            self.visit(child)
        return None


def _guarded_handler(guards: list[tuple[Predicate | None, Handler]], fallback: Handler
                     ) -> Handler:
    def handle(visitor: Any, node: Any) -> Any:
        for when, method in guards:
            if when is None or when(visitor, node):
                return method(visitor, node)
        return fallback(visitor, node)

    return handle


class Transformer(Visitor[Any]):
    """Rebuilds an IR tree bottom-up, in place: `transform(node)` transforms the node's
    children, then returns what its `visit_<NodeClass>` method makes of it (the node itself
    without one). A statement's method may return a Stmt, a list of Stmts, or None (delete).
    """

    def transform_body(self, body: list[Stmt]) -> list[Stmt]:
        out: list[Stmt] = []
        for stmt in body:
            result = self.transform(stmt)
            if result is None:
                continue
            if isinstance(result, list):
                out.extend(result)
            else:
                out.append(result)
        return out

    def transform(self, node: Any) -> Any:
        for name in _fields(type(node)):
            value = getattr(node, name)
            if isinstance(value, Expr):
                setattr(node, name, self.transform(value))
            elif isinstance(value, list) and value:
                if isinstance(value[0], Stmt):
                    setattr(node, name, self.transform_body(value))
                elif isinstance(value[0], Expr):
                    setattr(node, name, [self.transform(v) for v in value])
        return self.visit(node)

    def generic_visit(self, node: Node) -> Any:
        return node


Visitor._build_tables()
Transformer._build_tables()
