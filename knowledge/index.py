"""The search indexes behind two functions: `fulltext_search` and `vector_search`.

Both search one scope: a tenant's chunks, plus those attached to one conversation, that the
asker may read: `knowledge.access.readable_audiences` decides which audiences, and both indexes
apply that one list (an SQL `IN` on `knowledge_chunk.audience`, a mask over the vectors).

- Full text: words from `knowledge.segment` (Chinese segmented), ranked by BM25 in SQLite's
  FTS5 (a virtual table kept in step with `knowledge_chunk` by triggers) or by `ts_rank_cd`
  over a generated `tsvector` column with a GIN index in PostgreSQL.
- Vectors: in the embedded default, each process holds a tenant's vectors as one matrix
  (reloaded when the tenant's `index_version` moves) and ranks by dot product; in
  PostgreSQL, pgvector's HNSW index over the `embedding_vec` column, with iterative scans so
  that filtering by tenant still returns enough rows. Only vectors of the embedder that
  embedded the question are compared with it (`Chunk.embedder`): after a change of model the
  others are found by full text alone until `manage.py reindex_knowledge` embedded them again.

The SQL objects are made by the app's migrations (`0002_search_indexes`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from django.db import connection, transaction

from knowledge.access import PUBLIC, Reader, readable_audiences
from knowledge.models import Chunk, KnowledgeBase

FTS_TABLE = "knowledge_chunk_fts"
# The pgvector column's dimensions (migration 0002_search_indexes): USE multilingual v3's.
PG_DIMENSIONS = 512


class Hit(NamedTuple):
    chunk_id: int
    score: float  # higher is better; comparable only within one search


def _scope_sql(tenant_id: int, session_id: object, reader: Reader) -> tuple[str, list[Any]]:
    """The WHERE clause of a search's scope (after `c.tenant_id = %s`): the tenant's passages
    (and the conversation's), those `reader` may read."""
    audiences = readable_audiences(tenant_id=tenant_id, reader=reader)
    readable, params = "", []
    if audiences is not None:
        readable = f" AND c.audience IN ({', '.join(['%s'] * len(audiences))})"
        params = list(audiences)
    if session_id is None:
        return "c.session_id IS NULL" + readable, params
    # A UUID as the database stores it (32 hex digits in SQLite, uuid in PostgreSQL).
    value = Chunk._meta.get_field("session").get_db_prep_value(session_id, connection)
    return "(c.session_id IS NULL OR c.session_id = %s)" + readable, [value, *params]


def is_postgres() -> bool:
    return connection.vendor == "postgresql"


# --- full text ------------------------------------------------------------------------------


def fulltext_search(
    *, tenant_id: int, session_id: object, words: list[str], limit: int, reader: Reader = PUBLIC
) -> list[Hit]:
    words = [w.replace('"', "") for w in words if w.replace('"', "")]
    if not words:
        return []
    scope, params = _scope_sql(tenant_id, session_id, reader)
    if is_postgres():
        query = " or ".join(f'"{w}"' for w in words)
        sql = f"""
            SELECT c.id, ts_rank_cd(c.search_tsv, q) AS rank
            FROM knowledge_chunk c, websearch_to_tsquery('simple', %s) q
            WHERE c.search_tsv @@ q AND c.tenant_id = %s AND {scope}
            ORDER BY rank DESC, c.id LIMIT %s
        """  # noqa: S608 - `scope` is one of two fixed strings
        args: list[Any] = [query, tenant_id, *params, limit]
    else:
        query = " OR ".join(f'"{w}"' for w in words)
        sql = f"""
            SELECT c.id, -bm25({FTS_TABLE}) AS rank
            FROM {FTS_TABLE} JOIN knowledge_chunk c ON c.id = {FTS_TABLE}.rowid
            WHERE {FTS_TABLE} MATCH %s AND c.tenant_id = %s AND {scope}
            ORDER BY rank DESC, c.id LIMIT %s
        """  # noqa: S608 - the table name and `scope` are fixed strings
        args = [query, tenant_id, *params, limit]
    with connection.cursor() as cursor:
        cursor.execute(sql, args)
        return [Hit(int(row[0]), float(row[1])) for row in cursor.fetchall()]


def document_frequencies(
    *, tenant_id: int, session_id: object, words: list[str], reader: Reader = PUBLIC
) -> tuple[dict[str, int], int]:
    """In how many of the scope's passages each word occurs, and how many passages there are:
    how rare a question's words are in the documents the asker may read
    (knowledge.subjects.subject)."""
    scope, params = _scope_sql(tenant_id, session_id, reader)
    counts: dict[str, int] = {}
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(*) FROM knowledge_chunk c WHERE c.tenant_id = %s AND {scope}",  # noqa: S608 - `scope` is one of two fixed strings
            [tenant_id, *params],
        )
        total = int(cursor.fetchone()[0])
        for word in dict.fromkeys(w.replace('"', "") for w in words):
            if not word:
                continue
            if is_postgres():
                sql = f"""
                    SELECT count(*) FROM knowledge_chunk c
                    WHERE c.search_tsv @@ websearch_to_tsquery('simple', %s)
                    AND c.tenant_id = %s AND {scope}
                """  # noqa: S608 - `scope` is one of two fixed strings
            else:
                sql = f"""
                    SELECT count(*) FROM {FTS_TABLE} JOIN knowledge_chunk c
                    ON c.id = {FTS_TABLE}.rowid
                    WHERE {FTS_TABLE} MATCH %s AND c.tenant_id = %s AND {scope}
                """  # noqa: S608 - the table name and `scope` are fixed strings
            cursor.execute(sql, [f'"{word}"', tenant_id, *params])
            counts[word] = int(cursor.fetchone()[0])
    return counts, total


