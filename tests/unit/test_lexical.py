"""Word matching of scenarios against tool texts (selection/lexical.py), on plain texts."""

from __future__ import annotations

from selection.lexical import LexicalIndex

TEXTS = {
    "sql@1.0.0": "sql helper: converts a natural language question into an SQL query",
    "pdf@1.0.0": "pdf reader: extracts the text and tables of a PDF document",
    "weather@1.0.0": "weather now: the current weather and forecast for a city",
}


def test_the_tool_whose_words_the_scenario_uses_scores_highest() -> None:
    scores = LexicalIndex(TEXTS).scores("Write the SQL query that lists last month's orders", TEXTS)
    assert scores == {"sql@1.0.0": 1.0, "pdf@1.0.0": 0.0, "weather@1.0.0": 0.0}


def test_scores_are_relative_to_the_best_match() -> None:
    scores = LexicalIndex(TEXTS).scores("extract the tables of this pdf and tell me the weather", TEXTS)
    assert scores["pdf@1.0.0"] == 1.0 and 0.0 < scores["weather@1.0.0"] < 1.0 and scores["sql@1.0.0"] == 0.0
    # Asked for some keys only, the scale is still the best match of the whole index.
    assert LexicalIndex(TEXTS).scores("extract the tables of this pdf and tell me the weather",
                                      ["weather@1.0.0", "gone@1.0.0"]) == {"weather@1.0.0": scores["weather@1.0.0"],
                                                                            "gone@1.0.0": 0.0}


def test_a_scenario_sharing_no_word_or_only_stop_words_matches_nothing() -> None:
    index = LexicalIndex(TEXTS)
    for scenario in ("translate this poem into French", "what is it and how do I do that", ""):
        assert index.scores(scenario, TEXTS) == dict.fromkeys(TEXTS, 0.0)


def test_an_index_without_words_matches_nothing() -> None:
    assert LexicalIndex({}).scores("sql query", ["x@1.0.0"]) == {"x@1.0.0": 0.0}
    assert LexicalIndex({"x@1.0.0": "the of and"}).scores("sql query", ["x@1.0.0"]) == {"x@1.0.0": 0.0}
