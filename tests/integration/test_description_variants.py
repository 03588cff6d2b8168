"""Description variants on real services (Redis, Qdrant Edge, fastembed), through the selector and
the outcome bookkeeping the workers run."""

from __future__ import annotations

from pathlib import Path

import pytest

from selection.models import CallRequest, OutcomeRecord, ToolExecutionResult
from tests.conftest import write_tool
from workers.outcomes import apply_outcome
from workers.runtime import Runtime
from workers.settings import Settings

TOOLS = {
    "roman": "Utility.",
    "reverse_words": "Reverse the order of the words in a sentence.",
    "word_lengths": "Measure how long each word of a text is.",
}
SCENARIO = "write the year 1666 in roman numerals"


@pytest.fixture
def rt(settings_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    for name, description in TOOLS.items():
        write_tool(tmp_path / "tools", name, None, description=description,
                   implementation={"kind": "python", "entrypoint": "yaml:safe_dump"})
    monkeypatch.setenv("FITTEST_TOOLS_DIR", str(tmp_path / "tools"))
    monkeypatch.setenv("FITTEST_VARIANT_MIN_TRIALS", "3")
    monkeypatch.setenv("FITTEST_SELECTION_CACHE_TTL_S", "0")  # a new variant is matched within one TTL
    runtime = Runtime(Settings())
    yield runtime
    runtime.state.clear()
    runtime.close()


def plan(rt: Runtime, call_id: str):
    rt.selector.variants._read_at = float("-inf")  # read the variants now, not within REFRESH_S
    return rt.selector.plan(CallRequest(scenario=SCENARIO, call_id=call_id))


def roman_similarity(p) -> float:
    return next(c.breakdown.similarity for c in p.candidates if c.key == "roman@1.0.0")


def first_attempt(rt: Runtime, call_id: str, served: dict[str, str], ok: bool) -> None:
    attempt = ToolExecutionResult(attempt_id=f"{call_id}:0", call_id=call_id, tool="roman", version="1.0.0", success=ok,
                                  result={"roman": "MDCLXVI"} if ok else None)
    apply_outcome(rt, OutcomeRecord(call_id=call_id, scenario=SCENARIO, attempts=[attempt], variants=served))


def test_a_testing_variant_is_served_by_chance_matched_by_its_own_text_and_promoted_when_better(rt: Runtime) -> None:
    manifest_only = plan(rt, "c0")
    assert manifest_only.variants == {}  # no variants: the manifest's description, as always
    variant = rt.evolution.add_variant("roman@1.0.0", "Write an integer in Roman numerals, e.g. 1994 as MCMXCIV.",
                                       TOOLS["roman"])
    assert variant.id == "1" and variant.status == "testing"

    rt.settings.ab_test_probability = 1.0
    tested = plan(rt, "c1")
    assert tested.variants["roman@1.0.0"] == "1"
    assert tested.candidates[0].key == "roman@1.0.0"
    rt.settings.ab_test_probability = 0.0
    incumbent = plan(rt, "c2")  # "Utility." matches nothing: the bad description keeps the tool out
    assert "roman@1.0.0" not in [c.key for c in incumbent.candidates] and incumbent.variants == {}
    assert roman_similarity(tested) > 0.5

    for i in range(3):
        first_attempt(rt, f"t{i}", {"roman@1.0.0": "1"}, ok=True)
    first_attempt(rt, "t0", {"roman@1.0.0": "1"}, ok=True)  # a redelivery is credited once
    variants = {v.id: v for v in rt.evolution.variants("roman@1.0.0")}
    assert (variants["1"].status, variants["1"].trials, variants["1"].successes) == ("active", 3, 3)
    assert variants["0"].status == "active" and variants["1"].effectiveness > variants["0"].effectiveness
    (entry,) = rt.evolution.changelog("roman")  # QA evolution F8: `fittest show` said nothing of it
    assert (entry.event, entry.version, entry.reason) == (
        "description_promoted", "1.0.0", "3/3 first attempts succeeded, against a rate of 0.50 of the best active description")
    assert plan(rt, "c3").variants["roman@1.0.0"] == "1"  # the better one is served now, without any test


def test_a_worse_testing_variant_is_retired(rt: Runtime) -> None:
    rt.evolution.add_variant("roman@1.0.0", "Reverse the words of a sentence.", TOOLS["roman"])
    for i in range(3):
        first_attempt(rt, f"w{i}", {"roman@1.0.0": "1"}, ok=False)
    variants = {v.id: v for v in rt.evolution.variants("roman@1.0.0")}
    assert variants["1"].status == "deprecated" and variants["1"].accesses == 3
    assert [e.event for e in rt.evolution.changelog("roman")] == ["description_retired"]
    rt.settings.ab_test_probability = 1.0  # a retired variant is never served, not even on test
    assert plan(rt, "c4").variants == {}


def test_a_call_is_matched_by_the_words_of_the_description_it_is_served(rt: Runtime) -> None:
    """The word match reads the variant a call is served, as the embedding does: words only the
    variant has count for the calls it is served, and not for the others."""
    scenario = "turn 1994 into numerals such as MCMXCIV"

    def word_match(call_id: str) -> dict[str, float]:
        rt.selector.variants._read_at = float("-inf")
        p = rt.selector.plan(CallRequest(scenario=scenario, call_id=call_id))
        return {c.key: c.breakdown.extra["lexical"] for c in p.candidates}

    rt.evolution.add_variant("roman@1.0.0", "Write an integer in Roman numerals, e.g. 1994 as MCMXCIV.", TOOLS["roman"])
    rt.settings.ab_test_probability = 1.0
    assert word_match("v1")["roman@1.0.0"] == 1.0
    rt.settings.ab_test_probability = 0.0  # "Utility." shares no word with the scenario
    assert all(score == 0.0 for score in word_match("v2").values())


def test_a_new_selector_indexes_the_words_of_the_variants_already_stored(rt: Runtime) -> None:
    """A worker that starts after variants exist builds its word index with them, not within the
    first call it selects for (10,000 versions take ~0.25 s to index)."""
    rt.evolution.add_variant("roman@1.0.0", "Write an integer in Roman numerals, e.g. 1994 as MCMXCIV.", TOOLS["roman"])
    index = rt.selector.lexical_index()
    assert rt.selector.variants.texts  # read when the selector was made
    rt.settings.ab_test_probability = 1.0
    p = rt.selector.plan(CallRequest(scenario="turn 1994 into numerals such as MCMXCIV", call_id="s1"))
    assert p.variants == {"roman@1.0.0": "1"}
    assert rt.selector.lexical_index() is index


def test_a_variant_must_say_something_its_tool_does_not_say_already(rt: Runtime) -> None:
    text = "Write an integer in Roman numerals, e.g. 1994 as MCMXCIV."
    first = rt.evolution.add_variant("roman@1.0.0", text, TOOLS["roman"])
    with pytest.raises(ValueError, match=f"roman@1.0.0 has this text already \\(variant #{first.id}\\)"):
        rt.evolution.add_variant("roman@1.0.0", "  Write an integer in Roman numerals,\n e.g. 1994 as MCMXCIV. ", TOOLS["roman"])
    with pytest.raises(ValueError, match="has this text already \\(the manifest's description\\)"):
        rt.evolution.add_variant("roman@1.0.0", TOOLS["roman"], TOOLS["roman"])
    other = rt.evolution.add_variant("roman@1.0.0", text, TOOLS["roman"], environment="staging")  # another audience
    assert [v.id for v in rt.evolution.variants("roman@1.0.0") if v.text == text] == [first.id, other.id]


def test_the_same_variant_added_twice_at_once_is_stored_once(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two operators (or an operator and an evolution) adding the same text at once: the second
    write of the text lands between the first one's check and its write."""
    text = "Write an integer in Roman numerals, e.g. 1994 as MCMXCIV."
    read = rt.evolution.variants
    raced: list[str] = []

    def variants_then_the_other_add(key: str):
        found = read(key)
        if not raced:
            raced.append("adding")
            raced[0] = rt.evolution.add_variant("roman@1.0.0", text, TOOLS["roman"]).id
        return found

    monkeypatch.setattr(rt.evolution, "variants", variants_then_the_other_add)
    with pytest.raises(ValueError, match="has this text already \\(variant #1\\)"):  # the other add's
        rt.evolution.add_variant("roman@1.0.0", text, TOOLS["roman"])
    assert raced == ["1"]
    monkeypatch.undo()
    assert [v.text for v in rt.evolution.variants("roman@1.0.0")].count(text) == 1
