"""The HTTP API and the explorer page over one ``Recommender`` (FastAPI on uvicorn).

Routes: ``POST /recommend`` (one query), ``POST /recommend/batch`` (up to ``LIMITS.batch``),
``GET|POST /similar`` (items like given ones, as ``attnsvm similar``), ``POST /explain`` (the
lens on one history, for the explorer), ``GET /items`` and ``GET /users``
(search, for picking), ``GET /metadata``, ``GET /health``, the explorer at ``/`` and the OpenAPI
schema at ``/openapi.json`` (its pages at ``/docs`` and ``/redoc``, offline: ``api_docs``).

Every problem with a request is a 4xx whose JSON names the field (``ErrorAnswer``): 400 for a
body that is not JSON, 404 for an unknown user or route, 405 for a wrong method, 413 for a body
over ``LIMITS.body_bytes`` (checked before parsing), 415 for a body not sent as JSON, 422 for
everything else (types, sizes, unknown items, ``k`` over the
catalogue). Single queries go through the ``MicroBatcher``, so concurrent ones share a forward
pass.
"""

from __future__ import annotations

import asyncio
import os
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Annotated

from fastapi import FastAPI, Request
from fastapi import Query as QueryParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from attnsvm.errors import ExpectedFailure, expected_message
from attnsvm.lens.extract import LensError
from attnsvm.rec.data.titles import read_item_titles
from attnsvm.serve.api_docs import add_api_docs
from attnsvm.serve.batching import MicroBatcher
from attnsvm.serve.engine import Recommender, RequestError, Resolved
from attnsvm.serve.schemas import (
    LIMITS,
    BatchQuery,
    BatchRecommendations,
    ErrorAnswer,
    ExplainQuery,
    Query,
    Recommendations,
    SimilarItems,
    SimilarParams,
    SimilarQuery,
    field_path,
)

STATIC = resources.files("attnsvm.serve") / "static"
ERRORS = {status: {"model": ErrorAnswer} for status in (400, 404, 413, 415, 422)}


def error_answer(status: int, problems: list[tuple[str, str]]) -> JSONResponse:
    errors = [{"field": field, "message": message} for field, message in problems]
    return JSONResponse(
        {"detail": f"{errors[0]['field']}: {errors[0]['message']}", "errors": errors}, status
    )


class BodyGate:
    """ASGI middleware in front of every route: a POST whose Content-Type is not JSON is a 415,
    and a body over ``limit`` bytes a 413 before anything parses it (by its Content-Length, or
    by counting a chunked body as it arrives); a body within it is passed on whole."""

    def __init__(self, app, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        too_large = error_answer(
            413, [("body", f"the request body exceeds the limit of {self.limit} bytes")]
        )
        headers = dict(scope["headers"])
        if scope["method"] == "POST" and not _is_json(headers.get(b"content-type", b"")):
            given = headers.get(b"content-type", b"none").decode("latin-1")
            problem = f"send a JSON body (Content-Type: application/json), not {given}"
            return await error_answer(415, [("body", problem)])(scope, receive, send)
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await too_large(scope, receive, send)
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                return await too_large(scope, receive, send)
            more = message.get("more_body", False)
        body, delivered = b"".join(chunks), False

        async def replay():
            nonlocal delivered
            if delivered:
                return await receive()  # the client's disconnect, whenever it comes
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await self.app(scope, replay, send)


class CountInside:
    """ASGI middleware: tells the batcher how many requests that will submit queries are inside
    the server, from the moment they arrive (it waits only for those, ``batching``)."""

    SUBMITTING = frozenset({"/recommend", "/recommend/batch", "/similar", "/explain"})

    def __init__(self, app, batcher: MicroBatcher) -> None:
        self.app, self.batcher = app, batcher

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] not in self.SUBMITTING:
            return await self.app(scope, receive, send)
        self.batcher.arrive()
        try:
            return await self.app(scope, receive, send)
        finally:
            self.batcher.leave()


