"""What the HTTP API accepts and answers: the request bodies, their size limits, and the answers.

Requests are validated by pydantic before any work: wrong types (``k`` must be a JSON integer,
item and user ids integers or strings), sizes (``LIMITS``) and unknown fields are a 422 naming
the field. External ids are compared as text, so ``"1193"`` and ``1193`` are the same item.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, model_validator


@dataclass(frozen=True)
class Limits:
    """Sizes one request may have; the body limit is checked before the body is parsed."""

    body_bytes: int = 1 << 20  # 1 MiB: about 170,000 item ids, so 256 histories of 600
    history: int = 2000  # items in one given history (the model reads its last max_len)
    batch: int = 256  # queries in one /recommend/batch request
    k: int = 1000  # items asked for (also at most the catalogue)
    item_list: int = 10_000  # items in one exclude or restrict list
    explain_k: int = 20  # recommendations whose token scores /explain computes

    def to_dict(self) -> dict:
        return asdict(self)


LIMITS = Limits()

ExternalId = StrictInt | StrictStr
ItemList = Annotated[list[ExternalId], Field(max_length=LIMITS.item_list)]
NonEmptyItemList = Annotated[list[ExternalId], Field(min_length=1, max_length=LIMITS.item_list)]


class Query(BaseModel):
    """One recommendation request: a known user *or* a history of external item ids."""

    model_config = ConfigDict(extra="forbid")

    user: ExternalId | None = Field(None, description="external user id of the run's data")
    history: Annotated[list[ExternalId], Field(min_length=1, max_length=LIMITS.history)] | None = (
        Field(None, description="external item ids, oldest first")
    )
    k: StrictInt = Field(10, ge=1, le=LIMITS.k, description="how many items")
    exclude: ItemList = Field(default_factory=list, description="never recommend these")
    restrict: NonEmptyItemList | None = Field(None, description="recommend only among these")
    unknown_items: Literal["error", "skip"] = Field(
        "error",
        description="an item id not in the catalogue: a 422 (error), or left out and listed "
        "in the answer's skipped_items (skip)",
    )

    @model_validator(mode="after")
    def _user_or_history(self) -> Query:
        if (self.user is None) == (self.history is None):
            raise ValueError("give exactly one of 'user' or 'history'")
        return self


class BatchQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    requests: Annotated[list[Query], Field(min_length=1, max_length=LIMITS.batch)]


class ExplainQuery(Query):
    """A query for the explorer: its top ``k`` and every head's reading of the history."""

    k: StrictInt = Field(10, ge=1, le=LIMITS.explain_k, description="recommendations to explain")


class SimilarQuery(BaseModel):
    """Items like each of ``items`` (item-to-item), never the item itself: the next-item scores
    after a history of that item alone, or the cosine of the item embeddings."""

    model_config = ConfigDict(extra="forbid")

    items: Annotated[list[ExternalId], Field(min_length=1, max_length=LIMITS.batch)] = Field(
        description="external item ids; one list of similar items for each"
    )
    k: StrictInt = Field(10, ge=1, le=LIMITS.k, description="how many items for each")
    method: Literal["next", "cosine"] = Field(
        "next",
        description="next: the model's next-item scores after the item alone; cosine: the "
        "cosine of the item embeddings",
    )
    exclude: ItemList = Field(default_factory=list, description="never recommend these")
    restrict: NonEmptyItemList | None = Field(None, description="recommend only among these")
    unknown_items: Literal["error", "skip"] = Field(
        "error",
        description="an item id not in the catalogue: a 422 (error), or left out and listed "
        "in the answer's skipped_items (skip)",
    )


class SimilarParams(SimilarQuery):
    """``GET /similar``'s query string: ``SimilarQuery``'s fields, repeated for lists
    (``?items=50&items=172&k=5``), ``k`` read from its text."""

    k: int = Field(10, ge=1, le=LIMITS.k, description="how many items for each")


class Item(BaseModel):
    item: ExternalId
    score: float
    title: str | None = None
    category: str | None = None


class Recommendations(BaseModel):
    user: ExternalId | None
    history_length: int  # items of the history the model read (before its window cut)
    items: list[Item]
    skipped_items: list[ExternalId] = Field(default_factory=list)


class BatchRecommendations(BaseModel):
    results: list[Recommendations]


class SimilarTo(BaseModel):
    item: ExternalId  # the item asked about
    title: str | None = None
    category: str | None = None
    items: list[Item]


class SimilarItems(BaseModel):
    results: list[SimilarTo]  # in the order of the request's items (each distinct item once)
    skipped_items: list[ExternalId] = Field(default_factory=list)


class ErrorDetail(BaseModel):
    field: str
    message: str


class ErrorAnswer(BaseModel):
    """Every 4xx: ``detail`` is the first problem as ``field: message``; ``errors`` all of them."""

    detail: str
    errors: list[ErrorDetail]


def field_path(location: tuple | list) -> str:
    """``("body", "requests", 3, "history", 2)`` → ``requests[3].history[2]``."""
    path = ""
    for part in location:
        if part == "body" and not path:
            continue
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in ("str", "int") or str(part).startswith(("constrained-", "function-")):
            continue  # pydantic names the union member it tried; the field is already named
        else:
            path += f".{part}" if path else str(part)
    return path or "body"
