"""What promotions decide about a ranking (selection/serving.py), without any service."""

from __future__ import annotations

from selection.manifest import ToolManifest
from selection.models import Candidate, CallRequest
from selection.serving import ServedVersions, evolved_first, served_first


def candidate(name: str, version: str = "1.0.0") -> Candidate:
    manifest = ToolManifest.model_validate({"name": name, "version": version, "description": "d",
                                            "implementation": {"kind": "python", "entrypoint": "m:run"}})
    return Candidate(key=manifest.key, manifest=manifest, score=1.0)


def keys(ranked: list[Candidate]) -> list[str]:
    return [c.key for c in ranked]


RANKED = [candidate("a", "1.1.0"), candidate("b"), candidate("a", "1.0.0"), candidate("c")]


def test_nothing_promoted_leaves_the_policys_order() -> None:
    assert keys(served_first(CallRequest(scenario="x"), RANKED, ServedVersions())) == keys(RANKED)


def test_a_namespace_serves_its_version_first_in_the_place_the_policy_gave_the_namespace() -> None:
    served = ServedVersions(by_namespace={"a": "1.0.0"})
    assert keys(served_first(CallRequest(scenario="x"), RANKED, served)) == ["a@1.0.0", "b@1.0.0", "a@1.1.0", "c@1.0.0"]


def test_a_rolled_back_version_is_not_tried() -> None:
    served = ServedVersions(by_namespace={"a": "1.0.0"}, rolled_back={"a@1.1.0"})
    assert keys(served_first(CallRequest(scenario="x"), RANKED, served)) == ["b@1.0.0", "a@1.0.0", "c@1.0.0"]


def test_a_namespace_call_starts_with_what_its_namespace_serves() -> None:
    served = ServedVersions(by_namespace={"a": "1.1.0", "c": "1.0.0"})
    assert keys(served_first(CallRequest(scenario="x", namespace="c"), RANKED, served))[0] == "c@1.0.0"


def test_a_call_retried_after_its_evolution_tries_the_promoted_version_first() -> None:
    served = ServedVersions(promoted={"c@1.0.0"})
    assert keys(evolved_first(CallRequest(scenario="x", after_evolution=True), RANKED, served))[0] == "c@1.0.0"
    assert keys(evolved_first(CallRequest(scenario="x"), RANKED, served)) == keys(RANKED)