# --- vectors --------------------------------------------------------------------------------


def vector_search(
    *,
    tenant_id: int,
    session_id: object,
    vector: np.ndarray,
    embedder: str,
    limit: int,
    cjk: bool | None = None,
    reader: Reader = PUBLIC,
) -> list[Hit]:
    """The passages nearest `vector`, among those `embedder` embedded that `reader` may read;
    `cjk`: only those written mostly in CJK (True) or not (False)."""
    if is_postgres():
        return _pg_vector_search(tenant_id, session_id, vector, embedder, limit, cjk, reader)
    return _memory_vector_search(tenant_id, session_id, vector, embedder, limit, cjk, reader)


def _pg_literal(vector: np.ndarray) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in vector.tolist()) + "]"


def _pg_vector_search(
    tenant_id: int,
    session_id: object,
    vector: np.ndarray,
    embedder: str,
    limit: int,
    cjk: bool | None,
    reader: Reader,
) -> list[Hit]:
    if vector.shape[0] != PG_DIMENSIONS:
        return []  # pg_store_vectors refused to store such vectors: there are none
    scope, params = _scope_sql(tenant_id, session_id, reader)
    if cjk is not None:
        scope += " AND c.cjk" if cjk else " AND NOT c.cjk"
    literal = _pg_literal(vector)
    sql = f"""
        SELECT c.id, 1 - (c.embedding_vec <=> %s::vector) AS similarity
        FROM knowledge_chunk c
        WHERE c.tenant_id = %s AND {scope} AND c.embedder = %s AND c.embedding_vec IS NOT NULL
        ORDER BY c.embedding_vec <=> %s::vector LIMIT %s
    """  # noqa: S608 - `scope` is one of two fixed strings
    with transaction.atomic(), connection.cursor() as cursor:
        # HNSW finds ef_search candidates, then the tenant filter drops others' rows: iterative
        # scans go on until `limit` rows of this tenant are found (pgvector 0.8).
        cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        cursor.execute("SET LOCAL hnsw.ef_search = 100")
        cursor.execute(sql, [literal, tenant_id, *params, embedder, literal, limit])
        hits = [Hit(int(row[0]), float(row[1])) for row in cursor.fetchall()]
    # Relaxed order: nearly sorted; sort it.
    return sorted(hits, key=lambda h: -h.score)


class VectorSizeError(ValueError):
    """The embedder's vectors do not fit PostgreSQL's vector column."""


