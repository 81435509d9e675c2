"""graphql-core's validation errors, worded as GitLab (graphql-ruby) words them.

GitLab validates a whole document before running it and answers HTTP 200 with ``errors`` and no
``data``; each error has graphql-ruby's message, ``locations``, a ``path`` (the operation as
``"query getPipeline"`` or a fragment as ``"fragment X"``, then field aliases or names, then the
argument) and ``extensions.code`` (graphql-ruby's ``GraphQL::StaticValidation`` errors,
https://graphql-ruby.org/api-doc/GraphQL/StaticValidation). graphql-core finds the same problems;
only its wording differs, so each message is rewritten here from the node it points at. A message
with no rule below keeps graphql-core's wording (and no ``extensions``).
"""

from __future__ import annotations

import re
from typing import Any

from graphql import (
    ArgumentNode,
    DocumentNode,
    EnumValueNode,
    FieldNode,
    FragmentDefinitionNode,
    GraphQLError,
    InlineFragmentNode,
    Node,
    ObjectFieldNode,
    OperationDefinitionNode,
    VariableDefinitionNode,
    print_ast,
    visit,
)
from graphql.language import Visitor

_UNDEFINED_FIELD = re.compile(r"Cannot query field '(\w+)' on type '(\w+)'\.")
_UNKNOWN_ARGUMENT = re.compile(r"Unknown argument '(\w+)' on field '(\w+)\.(\w+)'\.")
_UNKNOWN_DIRECTIVE_ARGUMENT = re.compile(r"Unknown argument '(\w+)' on directive '@(\w+)'\.")
_UNKNOWN_TYPE = re.compile(r"Unknown type '(\w+)'\.")
_UNKNOWN_INPUT_FIELD = re.compile(r"Field '(\w+)' is not defined by type '(\w+)'\.")
_UNUSED_VARIABLE = re.compile(r"Variable '\$(\w+)' is never used")
_UNUSED_FRAGMENT = re.compile(r"Fragment '(\w+)' is never used\.")
_BAD_ENUM = re.compile(r"Value '(\w+)' does not exist in '(\w+)' enum\.")


class _Paths(Visitor):
    """Each node's graphql-ruby path and the nodes above it, for the nodes errors point at."""

    def __init__(self, wanted: set[int]) -> None:
        super().__init__()
        self.wanted = wanted
        self.found: dict[int, tuple[list[str], list[Node]]] = {}

    def enter(self, node: Node, key: Any, parent: Any, path: Any, ancestors: list[Any]) -> None:
        if id(node) not in self.wanted:
            return
        above = [a for a in ancestors if isinstance(a, Node)]
        self.found[id(node)] = ([p for a in [*above, node] if (p := _segment(a)) is not None], above)


def _segment(node: Node) -> str | None:
    if isinstance(node, OperationDefinitionNode):
        kind = node.operation.value
        return f"{kind} {node.name.value}" if node.name else kind
    if isinstance(node, FragmentDefinitionNode):
        return f"fragment {node.name.value}"
    if isinstance(node, FieldNode):
        return (node.alias or node.name).value
    if isinstance(node, InlineFragmentNode):
        return f"... on {node.type_condition.name.value}" if node.type_condition else "..."
    if isinstance(node, ArgumentNode | ObjectFieldNode):
        return node.name.value
    return None


def _operation_label(above: list[Node]) -> str:
    op = next((a for a in above if isinstance(a, OperationDefinitionNode)), None)
    if op is None:
        return "anonymous query"
    return op.name.value if op.name else f"anonymous {op.operation.value}"


def ruby_errors(document: DocumentNode | None, errors: list[GraphQLError]) -> list[dict[str, Any]]:
    """The ``errors`` list GitLab answers for a document that failed validation with ``errors``."""
    wanted = {id(e.nodes[0]) for e in errors if e.nodes}
    paths = _Paths(wanted)
    if document is not None and wanted:
        visit(document, paths)
    return [_one(e, *paths.found.get(id(e.nodes[0]) if e.nodes else 0, ([], []))) for e in errors]


def _one(error: GraphQLError, path: list[str], above: list[Node]) -> dict[str, Any]:
    out: dict[str, Any] = {"message": error.message}
    if error.locations:
        out["locations"] = [{"line": loc.line, "column": loc.column} for loc in error.locations]
    node = error.nodes[0] if error.nodes else None
    message, extensions = _reword(error.message, node, above)
    if extensions is None:
        return out
    out["message"] = message
    out["path"] = path if not isinstance(node, VariableDefinitionNode | FragmentDefinitionNode) else path[:1]
    out["extensions"] = extensions
    return out


def _reword(message: str, node: Node | None, above: list[Node]) -> tuple[str, dict[str, Any] | None]:
    if m := _UNDEFINED_FIELD.match(message):
        field, type_name = m.groups()
        return (
            f"Field '{field}' doesn't exist on type '{type_name}'",
            {"code": "undefinedField", "typeName": type_name, "fieldName": field},
        )
    if m := _UNKNOWN_ARGUMENT.match(message):
        argument, _type_name, field = m.groups()
        return (
            f"Field '{field}' doesn't accept argument '{argument}'",
            {"code": "argumentNotAccepted", "name": field, "typeName": "Field", "argumentName": argument},
        )
    if m := _UNKNOWN_DIRECTIVE_ARGUMENT.match(message):
        argument, directive = m.groups()
        return (
            f"Directive '{directive}' doesn't accept argument '{argument}'",
            {
                "code": "argumentNotAccepted",
                "name": directive,
                "typeName": "Directive",
                "argumentName": argument,
            },
        )
    if m := _UNKNOWN_INPUT_FIELD.match(message):
        field, type_name = m.groups()
        return (
            f"InputObject '{type_name}' doesn't accept argument '{field}'",
            {
                "code": "argumentNotAccepted",
                "name": type_name,
                "typeName": "InputObject",
                "argumentName": field,
            },
        )
    if m := _UNKNOWN_TYPE.match(message):
        type_name = m.group(1)
        variable = next((a for a in reversed(above) if isinstance(a, VariableDefinitionNode)), None)
        if variable is not None:
            name = variable.variable.name.value
            return (
                f"{type_name} isn't a defined input type (on ${name})",
                {"code": "variableRequiresValidType", "typeName": type_name, "variableName": name},
            )
        return (
            f"No such type {type_name}, so it can't be a fragment condition",
            {"code": "undefinedType", "typeName": type_name},
        )
    if m := _UNUSED_VARIABLE.match(message):
        name = m.group(1)
        return (
            f"Variable ${name} is declared by {_operation_label(above)} but not used",
            {"code": "variableNotUsed", "variableName": name},
        )
    if m := _UNUSED_FRAGMENT.match(message):
        name = m.group(1)
        return (
            f"Fragment {name} was defined, but not used",
            {"code": "useAndDefineFragment", "fragmentName": name},
        )
    if (m := _BAD_ENUM.match(message)) and isinstance(node, EnumValueNode):
        argument = next((a for a in reversed(above) if isinstance(a, ArgumentNode)), None)
        field = next((a for a in reversed(above) if isinstance(a, FieldNode)), None)
        if argument is not None and field is not None:
            value = print_ast(argument.value)
            return (
                f"Argument '{argument.name.value}' on Field '{field.name.value}' has an invalid value "
                f"({value}). Expected type '{m.group(2)}'.",
                {
                    "code": "argumentLiteralsIncompatible",
                    "typeName": "Field",
                    "argumentName": argument.name.value,
                },
            )
    return message, None
