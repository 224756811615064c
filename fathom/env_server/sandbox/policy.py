"""The compile policy: RestrictedPython's, plus augmented assignment on items and attributes.

Model-written code leans on `counts[word] += 1`; stock RestrictedPython refuses it. The
rewrite routes it through the same write/read guards as plain assignment:
`x[k] += v` becomes `_aug_item_(x, k, '+=', v)` and `o.a += v` becomes `_aug_attr_(o, 'a', '+=', v)`.
The right-hand side is evaluated before the current value is read, which differs from
CPython only when evaluating it mutates that same item.
"""

from __future__ import annotations

import ast
from typing import Any

from RestrictedPython.transformer import INSPECT_ATTRIBUTES, IOPERATOR_TO_STR, RestrictingNodeTransformer, copy_locations

from fathom.env_server.sandbox.guards import check_name, guarded_getattr, guarded_getitem, guarded_inplacevar, guarded_write


class SandboxPolicy(RestrictingNodeTransformer):
    def visit_AugAssign(self, node: ast.AugAssign) -> Any:
        target = node.target
        if not isinstance(target, (ast.Attribute, ast.Subscript)):
            return super().visit_AugAssign(node)
        op = ast.Constant(IOPERATOR_TO_STR[type(node.op)])
        rhs = self.visit(node.value)
        obj = self.visit(target.value)
        if isinstance(target, ast.Attribute):
            if target.attr.startswith("_") or target.attr in INSPECT_ATTRIBUTES:
                self.error(node, f'"{target.attr}" is an invalid attribute name.')
            call = ast.Call(ast.Name("_aug_attr_", ast.Load()), [obj, ast.Constant(target.attr), op, rhs], [])
        else:
            key = self.visit(target.slice)
            call = ast.Call(ast.Name("_aug_item_", ast.Load()), [obj, key, op, rhs], [])
        new = ast.Expr(call)
        for n in ast.walk(new):
            if "lineno" in n._attributes and not hasattr(n, "lineno"):
                copy_locations(n, node)
        return new


def aug_item(ob: Any, key: Any, op: str, value: Any) -> None:
    guarded_write(ob)[key] = guarded_inplacevar(op, guarded_getitem(ob, key), value)


def aug_attr(ob: Any, name: str, op: str, value: Any) -> None:
    check_name(name)
    setattr(guarded_write(ob), name, guarded_inplacevar(op, guarded_getattr(ob, name), value))
