"""A call's input and context must be JSON: what is not is refused by name and place before
anything is sent (QA integrator 3, QA recheck F3: a set, bytes or a datetime reached the size
check's json.dumps and raised a TypeError naming no field)."""

from __future__ import annotations

import datetime
import decimal
from typing import Any

import pytest
from pydantic import ValidationError

from selection.models import CallRequest, field_errors


@pytest.mark.parametrize(("value", "says"), [
    ({"numbers": {3, 1, 2}}, "contains a value of type set at numbers, which is not JSON"),
    ({"when": datetime.datetime(2026, 1, 1)}, "contains a value of type datetime at when"),
    ({"blob": b"\xff"}, "contains a value of type bytes at blob"),
    ({"numbers": [decimal.Decimal("3.5"), 1]}, "contains a value of type Decimal at numbers.0"),
    ({"note": "\ud800"}, "contains text that is not Unicode (a lone surrogate) at note"),
    ({"a": {(1, 2): 3}}, "has a key of type tuple at a, which JSON has not"),
    ({"a": [{"b": {1: "x"}}]}, "has a key of type int at a.0.b, which JSON has not: keys are text"),
    ({"a": {None: "x"}}, "has a key of type NoneType at a, which JSON has not"),
    ({"x": [1.0, float("nan")]}, "contains a non-finite number (NaN or Infinity) at x.1"),
    ({"n": 10 ** 5000}, "contains an integer of more than 4,000 digits at n: send it as text"),
    # A key that would read as a path of its own is written as JSON text: one path, one place.
    ({"a.b": {"c": float("nan")}}, 'contains a non-finite number (NaN or Infinity) at ["a.b"].c'),
    ({"a": {"b.c": [float("inf")]}}, 'contains a non-finite number (NaN or Infinity) at a["b.c"].0'),
    ({"a": {"0": {1: "x"}}}, 'has a key of type int at a["0"], which JSON has not'),
    ({"a": {"": float("nan")}}, 'contains a non-finite number (NaN or Infinity) at a[""]'),
])
def test_what_is_not_json_is_refused_naming_where_it_is(value: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError) as refused:
        CallRequest(scenario="sort these numbers", input=value)
    (error,) = field_errors(refused.value)
    assert error.field == "input" and error.message.startswith(says), error


def test_any_mapping_is_checked_as_a_dict_is() -> None:
    """QA recheck N3: a mappingproxy input skipped the check; its NaN reached the tool as null."""
    from types import MappingProxyType

    for value, says in ((MappingProxyType({"numbers": [3, float("nan")]}), "contains a non-finite number (NaN or Infinity) at numbers.1"),
                        (MappingProxyType({"a": {1: "x"}}), "has a key of type int at a, which JSON has not")):
        with pytest.raises(ValidationError) as refused:
            CallRequest(scenario="sort these numbers", input=value)
        (error,) = field_errors(refused.value)
        assert error.field == "input" and error.message.startswith(says), error


def test_json_values_pass_tuples_as_lists_included() -> None:
    request = CallRequest(scenario="sort these numbers", input={"numbers": [3, (1, 2), {"k": None}], "big": 10 ** 100})
    assert request.input["big"] == 10 ** 100


@pytest.mark.parametrize(("fields", "said"), [
    ({"namespace": "Bad Name"}, "namespace: should be a tool's name: lowercase letters, digits and _, starting with a letter"),
    ({"call_id": ""}, "call_id: should be letters, digits and _ . : - only, 1 to 128 of them"),
    ({"scenario": ""}, "scenario: is empty"),
    # QA 64a: 32 tags of a megabyte each were taken, and kept in the result for a day; a lone surrogate
    # in a tag or an exclude raised in the vector search, not refused
    ({"tags": ["t" * 1_000_000]}, "tags.0: String should have at most 200 characters"),
    ({"exclude": [f"word_stats@{'9' * 200_000}.0.0"]}, "exclude.0: String should have at most 200 characters"),
    ({"tags": ["\ud800"]}, "tags.0: Input should be a valid string, unable to parse raw data as a unicode string"),
    ({"exclude": ["word_stats@1.0.0\ud800"]}, "exclude.0: Input should be a valid string, unable to parse raw data as a unicode"),
])
def test_a_refused_field_says_its_rule_in_words(fields: dict[str, Any], said: str) -> None:
    """QA 48: refusals quoted pydantic's regular expression ("String should match pattern ...")."""
    with pytest.raises(ValidationError) as refused:
        CallRequest.model_validate({"scenario": "sort these numbers", **fields})
    (error,) = field_errors(refused.value)
    assert f"{error.field}: {error.message}".startswith(said), error


@pytest.mark.parametrize(("namespace", "said"), [
    ("Slugify", "should be a tool's name: lowercase letters, digits and _, starting with a letter, at most 64 "
                "(did you mean 'slugify'?)"),  # QA 65a
    ("Bad Name", "should be a tool's name: lowercase letters, digits and _, starting with a letter, at most 64"),
])
def test_a_namespace_in_capitals_is_told_its_lowercase_form(namespace: str, said: str) -> None:
    with pytest.raises(ValidationError) as refused:
        CallRequest(scenario="make a slug", namespace=namespace)
    (error,) = field_errors(refused.value)
    assert (error.field, error.message) == ("namespace", said)
