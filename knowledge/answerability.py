"""Whether the passages found for a question answer it, decided before the model is asked.

A question the documents do not answer still retrieves passages — the nearest ones, on the
neighbouring subject (a funeral finds parental leave, a gym the meal subsidy) — and a small
model given them borrows their figures. Retrieval's own score cannot tell these questions apart
(the best passage of an unanswerable question scores as high as most answerable ones:
docs/BENCHMARKS.md). What does is whether the question's *subject* is in the passages:

- `coverage`: the best sentence's share of the question's subject, each term weighted by how
  rare it is in the tenant's documents (a term they never use — gym, funeral — weighs most),
  its heading counted in;
- `rarest_present`: the question's rarest subject term occurs in a passage at all;
- `similarity`: the embedder's closest sentence to the question (across languages, where
  words do not match);
- `retrieval`: the best passage's similarity, as retrieval scored it;
- `model_yes`: optionally, the model's own probability of "yes" to "do the passages answer
  the question?" (bench/rag_eval measures it; see docs/BENCHMARKS.md for why the product
  does not ask it).

They are fused by a logistic model (`WEIGHTS`, fitted on bench/rag_eval's tuning half, never on
its held-out half) into the probability that the passages answer the question; below
`THRESHOLD`, the question is declined at once — "The documents don't cover this", with the
closest sentence offered — at the cost of no generation.

Pure: no database, no model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from knowledge import subjects
from knowledge.sentences import Sentence


@dataclass(frozen=True)
class Signals:
    coverage: float = 0.0
    rarest_present: float = 0.0  # 1.0 or 0.0
    similarity: float = 0.0
    retrieval: float = 0.0
    model_yes: float | None = None

    def as_dict(self) -> dict[str, float | None]:
        return asdict(self)


# Fitted by `python -m bench.rag_eval --split tune --no-precheck --fit` on the tuning half
# (qwen2.5-coder-0.5b, USE multilingual v3; docs/BENCHMARKS.md, "Trust").
FEATURES = ("coverage", "rarest_present", "similarity", "retrieval")
WEIGHTS: dict[str, float] = {
    "bias": 0.276,
    "coverage": 0.361,
    "rarest_present": 0.451,
    "similarity": 0.533,
    "retrieval": 1.007,
}
# Below this fused probability a question is declined before generation. Measured on the
# tuning half, every threshold that declined any unanswerable question declined at least as
# many answerable ones (at 5% of the answerable declined, 10% of the unanswerable), while the
# support check after the reply left 1 unanswerable question in 20 unwarned: so by default
# nothing is declined beforehand (`QASSIST_KNOWLEDGE_PRECHECK`, 0). A deployment with a better
# embedder or model can raise it after measuring its curve.
THRESHOLD: float | None = None


def precheck_threshold() -> float:
    if THRESHOLD is not None:
        return THRESHOLD
    from django.conf import settings

    return float(getattr(settings, "QASSIST_KNOWLEDGE_PRECHECK", 0.0))


def signals(
    subject: subjects.Subject,
    sentences: Sequence[Sentence],
    similarities: Sequence[float],
    retrieval_similarity: float,
    present: Sequence[set[str]] | None = None,
) -> Signals:
    """The signals of a question's subject against the sentences it would be given
    (`present`: the subject terms each sentence holds, knowledge.support.presence)."""
    if not sentences:
        return Signals(retrieval=retrieval_similarity)
    if present is None:
        present = subjects.lexical_presence(subject)(sentences)
    coverage = max(subject.covered_by(p) for p in present)
    strongest = subject.strongest()
    held = set().union(*present)
    return Signals(
        coverage=coverage,
        rarest_present=1.0 if strongest is None or strongest in held else 0.0,
        similarity=max(similarities, default=0.0),
        retrieval=retrieval_similarity,
    )


def probability(found: Signals, weights: Mapping[str, float] | None = None) -> float:
    """The fused probability that the passages answer the question."""
    weights = WEIGHTS if weights is None else weights
    values = found.as_dict()
    z = weights.get("bias", 0.0)
    for name, weight in weights.items():
        if name == "bias":
            continue
        value = values.get(name)
        z += weight * (value if value is not None else 0.0)
    return 1.0 / (1.0 + math.exp(-max(-40.0, min(40.0, z))))


def answers(found: Signals, threshold: float | None = None) -> bool:
    return probability(found) >= (precheck_threshold() if threshold is None else threshold)
