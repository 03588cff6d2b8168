"""A tool refusing an input its own test cases say it must refuse is doing its job: on real workers,
such refusals are counted apart, in no trial and in no run of refusals that would call the tool
"maybe broken" and evolve it (QA 65b: six `{"n": -5}` calls to prime_count, whose test case expects
an error there; the sixth said it might be broken, counted in its trial, and started an evolution)."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.integration.conftest import pipeline_running


def test_refusals_its_test_cases_expect_never_make_a_tool_maybe_broken(tmp_path: Path, redis_url: str, model_path: Path) -> None:
    tools = tmp_path / "tools" / "prime_count"
    tools.mkdir(parents=True)
    (tools / "tool.py").write_text("def run(data):\n    n = data['n']\n    if n < 0:\n        raise ValueError('n must be 0 or more')\n"
                                   "    return {'primes': sum(all(k % d for d in range(2, k)) for k in range(2, n + 1))}\n")
    (tools / "tool.yaml").write_text(yaml.safe_dump({
        "name": "prime_count", "version": "1.0.0", "description": "Count the prime numbers up to n.",
        "implementation": {"kind": "python", "entrypoint": "tool:run"},
        "test_cases": [{"input": {"n": 10}, "expect": {"primes": 4}}, {"input": {"n": -5}, "expect_error": True}]}))
    with pipeline_running(tmp_path, redis_url, model_path, tmp_path / "tools") as p:
        assert p.call(scenario="count the primes up to n", namespace="prime_count", input={"n": 10})["status"] == "success"
        ended = [p.call(scenario="count the primes up to n", namespace="prime_count", input={"n": -5}) for _ in range(7)]
        other = p.call(scenario="count the primes up to n", namespace="prime_count", input={"n": -6})  # no case says so
        p.settled()
        for result in ended:
            (attempt,) = result["attempts"]
            assert attempt["error_class"] == "bad_input" and attempt["callers_mistake"] is True, result
            assert "may be broken" not in result["message"], result["message"]
        assert other["attempts"][0]["error_class"] == "bad_input"
        # the seven counted apart, out of any run of refusals; the one no case declares in one, as before
        stats = p.state().stats(["prime_count@1.0.0"])["prime_count@1.0.0"]
        assert (stats.refused_inputs, stats.refused_in_a_row, stats.failures) == (8, 1, 0), stats
