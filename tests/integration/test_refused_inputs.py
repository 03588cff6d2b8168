"""Inputs refused by the job's own tool on a fresh stack, with real workers: in a module of its own,
so that no other stack's workers on the same Redis take its calls."""

from __future__ import annotations

from tests.integration.conftest import pipeline_running


def test_a_first_call_with_a_bad_input_does_not_hand_the_job_to_a_tool_that_takes_anything(tmp_path, redis_url, model_path):
    """QA recheck F5: on a fresh stack a hashing call without its `algorithm` was refused by the
    hashing tool, which had not done such jobs yet; a word counter (0.23 similar) took the input,
    "succeeded" with a word count, and had every later hashing call, with the right input. The
    refusal of the job's clear best match is the caller's mistake: the word counter is passed over,
    and the hashing tool is not demoted (yet the call may evolve it)."""
    tools = tmp_path / "tools"
    for name, description, body in (
        ("hash_text", "Compute a cryptographic hash (sha256, sha1 or md5) of a text, as hex digits.",
         "import hashlib\n\ndef run(payload):\n    return {'hex': hashlib.new(payload['algorithm'], payload['text'].encode()).hexdigest()}\n"),
        ("word_count", "Count the words of a text.", "def run(payload):\n    return {'words': len(str(payload).split())}\n"),
    ):
        (tools / name).mkdir(parents=True)
        (tools / name / "tool.py").write_text(body)
        (tools / name / "tool.yaml").write_text(f"name: {name}\nversion: 1.0.0\ndescription: {description}\n"
                                                "implementation: {kind: python, entrypoint: 'tool:run'}\ntimeout_s: 5\n")
    with pipeline_running(tmp_path, redis_url, model_path, tools) as p:
        wrong = p.call(scenario="compute the sha256 hash of this text", input={"text": "hi"}, timeout=120)
        assert wrong["status"] == "failed", wrong
        assert [(a["tool"], a["error_class"]) for a in wrong["attempts"]] == [("hash_text", "bad_input")], wrong
        # Said with the evolution's end too (QA: with evolution on, only "the one attempt failed; evolution: …").
        assert wrong["message"].startswith("hash_text@1.0.0, which matches such jobs best ("), wrong["message"]
        assert "check the input" in wrong["message"] and "word_count@1.0.0" in wrong["message"]  # passed over
        # The same mistake again and again takes the job from it no more than once (QA: after 6, the word
        # counter was first, and answered the right inputs with a word count).
        for _ in range(5):
            again = p.call(scenario="compute the sha256 hash of this text", input={"text": "hi"}, timeout=120)
            assert again["status"] == "failed" and "word_count" not in {a["tool"] for a in again["attempts"]}, again
        p.settled()
        right = p.call(scenario="compute the sha256 hash of this text", input={"text": "hi", "algorithm": "sha256"})
        assert right["status"] == "success" and right["tool"] == "hash_text", right
        # Called by name without a scenario, by the tool's description, which its jobs match less
        # than the same job: a tool with its successes refusing a caller's typo is not evolved (QA 51c:
        # one typo evolved a version with 46 successes).
        for algorithm in ("md5", "sha1"):
            assert p.call(scenario="compute the sha256 hash of this text",
                          input={"text": "hi", "algorithm": algorithm})["status"] == "success"
        p.settled()
        typo = p.client.wait(p.client.send("call_tool", name="hash_text", input={"txt": "hi", "algorithm": "md5"}), 120)
        assert typo["status"] == "failed" and typo["evolution"] is None, typo
        assert typo["message"].endswith("it has succeeded 3 times or more, and the call names it: check the input"), typo["message"]