def pg_store_vectors(chunks: list[Chunk]) -> None:
    """Copy new chunks' vectors into the pgvector column (PostgreSQL only)."""
    if not is_postgres() or not chunks:
        return
    size = len(bytes(chunks[0].embedding)) // 4
    if size != PG_DIMENSIONS:
        raise VectorSizeError(
            f"The embedding model {chunks[0].embedder} gives {size}-dimensional vectors; "
            f"PostgreSQL's index holds {PG_DIMENSIONS}. Set QASSIST_EMBEDDING_MODEL back, or "
            "migrate the vector column (docs/knowledge.md)."
        )
    with connection.cursor() as cursor:
        cursor.executemany(
            "UPDATE knowledge_chunk SET embedding_vec = %s::vector WHERE id = %s",
            [
                (_pg_literal(np.frombuffer(bytes(c.embedding), dtype=np.float32)), c.id)
                for c in chunks
            ],
        )


@dataclass
class _Matrix:
    version: int
    ids: np.ndarray  # int64
    cjk: np.ndarray  # bool
    sessions: np.ndarray  # int64: 0 for the tenant's own, else a number per conversation
    session_numbers: dict[str, int]
    audiences: np.ndarray  # int64: an index into audience_names
    audience_names: list[str]
    vectors: np.ndarray  # (n, dim) float32


_matrices: dict[tuple[int, str], _Matrix] = {}
_matrix_lock = threading.Lock()


def _matrix(tenant_id: int, embedder: str) -> _Matrix:
    """The tenant's vectors made by `embedder`, as one matrix."""
    version = (
        KnowledgeBase.objects.filter(tenant_id=tenant_id).values_list("index_version", flat=True)
    ).first() or 0
    key = (tenant_id, embedder)
    cached = _matrices.get(key)
    if cached is not None and cached.version == version:
        return cached
    with _matrix_lock:
        cached = _matrices.get(key)
        if cached is not None and cached.version == version:
            return cached
        rows = list(
            Chunk.objects.filter(tenant_id=tenant_id, embedder=embedder)
            .order_by("id")
            .values_list("id", "session_id", "embedding", "cjk", "audience")
        )
        numbers: dict[str, int] = {}
        names: dict[str, int] = {}
        for _, session, _, _, audience in rows:
            if session is not None:
                numbers.setdefault(str(session), len(numbers) + 1)
            names.setdefault(audience, len(names))
        if rows:
            ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            sessions = np.fromiter(
                (0 if r[1] is None else numbers[str(r[1])] for r in rows),
                dtype=np.int64,
                count=len(rows),
            )
            vectors = np.vstack([np.frombuffer(bytes(r[2]), dtype=np.float32) for r in rows])
            cjk = np.fromiter((bool(r[3]) for r in rows), dtype=bool, count=len(rows))
            audiences = np.fromiter((names[r[4]] for r in rows), dtype=np.int64, count=len(rows))
        else:
            ids = sessions = audiences = np.zeros(0, dtype=np.int64)
            cjk = np.zeros(0, dtype=bool)
            vectors = np.zeros((0, 1), dtype=np.float32)
        matrix = _Matrix(version, ids, cjk, sessions, numbers, audiences, list(names), vectors)
        _matrices[key] = matrix
        return matrix


def _memory_vector_search(
    tenant_id: int,
    session_id: object,
    vector: np.ndarray,
    embedder: str,
    limit: int,
    cjk: bool | None,
    reader: Reader,
) -> list[Hit]:
    matrix = _matrix(tenant_id, embedder)
    if not len(matrix.ids) or matrix.vectors.shape[1] != vector.shape[0]:
        return []
    scores = matrix.vectors @ vector
    allowed = matrix.sessions == 0
    own = matrix.session_numbers.get(str(session_id)) if session_id is not None else None
    if own is not None:
        allowed |= matrix.sessions == own
    audiences = readable_audiences(tenant_id=tenant_id, reader=reader)
    if audiences is not None:
        codes = [i for i, name in enumerate(matrix.audience_names) if name in set(audiences)]
        allowed &= np.isin(matrix.audiences, codes)
    if cjk is not None:
        allowed &= matrix.cjk == cjk
    scores = np.where(allowed, scores, -np.inf)
    n = min(limit, int(allowed.sum()))
    if n <= 0:
        return []
    top = np.argpartition(-scores, n - 1)[:n]
    top = top[np.argsort(-scores[top])]
    return [Hit(int(matrix.ids[i]), float(scores[i])) for i in top]


def forget_matrices() -> None:
    """Drop every tenant's vectors held in memory (tests, and after a rebuild)."""
    with _matrix_lock:
        _matrices.clear()
