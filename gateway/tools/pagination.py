"""Cursor pagination, described once: the ``first``/``after`` arguments and the ``page_info``
result of every paged facet (GitLab GraphQL connections; GitLab's own MCP tools page the same way).

- ``first``: page size, 1..:data:`MAX_PAGE_SIZE`, default :data:`DEFAULT_PAGE_SIZE`.
- ``after``: the previous answer's ``page_info.end_cursor``, passed back as is (GitLab's cursors
  are short opaque strings; anything longer than :data:`MAX_CURSOR_LENGTH` is not one).
- ``page_info``: ``{has_next_page, end_cursor}``; while ``has_next_page`` is true, call again with
  ``after: end_cursor``.

A tool that pages declares ``first: PageSize = first_field(...)`` and
``after: Cursor = after_field(...)`` in its input model, selects
``pageInfo { hasNextPage endCursor }`` in its operation (read into :class:`PageInfoAnswer`) and
returns :func:`page_info` of it; its description ends with :data:`PAGING`.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from gateway.gitlab.operation import GraphQLData
from gateway.tools.arguments import digits_read, optional, schema_extra, shown
from gateway.tools.registry import ToolOutput

DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 100
#: GitLab cursors are short base64 strings; anything much longer is not one.
MAX_CURSOR_LENGTH = 1024

#: The sentence a paged tool's description carries.
PAGING = (
    f"Pages of `first` (default {DEFAULT_PAGE_SIZE}, max {MAX_PAGE_SIZE}); while `page_info.has_next_page` "
    "is true, call again with `after: page_info.end_cursor`."
)


def _cursor(value: Any) -> Any:
    """``after``: a non-empty cursor string as GitLab hands them out."""
    if not isinstance(value, str) or not value or len(value) > MAX_CURSOR_LENGTH:
        raise ValueError(
            "must be the `page_info.end_cursor` string of the previous response (a short non-empty string)"
        )
    return value


def _page_size(value: Any) -> Any:
    """``first``: an integer (digits in a string accepted, as for ids); ``true`` or ``2.0`` are
    refused, not read as 1 or 2 (pydantic's lax mode would). The range is checked after this."""
    value = digits_read(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"must be an integer from 1 to {MAX_PAGE_SIZE}, not {shown(value)}")
    return value


#: ``first``: give it a default and description with :func:`first_field`.
PageSize = Annotated[int, Field(ge=1, le=MAX_PAGE_SIZE), BeforeValidator(_page_size)]
#: ``after``: give it a default and description with :func:`after_field`.
Cursor = Annotated[
    str | SkipJsonSchema[None],
    BeforeValidator(optional(_cursor)),
    Field(json_schema_extra=schema_extra(minLength=1, maxLength=MAX_CURSOR_LENGTH)),
]


def first_field(what: str) -> Any:
    """``first``'s default and description, naming ``what`` is paged."""
    return Field(
        DEFAULT_PAGE_SIZE,
        description=f"Page size for {what}.",  # the schema's minimum, maximum and default say the rest
    )


def after_field(what: str) -> Any:
    """``after``'s default and description, naming ``what`` is paged."""
    return Field(
        None,
        description=(f"Cursor for {what}: the previous page's `page_info.end_cursor`."),
    )


class PageInfo(ToolOutput):
    """Where the selected facet's page ends."""

    model_config = ConfigDict(extra="forbid")

    has_next_page: bool = Field(description="True when another page follows: call again with `after`.")
    end_cursor: str | None = Field(description="Pass as `after` for the next page (null when empty).")


class PageInfoAnswer(GraphQLData):
    """GitLab's ``PageInfo`` (``pageInfo { hasNextPage endCursor }``)."""

    hasNextPage: bool | None = None
    endCursor: str | None = None


def opaque_cursor(position: str) -> str:
    """A listing's own page position (e.g. ``p2.20``) as an ``end_cursor``: opaque, as GitLab's
    are, for listings GitLab pages by number (REST) rather than by cursor."""
    return base64.urlsafe_b64encode(position.encode()).decode().rstrip("=")


def cursor_position(cursor: str) -> str:
    """The position an :func:`opaque_cursor` holds.

    Raises:
        ValueError: ``cursor`` is not one (the caller says which cursor it wanted).
    """
    try:
        return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (UnicodeDecodeError, binascii.Error) as err:
        raise ValueError(cursor) from err


def page_info(answer: PageInfoAnswer | None) -> PageInfo:
    """The ``page_info`` result for GitLab's ``pageInfo`` (absent: no next page)."""
    if answer is None:
        return PageInfo(has_next_page=False, end_cursor=None)
    return PageInfo(has_next_page=bool(answer.hasNextPage), end_cursor=answer.endCursor)
