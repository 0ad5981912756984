"""The search indexes beside knowledge_chunk (see knowledge/index.py).

SQLite: an FTS5 table over `search_text`, kept in step by triggers (Django deletes chunks with
DELETE statements, so cascades fire them too). PostgreSQL: a generated tsvector column with a
GIN index, and pgvector's `vector` column with an HNSW index (cosine). The pgvector extension
is created here; the database role needs the right to create it (a superuser, or an
administrator creating it beforehand: docs/deploy.md).
"""

from django.db import migrations

DIMENSIONS = 512  # USE multilingual v3 (and the hashing embedder); another needs a migration

SQLITE = [
    """CREATE VIRTUAL TABLE knowledge_chunk_fts USING fts5(
        search_text, content='knowledge_chunk', content_rowid='id',
        tokenize='unicode61 remove_diacritics 2')""",
    """CREATE TRIGGER knowledge_chunk_fts_insert AFTER INSERT ON knowledge_chunk BEGIN
        INSERT INTO knowledge_chunk_fts(rowid, search_text) VALUES (new.id, new.search_text);
    END""",
    """CREATE TRIGGER knowledge_chunk_fts_delete AFTER DELETE ON knowledge_chunk BEGIN
        INSERT INTO knowledge_chunk_fts(knowledge_chunk_fts, rowid, search_text)
        VALUES ('delete', old.id, old.search_text);
    END""",
    """CREATE TRIGGER knowledge_chunk_fts_update AFTER UPDATE OF search_text ON knowledge_chunk
    BEGIN
        INSERT INTO knowledge_chunk_fts(knowledge_chunk_fts, rowid, search_text)
        VALUES ('delete', old.id, old.search_text);
        INSERT INTO knowledge_chunk_fts(rowid, search_text) VALUES (new.id, new.search_text);
    END""",
]
SQLITE_REVERSE = [
    "DROP TRIGGER IF EXISTS knowledge_chunk_fts_update",
    "DROP TRIGGER IF EXISTS knowledge_chunk_fts_delete",
    "DROP TRIGGER IF EXISTS knowledge_chunk_fts_insert",
    "DROP TABLE IF EXISTS knowledge_chunk_fts",
]
POSTGRES = [
    "CREATE EXTENSION IF NOT EXISTS vector",
    """ALTER TABLE knowledge_chunk ADD COLUMN search_tsv tsvector
        GENERATED ALWAYS AS (to_tsvector('simple', search_text)) STORED""",
    "CREATE INDEX knowledge_chunk_search_tsv ON knowledge_chunk USING gin (search_tsv)",
    f"ALTER TABLE knowledge_chunk ADD COLUMN embedding_vec vector({DIMENSIONS})",
    """CREATE INDEX knowledge_chunk_embedding_hnsw ON knowledge_chunk
        USING hnsw (embedding_vec vector_cosine_ops)""",
]
POSTGRES_REVERSE = [
    "DROP INDEX IF EXISTS knowledge_chunk_embedding_hnsw",
    "ALTER TABLE knowledge_chunk DROP COLUMN IF EXISTS embedding_vec",
    "DROP INDEX IF EXISTS knowledge_chunk_search_tsv",
    "ALTER TABLE knowledge_chunk DROP COLUMN IF EXISTS search_tsv",
]


def forwards(apps, schema_editor):
    statements = {"sqlite": SQLITE, "postgresql": POSTGRES}.get(schema_editor.connection.vendor)
    if statements is None:
        raise RuntimeError("company knowledge needs SQLite or PostgreSQL")
    for sql in statements:
        schema_editor.execute(sql)


def backwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    for sql in {"sqlite": SQLITE_REVERSE, "postgresql": POSTGRES_REVERSE}.get(vendor, []):
        schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [("knowledge", "0001_initial")]

    operations = [migrations.RunPython(forwards, backwards)]
