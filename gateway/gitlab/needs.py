"""What an operation needs of GitLab, declared beside it, and the document chosen per instance.

GitLab validates a whole GraphQL document before it runs any of it: one field or argument an
instance lacks fails the whole request (graphql-ruby's ``Field 'x' doesn't exist on type 'Y'``).
So each :class:`~gateway.gitlab.operation.Operation` declares the schema coordinates it uses that
not every supported GitLab has (:class:`Need`: the GitLab version and edition that brought it) and
what to do without one (:data:`Without`):

- ``drop``: send the document without that field (the value is null; the tool says from which
  version it is filled);
- ``by_iid``: address the pipeline by ``iid`` (``Project.pipeline(iid:)``) instead of ``id``;
- ``elsewhere``: do not send the operation; the tool gets the same data another way (REST);
- ``unsupported``: the tool, or the option the need names, cannot be served: refused with reason
  ``unsupported_by_gitlab`` and the version or edition it needs.

:func:`choose` turns an instance's version and edition into a :class:`Choice` once per operation
and instance (cached on the :class:`~gateway.gitlab.instance.InstanceInfo`). A derived document
is named ``<operation>[<edits>]`` (``get_pipeline[-exitCode,iid]``): the name says how it is made
from the operation's file, so :func:`derive_document` needs nothing else, and the metrics label
which document was sent. Derivation parses and prints with graphql-core, once per name, only on
GitLabs older than the newest document.

While the version is unknown (no caller with a token yet), every need counts as met: the newest
documents are sent, and a refusal makes the gateway read the version and choose again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache, cached_property
from typing import Literal

from gateway.gitlab.instance import Edition, InstanceInfo, Release, release_text

Without = Literal["drop", "by_iid", "elsewhere", "unsupported"]

_DERIVED = re.compile(r"^(?P<base>[a-z0-9_]+)\[(?P<edits>[^\]]*)\]$")


@dataclass(frozen=True)
class Need:
    """A schema coordinate an operation uses that not every supported GitLab has.

    Attributes:
        coordinate: GitLab's schema coordinate (``CiJob.exitCode``, ``Project.pipeline(id:)``).
        since: the first GitLab release that has it (where GitLab's docs leave a range, its end).
        edition: ``Edition.EE`` when only GitLab EE has it.
        without: what the gateway does on a GitLab without it (see the module).
        note: what a caller sees there, for the docs and the start-up line (``exit_code is null``).
        option: the tool argument that needs it, when only that argument does (checked by the
            tool with :meth:`Operation.check_option`); the document is the same.
        differs: False when the caller gets the same result without it (one more request).
    """

    coordinate: str
    since: Release | None = None
    edition: Edition | None = None
    without: Without = "unsupported"
    note: str = ""
    option: str | None = None
    differs: bool = True

    @property
    def field(self) -> str:
        """The field's name in the document (``exitCode`` of ``CiJob.exitCode``)."""
        return self.coordinate.partition(".")[2].partition("(")[0]

    def matches(self, reported: str) -> bool:
        """Whether GitLab's refusal names this coordinate (``Repository.commit`` or
        ``pipeline(id:)``, as :func:`gateway.gitlab.answers.schema_mismatch` reads them)."""
        mine = self.coordinate
        return mine == reported or mine.endswith("." + reported) or mine.partition("(")[0] == reported

    def met_by(self, info: InstanceInfo) -> bool:
        """Whether ``info``'s GitLab has it (True while the version is unknown)."""
        if info.release is None:
            return True
        if self.edition is Edition.EE and info.edition is Edition.CE:
            return False
        return self.since is None or info.release >= self.since

    @property
    def needed(self) -> str:
        """``GitLab 17.9 or later``, ``GitLab EE 18.4 or later``, ``GitLab EE``."""
        edition = " EE" if self.edition is Edition.EE else ""
        since = f" {release_text(self.since)} or later" if self.since else ""
        return f"GitLab{edition}{since}"

    @property
    def needed_in_words(self) -> str:
        """:attr:`needed` for a message: ``GitLab Enterprise Edition (EE) 18.4 or later``."""
        edition = " Enterprise Edition (EE)" if self.edition is Edition.EE else ""
        since = f" {release_text(self.since)} or later" if self.since else ""
        return f"GitLab{edition}{since}"


@dataclass(frozen=True)
class Choice:
    """What to send to one instance.

    Attributes:
        document: the operation name to send (a derived one for an older GitLab).
        by_iid: the pipeline is addressed by ``$pipelineIid`` instead of ``$pipelineId``.
        missing: the needs this instance does not meet (all of them, for notes and messages).
    """

    document: str
    by_iid: bool
    missing: tuple[Need, ...]

    @cached_property
    def refused(self) -> Need | None:
        """The first missing need that keeps the operation from being sent, if any (found once:
        a choice is cached per instance and read on every call)."""
        return strongest(
            n for n in self.missing if n.without in ("elsewhere", "unsupported") and not n.option
        )

    def missing_option(self, option: str) -> Need | None:
        return next((n for n in self.missing if n.option == option), None)


def strongest(needs: Iterable[Need]) -> Need | None:
    """The need with the newest version among ``needs`` (what to name as "needs …")."""
    return max(needs, key=lambda n: (n.since or (0, 0), n.edition is not None), default=None)


def choose(name: str, needs: tuple[Need, ...], info: InstanceInfo) -> Choice:
    """The :class:`Choice` of operation ``name`` declaring ``needs`` for ``info``'s GitLab."""
    return _choice(name, tuple(n for n in needs if not n.met_by(info)))


def choose_lacking(name: str, needs: tuple[Need, ...], reported: tuple[str, ...]) -> Choice | None:
    """The choice for a GitLab that refused ``reported`` coordinates while its version is unknown
    (a caller without a token is not told it): None unless each is a declared need."""
    lacking = tuple(n for n in needs if any(n.matches(r) for r in reported))
    if not reported or not all(any(n.matches(r) for n in needs) for r in reported):
        return None
    return _choice(name, lacking)


def _choice(name: str, missing: tuple[Need, ...]) -> Choice:
    edits = sorted({f"-{n.field}" for n in missing if n.without == "drop" and not n.option})
    by_iid = any(n.without == "by_iid" for n in missing)
    if by_iid:
        edits.append("iid")
    document = f"{name}[{','.join(edits)}]" if edits else name
    return Choice(document, by_iid, missing)


def is_derived(name: str) -> bool:
    return "[" in name


def base_name(name: str) -> str:
    """``get_pipeline`` of ``get_pipeline[-exitCode]``."""
    return name.partition("[")[0]


@cache
def derive_document(name: str, text: str) -> str:
    """The document ``name`` (``<operation>[<edits>]``) made from its operation's ``text``.

    Edits: ``-<field>`` removes every selection of that field (and fragments no longer spread);
    ``iid`` turns ``pipeline(id: $pipelineId)`` into ``pipeline(iid: $pipelineIid)`` and the
    variable's type into ``ID``.

    Raises:
        ValueError: ``name`` is not a derived name.
    """
    from graphql import (  # only GitLabs older than the newest document need it
        ArgumentNode,
        DocumentNode,
        FieldNode,
        FragmentDefinitionNode,
        FragmentSpreadNode,
        NamedTypeNode,
        NameNode,
        NonNullTypeNode,
        VariableDefinitionNode,
        VariableNode,
        Visitor,
        parse,
        print_ast,
        visit,
    )
    from graphql.language.visitor import REMOVE

    match = _DERIVED.match(name)
    if match is None:
        raise ValueError(f"not a derived document name: {name!r}")
    edits = [e for e in match.group("edits").split(",") if e]
    drops = {e[1:] for e in edits if e.startswith("-")}
    by_iid = "iid" in edits

    class Edit(Visitor):
        def enter_field(self, node: FieldNode, *_: object) -> object:
            if node.name.value in drops:
                return REMOVE
            if by_iid and node.name.value == "pipeline" and node.arguments:
                args = tuple(
                    ArgumentNode(
                        name=NameNode(value="iid"), value=VariableNode(name=NameNode(value="pipelineIid"))
                    )
                    if a.name.value == "id"
                    else a
                    for a in node.arguments
                )
                return FieldNode(
                    alias=node.alias,
                    name=node.name,
                    arguments=args,
                    directives=node.directives,
                    selection_set=node.selection_set,
                )
            return None

        def enter_variable_definition(self, node: VariableDefinitionNode, *_: object) -> object:
            if not (by_iid and node.variable.name.value == "pipelineId"):
                return None
            named = NamedTypeNode(name=NameNode(value="ID"))
            return VariableDefinitionNode(
                variable=VariableNode(name=NameNode(value="pipelineIid")),
                type=NonNullTypeNode(type=named) if isinstance(node.type, NonNullTypeNode) else named,
                default_value=node.default_value,
                directives=node.directives,
            )

    class Uses(Visitor):
        """The fragments spread and the variables used in a document."""

        def __init__(self) -> None:
            super().__init__()
            self.spread: set[str] = set()
            self.used: set[str] = set()

        def enter_fragment_spread(self, node: FragmentSpreadNode, *_: object) -> None:
            self.spread.add(node.name.value)

        def enter_variable(self, node: VariableNode, _key: object, parent: object, *_: object) -> None:
            if not isinstance(parent, VariableDefinitionNode):
                self.used.add(node.name.value)

    document: DocumentNode = visit(parse(text, no_location=True), Edit())
    while True:  # a fragment whose only spread was dropped would fail validation
        uses = Uses()
        visit(document, uses)
        kept = tuple(
            d
            for d in document.definitions
            if not isinstance(d, FragmentDefinitionNode) or d.name.value in uses.spread
        )
        if len(kept) == len(document.definitions):
            break
        document = DocumentNode(definitions=kept)

    class Unused(Visitor):
        # A variable only a dropped field used would fail validation ("never used").
        def enter_variable_definition(self, node: VariableDefinitionNode, *_: object) -> object:
            return None if node.variable.name.value in uses.used else REMOVE

    return print_ast(visit(document, Unused()))


@cache
def declared_variables(document: str) -> frozenset[str]:
    """The variables a derived document declares (the tool's others are not sent)."""
    head = document.partition("{")[0]
    return frozenset(re.findall(r"\$(\w+)\s*:", head))