def _is_json(content_type: bytes) -> bool:
    media = content_type.split(b";")[0].strip().lower()
    return media == b"application/json" or media.endswith(b"+json")


def _validation_problems(error: RequestValidationError) -> tuple[int, list[tuple[str, str]]]:
    problems, status = [], 422
    for item in error.errors():
        kind, location = item.get("type", ""), item.get("loc", ())
        if kind == "json_invalid":
            status = 400
            reason = (item.get("ctx") or {}).get("error", "malformed")
            where = location[1] if len(location) > 1 else "?"
            problems.append(("body", f"not valid JSON ({reason} at character {where})"))
        elif tuple(location) == ("body",) and kind in ("missing", "model_attributes_type"):
            problems.append(("body", "a JSON object is required"))
        else:
            message = item.get("msg", "invalid").removeprefix("Value error, ")
            problems.append((field_path(location), message))
    return status, problems


def create_app(
    service: Recommender,
    *,
    micro_batching: bool = True,
    max_batch: int = 64,
    max_wait: float = 0.002,
) -> FastAPI:
    """The app over ``service``; ``micro_batching=False`` runs one forward pass per request."""
    batcher = MicroBatcher(service.recommend, max_batch if micro_batching else 1, max_wait)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        batcher.start()
        yield
        await batcher.stop()

    app = FastAPI(
        title="attnsvm recommender",
        summary=f"{service.run.config.model.name} on {service.run.config.data.dataset}",
        lifespan=lifespan,
        docs_url=None,  # FastAPI's pages load from a CDN; add_api_docs serves them offline
        redoc_url=None,
    )
    add_api_docs(app)
    app.add_middleware(BodyGate, limit=LIMITS.body_bytes)
    app.add_middleware(CountInside, batcher=batcher)  # added last: the outermost, sees them first
    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, error: RequestValidationError) -> JSONResponse:
        return error_answer(*_validation_problems(error))

    @app.exception_handler(RequestError)
    async def _refused(_: Request, error: RequestError) -> JSONResponse:
        return error_answer(error.status, [(error.field or "body", error.message)])

    @app.exception_handler(LensError)
    async def _no_lens(_: Request, error: LensError) -> JSONResponse:
        return error_answer(422, [("run", str(error))])

    @app.exception_handler(ExpectedFailure)
    async def _expected(_: Request, error: ExpectedFailure) -> JSONResponse:
        # any other failure the package marks as the request's (never a 500 for bad input)
        return error_answer(422, [("body", expected_message(error) or str(error))])

    @app.exception_handler(HTTPException)
    async def _http(request: Request, error: HTTPException) -> JSONResponse:
        return error_answer(error.status_code, [(request.url.path, str(error.detail))])

    def render_items(answer: list[tuple[int, float]]) -> list[dict]:
        items = []
        for internal, score in answer:
            item = service.external_item(internal)
            items.append(
                {
                    "item": item,
                    "score": score,
                    "title": service.title(item),
                    "category": service.category(item),
                }
            )
        return items

    def render(query: Resolved, answer: list[tuple[int, float]]) -> dict:
        return {
            "user": query.user,
            "history_length": int(query.items.size),
            "items": render_items(answer),
            "skipped_items": query.skipped,
        }

    @app.post("/recommend", response_model=Recommendations, responses=ERRORS)
    async def recommend(query: Query) -> JSONResponse:
        """Top-k items for a known user (their history's items excluded) or a given history."""
        resolved = service.resolve(query)
        [answer] = await batcher.submit([resolved])
        # a Response is sent as it is: the answer is built to the schema, not checked again
        return JSONResponse(render(resolved, answer))

    @app.post("/recommend/batch", response_model=BatchRecommendations, responses=ERRORS)
    async def recommend_batch(batch: BatchQuery) -> JSONResponse:
        """Several queries in one request and one forward pass; answers in request order."""
        resolved = [service.resolve(q, f"requests[{i}].") for i, q in enumerate(batch.requests)]
        answers = await batcher.submit(resolved)
        results = [render(q, a) for q, a in zip(resolved, answers, strict=True)]
        return JSONResponse({"results": results})

    async def answer_similar(query: SimilarQuery) -> JSONResponse:
        resolved, skipped = service.resolve_similar(query)
        answers = await batcher.submit(resolved)
        results = []
        for asked, answer in zip(resolved, answers, strict=True):
            item = service.external_item(int(asked.items[0]))
            similar = render_items(answer)
            described = {"title": service.title(item), "category": service.category(item)}
            results.append({"item": item, **described, "items": similar})
        return JSONResponse({"results": results, "skipped_items": skipped})

    @app.post("/similar", response_model=SimilarItems, responses=ERRORS)
    async def similar(query: SimilarQuery) -> JSONResponse:
        """Items like each given item, never the item itself: the next-item scores after a
        history of that item alone (method next), or the cosine of the item embeddings."""
        return await answer_similar(query)

    @app.get("/similar", response_model=SimilarItems, responses=ERRORS)
    async def similar_by_url(query: Annotated[SimilarParams, QueryParam()]) -> JSONResponse:
        """``POST /similar`` from a query string: ``/similar?items=50&items=172&k=5``."""
        return await answer_similar(query)

    @app.post("/explain", responses=ERRORS)
    async def explain(query: ExplainQuery) -> dict:
        """The top-k for a query, and per layer and head the attention over its history, the
        token scores toward each recommended item and the Att-SVM reading of the selection."""
        resolved = service.resolve(query)
        [answer] = await batcher.submit([resolved])
        candidates = [internal for internal, _ in answer]
        reading = await asyncio.to_thread(service.explain, resolved, candidates)
        reading["tokens"] = [
            {"item": (item := service.external_item(i)), "title": service.title(item)}
            if i <= service.num_items
            else {"item": None, "title": "[mask]"}  # BERT4Rec's mask token: what it predicts
            for i in reading["tokens"]
        ]
        reading["candidates"] = [service.external_item(i) for i in reading["candidates"]]
        return {**render(resolved, answer), "reading": reading}

    @app.get("/items")
    async def items(
        query: str = QueryParam("", max_length=200), limit: int = QueryParam(20, ge=1, le=200)
    ) -> list[dict]:
        """Items whose id or title contains ``query``, most popular first."""
        return service.find_items(query, limit)

    @app.get("/users")
    async def users(
        query: str = QueryParam("", max_length=200), limit: int = QueryParam(20, ge=1, le=200)
    ) -> list:
        """User ids containing ``query``."""
        return service.find_users(query, limit)

    @app.get("/metadata")
    async def metadata() -> dict:
        """The model, its data, test metrics, catalogue size, heads, and this server's limits."""
        return {
            **service.metadata(),
            "limits": LIMITS.to_dict(),
            "micro_batching": {
                "on": micro_batching,
                "max_batch": batcher.max_batch,
                "max_wait_ms": batcher.max_wait * 1000,
            },
        }

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "pid": os.getpid(), "batches": batcher.stats.to_dict()}

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def explorer() -> str:
        return (STATIC / "explorer.html").read_text()

    return app


def app_from_environment() -> FastAPI:
    """The app ``attnsvm serve --workers N`` starts in each worker process (uvicorn's factory),
    configured by the ``ATTNSVM_SERVE_*`` variables the command sets."""
    environ = os.environ
    titles = None
    if "ATTNSVM_SERVE_TITLES" in environ:
        columns = environ.get("ATTNSVM_SERVE_TITLE_COLUMNS")
        titles = read_item_titles(environ["ATTNSVM_SERVE_TITLES"], columns)
    service = Recommender(Path(environ["ATTNSVM_SERVE_RUN"]), titles)
    return create_app(
        service,
        micro_batching=environ.get("ATTNSVM_SERVE_MICRO_BATCHING", "1") == "1",
        max_batch=int(environ.get("ATTNSVM_SERVE_MAX_BATCH", "64")),
        max_wait=float(environ.get("ATTNSVM_SERVE_MAX_WAIT", "0.002")),
    )
