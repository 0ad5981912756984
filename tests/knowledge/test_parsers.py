"""Parsing: every format of the handbook keeps its headings (and pages), hostile files are
refused with a reason a person can act on, and chunks follow the document's structure."""

from __future__ import annotations

import io
import tracemalloc
import zipfile

import pytest

from bench.attacks import flate_bomb_pdf, understated_docx
from knowledge.chunking import chunk_blocks
from knowledge.parsers import ParseError, detect, parse
from knowledge.parsers.base import Block, Parsed
from knowledge.parsers.limits import PDF_MAX_STREAM_BYTES, check_pdf_streams
from tests.knowledge.conftest import corpus_file


def parsed(name: str) -> Parsed:
    data = corpus_file(name)
    return parse(data, detect(data, name))


def sections(result: Parsed) -> set[str]:
    return {b.headings[-1] for b in result.blocks if b.headings}


def text_of(result: Parsed) -> str:
    return "\n".join(b.text for b in result.blocks)


def test_markdown_keeps_headings_and_reads_tables_with_their_column_names() -> None:
    result = parsed("acme/travel-policy.md")
    assert result.title == "Northwind Robotics Travel Policy"
    assert any("Hotel" in s for s in sections(result))
    rows = [b.text for b in result.blocks if "EUR" in b.text and ": " in b.text and ";" in b.text]
    assert rows, "a table row keeps its column names"
    assert all("|" not in b.text for b in result.blocks if not b.heading)


def test_html_keeps_headings_and_leaves_scripts_and_hidden_text_out() -> None:
    page = (
        b"<html><head><title>T</title><script>var secret = 1;</script></head><body>"
        b"<h1>IT</h1><p>Use the <b>VPN</b>.</p><div hidden>hidden words</div>"
        b"<h2>Wi-Fi</h2><ul><li>NWR-Staff</li></ul><script>alert(1)</script></body></html>"
    )
    result = parse(page, detect(page, "it.html"))
    assert [b.text for b in result.blocks] == ["IT", "Use the VPN.", "Wi-Fi", "NWR-Staff"]
    assert result.blocks[-1].headings == ("IT", "Wi-Fi")
    assert parsed("acme/it-security.html").title.startswith("IT Security Standard")


def test_chinese_html_and_markdown_are_read_without_spaces_inside_the_chinese() -> None:
    result = parsed("acme/信息安全守则.html")
    assert "信息安全守则" in result.title
    assert "数据分级" in text_of(result) or "分级" in text_of(result)
    benefits = parsed("acme/员工手册-福利.md")
    assert benefits.title.startswith("员工手册")


def test_docx_headings_come_from_its_heading_styles() -> None:
    result = parsed("acme/leave-policy.docx")
    assert result.title == "Northwind Robotics Leave Policy"
    headings = [b for b in result.blocks if b.heading]
    assert len(headings) >= 5
    nested = [b for b in result.blocks if len(b.headings) >= 2]
    assert nested, "Heading 2 sections nest under their Heading 1"


def test_pdf_blocks_keep_their_page_numbers_and_numbered_headings() -> None:
    result = parsed("acme/expenses.pdf")
    assert result.pages == 3
    assert {b.page for b in result.blocks} == {1, 2, 3}
    assert "3.1 Business meals" in sections(result)
    meals = next(b for b in result.blocks if b.headings and b.headings[-1] == "3.1 Business meals")
    assert meals.headings[0] == "Northwind Robotics Expenses Policy"
    # Running page numbers ("Page 2 of 3") are not text of the policy.
    assert "Page 2 of 3" not in text_of(result)


