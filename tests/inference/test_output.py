from inference.output import TextStream


def test_a_chinese_character_split_across_tokens_arrives_whole():
    stream = TextStream()
    pieces = [stream.push(bytes([b])) for b in "中文".encode()]
    assert pieces == ["", "", "中", "", "", "文"]
    assert stream.text == "中文"


def test_an_emoji_split_across_tokens_never_shows_a_replacement_character():
    stream = TextStream()
    out = "".join(stream.push(bytes([b])) for b in "ok 👍 done".encode())
    assert out == "ok 👍 done"
    assert "\ufffd" not in out


def test_incomplete_bytes_at_the_end_are_dropped_not_shown_broken():
    stream = TextStream()
    stream.push(b"abc")
    stream.push("中".encode()[:2])
    assert stream.finish() == ""
    assert stream.text == "abc"


def test_a_stop_string_ends_the_text_before_it():
    stream = TextStream(stop=["###"])
    assert stream.push(b"Hello #") == "Hello "
    assert stream.push(b"## more") == ""
    assert stream.stopped
    assert stream.text == "Hello "


def test_text_that_only_looked_like_a_stop_string_is_released():
    stream = TextStream(stop=["###"])
    assert stream.push(b"a#") == "a"
    assert stream.push(b"b") == "#b"
    assert not stream.stopped


def test_the_earliest_of_several_stop_strings_wins():
    stream = TextStream(stop=["END", "\n\n"])
    stream.push(b"one\n\ntwo END")
    assert stream.text == "one"


def test_held_back_text_is_released_when_generation_ends_otherwise():
    stream = TextStream(stop=["User:"])
    assert stream.push(b"Answer. Us") == "Answer. "
    assert stream.finish() == "Us"
    assert stream.text == "Answer. Us"


def test_a_stop_string_spanning_a_split_character_is_found():
    stream = TextStream(stop=["。"])
    for b in "好的。后面".encode():
        stream.push(bytes([b]))
    assert stream.stopped
    assert stream.text == "好的"
