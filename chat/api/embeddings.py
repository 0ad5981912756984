"""`POST /v1/embeddings`: texts embedded with the embedding model of company knowledge
(`knowledge.embeddings.get_embedder()`, USE multilingual v3 by default), admitted and counted
like a completion (`chat.admission.embeddings_admit`).

Every input is bounded before any work that grows with it, cheapest first: characters per
text and per request as the body is read, then the embedding model's own tokens per text (its
maximum, `Embedder.max_tokens`) and per request, and only then admission and the model. A text
over the model's maximum is refused by name, as OpenAI refuses one over its context, rather
than embedded from its beginning without a word."""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

import numpy as np
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.conf import settings
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from pydantic import ValidationError

from chat import admission
from chat.admission import Refused
from chat.api import schemas
from chat.api.endpoint import (
    ApiError,
    _json,
    _principal,
    _refused,
    _validation_error,
    api_endpoint,
    api_json,
)
from knowledge.embeddings import Embedder, EmbeddingError, get_embedder

MAX_INPUT_CHARS = 16_384  # one text; beyond any text the model's maximum lets through
MAX_REQUEST_CHARS = 2_000_000  # all the texts of one request
MAX_REQUEST_TOKENS = 300_000  # the embedding model's tokens of one request (OpenAI's bound)


def served_embedding_model() -> str:
    """The embedding model's id: its registry name (a .gguf path's file name without it)."""
    name = str(settings.QASSIST_EMBEDDING_MODEL)
    return Path(name).stem if name.endswith(".gguf") else name


@api_endpoint(methods=("POST",))
async def embeddings(request: HttpRequest) -> HttpResponseBase:
    body = _parse(request)
    if body.model != served_embedding_model():
        raise ApiError(
            404,
            f"The model '{body.model}' does not exist; this server embeds with "
            f"'{served_embedding_model()}'.",
            code="model_not_found",
            param="model",
        )
    embedder = await _embedder()
    if body.dimensions is not None and body.dimensions != embedder.dim:
        raise ApiError(
            400,
            f"dimensions {body.dimensions} is not supported: this model's vectors have "
            f"{embedder.dim} (leave dimensions out).",
            code="unsupported_parameter",
            param="dimensions",
        )
    texts = body.texts
    # The model's own tokenizer may be pure Python: off the event loop.
    counts = await sync_to_async(embedder.count_tokens, thread_sensitive=False)(texts)
    _check_tokens(body, counts, embedder.max_tokens)
    try:
        ticket = await database_sync_to_async(admission.embeddings_admit)(
            principal=_principal(request), texts=texts
        )
    except Refused as exc:
        raise _refused(exc) from None
    started = time.monotonic()
    served = False
    try:
        # Not on the thread the database calls share: embedding takes a while.
        vectors = await sync_to_async(embedder.embed_passages, thread_sensitive=False)(texts)
        served = True
    finally:
        await database_sync_to_async(admission.embeddings_settle)(
            ticket=ticket, served=served, latency_ms=round((time.monotonic() - started) * 1000)
        )
    return _json(
        schemas.EmbeddingList(
            object="list",
            data=[
                schemas.Embedding(
                    object="embedding", index=i, embedding=_encoded(v, body.encoding_format)
                )
                for i, v in enumerate(vectors)
            ],
            model=served_embedding_model(),
            usage=schemas.EmbeddingUsage(prompt_tokens=ticket.tokens, total_tokens=ticket.tokens),
        )
    )


def _parse(request: HttpRequest) -> schemas.EmbeddingRequest:
    data = api_json(request)
    if not isinstance(data, dict):
        raise ApiError(400, "The request body must be a JSON object.", code="invalid_json")
    try:
        body = schemas.EmbeddingRequest.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(exc) from None
    total = 0
    for i, text in enumerate(body.texts):
        where = _where(body, i)
        if len(text) > MAX_INPUT_CHARS:
            raise ApiError(
                400,
                f"'{where}' is {len(text):,} characters long; one text may have at most "
                f"{MAX_INPUT_CHARS:,}: split it.",
                code="context_length_exceeded",
                param=where,
            )
        if not text.strip():
            raise ApiError(400, f"'{where}' is empty: each text needs characters.", param=where)
        if "\x00" in text:
            raise ApiError(400, f"'{where}' contains a NUL character.", param=where)
        total += len(text)
    if total > MAX_REQUEST_CHARS:
        raise ApiError(
            413,
            f"The texts hold {total:,} characters in all; one request may hold at most "
            f"{MAX_REQUEST_CHARS:,}: send them in several requests.",
            code="request_too_large",
            param="input",
        )
    return body


def _where(body: schemas.EmbeddingRequest, i: int) -> str:
    return "input" if isinstance(body.input, str) else f"input[{i}]"


def _check_tokens(body: schemas.EmbeddingRequest, counts: list[int], maximum: int) -> None:
    """Refuse a text longer than the model embeds (OpenAI's 400 for a text over its context),
    and a request of more tokens in all than one request may hold."""
    for i, tokens in enumerate(counts):
        if tokens > maximum:
            where = _where(body, i)
            raise ApiError(
                400,
                f"'{where}' is {tokens:,} tokens long (or more); this embedding model reads at "
                f"most {maximum:,} tokens of a text: split it.",
                code="context_length_exceeded",
                param=where,
            )
    if sum(counts) > MAX_REQUEST_TOKENS:
        raise ApiError(
            413,
            f"The texts are {sum(counts):,} tokens in all; one request may hold at most "
            f"{MAX_REQUEST_TOKENS:,}: send them in several requests.",
            code="request_too_large",
            param="input",
        )


async def _embedder() -> Embedder:
    try:
        embedder: Embedder = await sync_to_async(get_embedder, thread_sensitive=False)()
    except (FileNotFoundError, EmbeddingError) as exc:
        raise ApiError(
            503,
            f"The embedding model is not available on this server: {exc}",
            type="server_error",
            code="unavailable",
            retry_after=60,
        ) from None
    return embedder


def _encoded(vector: Any, encoding: str) -> list[float] | str:
    values = np.asarray(vector, dtype="<f4")
    if encoding == "base64":
        return base64.b64encode(values.tobytes()).decode("ascii")
    floats: list[float] = values.tolist()
    return floats