def test_gb18030_text_is_read_and_its_numbered_sections_become_headings() -> None:
    data = corpus_file("acme/office-guide-shanghai.txt")
    with pytest.raises(UnicodeDecodeError):
        data.decode("utf-8")
    result = parse(data, detect(data, "office-guide-shanghai.txt"))
    assert result.title == "北风机器人 上海办公室指南"
    assert "一、地址与交通" in sections(result)
    assert "漕溪北路" in text_of(result)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("bad/corrupt-truncated.pdf", "The PDF is damaged"),
        ("bad/encrypted.pdf", "encrypted with a password"),
        ("bad/zip-bomb.docx", "zip bomb"),
        ("bad/png-named.pdf", "named .pdf but is a PNG image"),
        ("bad/text-named.docx", "named .docx but is not a Word document"),
        ("bad/empty.txt", "The file is empty"),
        ("bad/junk.txt", "not text"),
    ],
)
def test_hostile_files_are_refused_with_their_reason(name: str, reason: str) -> None:
    data = corpus_file(name)
    with pytest.raises(ParseError, match=reason):
        parse(data, detect(data, name.split("/")[-1]))


def test_an_unknown_extension_is_refused_and_a_known_binary_named() -> None:
    with pytest.raises(ParseError, match="not supported"):
        detect(b"hello", "notes.rtf")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("xl/workbook.xml", "<workbook/>")
    with pytest.raises(ParseError, match="Excel workbook"):
        detect(buffer.getvalue(), "book")


def test_html_nested_beyond_reason_is_a_clear_error_not_a_crash() -> None:
    page = b"<html><body>" + b"<div>" * 100_000 + b"deep" + b"</div>" * 100_000 + b"</body></html>"
    try:
        result = parse(page, "html")
    except ParseError:
        return  # refused: fine
    assert "deep" in text_of(result)


def count(text: str) -> int:
    return len(text.encode())  # the fake tokenizer: a token per byte


def test_chunks_never_cross_a_heading_and_stay_within_the_maximum() -> None:
    result = parsed("acme/travel-policy.md")
    chunks = chunk_blocks(result, count=count, target=300, maximum=400)
    assert chunks
    for chunk in chunks:
        assert chunk.tokens <= 400 + 10
        section_blocks = [b for b in result.blocks if not b.heading and b.text in chunk.text]
        assert {b.headings for b in section_blocks} <= {chunk.headings}


def test_a_long_chinese_paragraph_is_cut_at_sentence_ends() -> None:
    sentence = "年假按工龄计算，满一年的员工享有十五天带薪年假。"
    parsed_doc = Parsed(blocks=[Block(sentence * 20, ("休假",))])
    chunks = chunk_blocks(parsed_doc, count=count, target=200, maximum=250)
    assert len(chunks) > 1
    for chunk in chunks:
        assert chunk.text.endswith("。")
        assert chunk.headings == ("休假",)


# --- decompression bombs (issue #32, finding 4) -------------------------------------------


def test_a_docx_whose_archive_understates_a_part_is_refused_before_it_is_unpacked() -> None:
    """The directory says 1,000 bytes, the part is 64 MB: python-docx unpacked it whole (146 MB
    here, 2.4 GB for the issue's 1 GiB) before the size was found wrong. Now the part is
    decompressed as a stream and counted, a megabyte at a time."""
    data = understated_docx(64 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(ParseError, match="unpacks to more than its archive says"):
            parse(data, "docx")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, f"peak {peak / 2**20:.0f} MB"


def test_a_pdf_stream_expanding_past_the_cap_is_refused_before_pdfium_opens_it() -> None:
    data = flate_bomb_pdf(PDF_MAX_STREAM_BYTES + (1 << 20))
    assert len(data) < 200_000
    with pytest.raises(ParseError, match="decompression bomb"):
        parse(data, "pdf")


def test_streams_within_the_cap_and_a_real_pdf_are_let_through() -> None:
    check_pdf_streams(flate_bomb_pdf(1 << 20), cap=2 << 20)
    check_pdf_streams(corpus_file("acme/expenses.pdf"))
    with pytest.raises(ParseError):
        check_pdf_streams(flate_bomb_pdf(3 << 20), cap=2 << 20)
