"""`manage.py reindex_knowledge`: index documents again, after the embedding model changed.

A passage's vector means something only to the model that made it: once
QASSIST_EMBEDDING_MODEL names another model, questions find the older passages by full text
alone. This queues every document with such passages (or, with `--all`, every document) for
the Celery worker, which indexes them again one by one; each keeps answering from its current
passages until its new ones are ready.
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from knowledge import services
from knowledge.embeddings import get_embedder
from knowledge.models import Document
from tenants.models import Tenant


class Command(BaseCommand):
    help = "Queue documents embedded by another model (or all, with --all) to be indexed again."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--tenant", help="only this tenant's documents (its slug)")
        parser.add_argument(
            "--all", action="store_true", help="every document, not only those of another model"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = None
        if options["tenant"]:
            tenant = Tenant.objects.filter(slug=options["tenant"]).first()
            if tenant is None:
                raise CommandError(f"no tenant {options['tenant']!r}")
        embedder = get_embedder().name
        if options["all"]:
            documents = Document.objects.all()
            if tenant is not None:
                documents = documents.filter(tenant=tenant)
        else:
            documents = services.documents_stale(embedder=embedder, tenant=tenant)
        queued = services.documents_reindex(documents=documents)
        what = "document(s)" if options["all"] else f"document(s) not embedded by {embedder}"
        self.stdout.write(f"Queued {queued} {what} to be indexed again.")
