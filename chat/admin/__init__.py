"""The chat's admin pages, one module per thing staff look after (Django registers them when
this package is imported):

- records: conversations, messages and content reads (read-only records)
- cached_replies: cached replies, the CSV import and export, candidates and their drafts
- batches: batches of prompts and their results

shared holds what they have in common (who may read content, read-only records, progress).
"""

from chat.admin import batches, cached_replies, records

__all__ = ["batches", "cached_replies", "records"]
