"""pipeline/memo.py: what a file's text says is computed once per text,
kept between runs, and asked again when the text or the asking code
changes."""

import json

import pytest

from pipeline import memo


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """memo with its files under tmp_path and nothing loaded."""
    monkeypatch.setattr(memo.config, "ROOT", tmp_path)
    monkeypatch.setattr(memo, "_facts", None)
    monkeypatch.setattr(memo, "_dirty", False)
    monkeypatch.setattr(memo, "_long_written", False)
    return tmp_path


def test_a_fact_is_computed_once_per_text_and_kept(fresh, monkeypatch):
    calls = []

    def count(text):
        calls.append(text)
        return sorted(set(text))

    assert memo.fact("letters", "abca", count) == ["a", "b", "c"]
    assert memo.fact("letters", "abca", count) == ["a", "b", "c"]
    assert calls == ["abca"]
    assert memo.fact("letters", "abd", count) == ["a", "b", "d"]  # new
    assert memo.fact("other kind", "abca", count) == ["a", "b", "c"]
    assert len(calls) == 3
    memo.save()
    # a later run (a fresh load) reads the answers back
    monkeypatch.setattr(memo, "_facts", None)
    assert memo.fact("letters", "abca", count) == ["a", "b", "c"]
    assert len(calls) == 3


def test_an_edit_of_the_pipeline_asks_again(fresh, monkeypatch):
    memo.fact("letters", "ab", sorted)
    memo.save()
    stored = json.loads((fresh / ".cache/facts.json").read_text())
    stored["version"] = "another state of pipeline/"  # drifted
    (fresh / ".cache/facts.json").write_text(json.dumps(stored))
    monkeypatch.setattr(memo, "_facts", None)
    calls = []
    memo.fact("letters", "ab", lambda t: calls.append(t) or sorted(t))
    assert calls == ["ab"]


def test_a_long_fact_lives_in_its_own_file(fresh):
    calls = []

    def shout(text):
        calls.append(text)
        return text.upper()

    assert memo.long_fact("page", "<p>x</p>", shout) == "<P>X</P>"
    assert memo.long_fact("page", "<p>x</p>", shout) == "<P>X</P>"
    assert calls == ["<p>x</p>"]
    assert len(list((fresh / ".cache/facts").glob("*/*"))) == 1
    assert memo.long_fact("page", "<p>y</p>", shout) == "<P>Y</P>"
    assert len(calls) == 2
