"""The incremental decisions and pruning, without a database or a source."""

from __future__ import annotations

from sources.connectors import Found
from sources.decisions import Action, Kept, Outcome, after_read, decide, to_prune

RUN = 7


def kept(**fields) -> Kept:
    values = {"has_document": True, "failed": False, "seen_run": 6, "sha256": "abc"}
    return Kept(**{**values, **fields})


def found(**fields) -> Found:
    return Found(key="a.md", name="a.md", origin="/share/a.md", **fields)


def test_a_new_file_is_read():
    assert decide(None, found(size=3, mtime=1.0), run_id=RUN) is Action.READ


def test_matching_etags_mean_unchanged_and_different_ones_mean_read():
    assert decide(kept(etag='"v1"'), found(etag='"v1"'), run_id=RUN) is Action.UNCHANGED
    assert decide(kept(etag='"v1"'), found(etag='"v2"'), run_id=RUN) is Action.READ


def test_last_modified_decides_without_an_etag_and_a_size_change_overrules_it():
    same = "Tue, 01 Dec 2026 10:00:00 GMT"
    assert decide(kept(last_modified=same, size=5), found(last_modified=same, size=5),
                  run_id=RUN) is Action.UNCHANGED  # fmt: skip
    assert decide(kept(last_modified=same, size=5), found(last_modified=same, size=6),
                  run_id=RUN) is Action.READ  # fmt: skip


def test_mtime_and_size_decide_for_a_folder():
    assert decide(kept(mtime=1.0, size=5), found(mtime=1.0, size=5), run_id=RUN) is Action.UNCHANGED
    assert decide(kept(mtime=1.0, size=5), found(mtime=2.0, size=5), run_id=RUN) is Action.READ
    assert decide(kept(mtime=1.0, size=5), found(mtime=1.0, size=9), run_id=RUN) is Action.READ


def test_nothing_to_compare_means_read():
    assert decide(kept(), found(), run_id=RUN) is Action.READ


def test_a_server_saying_not_modified_is_believed():
    assert decide(kept(), found(unchanged=True), run_id=RUN) is Action.UNCHANGED


def test_a_failed_item_or_one_without_a_document_is_read_again():
    assert decide(kept(failed=True, mtime=1.0, size=5), found(mtime=1.0, size=5),
                  run_id=RUN) is Action.READ  # fmt: skip
    assert decide(kept(has_document=False, sha256="", mtime=1.0, size=5),
                  found(mtime=1.0, size=5), run_id=RUN) is Action.READ  # fmt: skip


def test_a_copy_of_another_document_is_checked_like_the_others():
    copy = kept(has_document=False, mtime=1.0, size=5)
    assert decide(copy, found(mtime=1.0, size=5), run_id=RUN) is Action.UNCHANGED


def test_what_the_run_did_already_is_skipped_when_it_resumes():
    assert decide(kept(seen_run=RUN), found(mtime=9.0), run_id=RUN) is Action.DONE


def test_a_walk_failure_is_a_failure_of_the_item():
    assert decide(kept(), found(error="loop"), run_id=RUN) is Action.FAIL


def test_after_reading_the_sha256_decides():
    assert after_read(None, "x") is Outcome.ADD
    assert after_read(kept(sha256="x"), "x") is Outcome.SAME
    assert after_read(kept(sha256="x"), "y") is Outcome.REPLACE
    assert after_read(kept(has_document=False, sha256="x"), "x") is Outcome.SAME
    assert after_read(kept(has_document=False, sha256="x"), "y") is Outcome.ADD
    assert after_read(kept(failed=True, sha256="x"), "x") is Outcome.REPLACE


def test_only_a_complete_walk_prunes_what_it_did_not_see():
    items = [(1, RUN), (2, 6), (3, None)]
    assert to_prune(items, run_id=RUN, complete=True) == [2, 3]
    assert to_prune(items, run_id=RUN, complete=False) == []
