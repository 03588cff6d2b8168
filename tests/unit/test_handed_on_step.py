"""A recorded step recognises its own message when the broker or the sweep delivers it again."""

from __future__ import annotations

import datetime

from kombu.utils import json as kombu_json

from workers.state.inflight import HandedOnStep


def as_worker_decodes(value):
    """What a worker's task receives: the message body through kombu's JSON."""
    return kombu_json.loads(kombu_json.dumps(value))


def test_a_step_recognises_its_message_whatever_its_input_holds() -> None:
    kwargs = {"scenario": "clean the readings", "input": {"readings": [1.5, float("nan"), float("inf")],
                                                          "since": datetime.datetime(2026, 11, 24, 9, 30),
                                                          "window": (3, 5)}}
    recorded = HandedOnStep.model_validate_json(
        HandedOnStep(task_id="c1", task="fittest.resilient_tool_call", kwargs=kwargs, hop=2).model_dump_json())
    delivered = as_worker_decodes(kwargs)
    assert recorded.kwargs != delivered  # compared as they are (NaN came back null), it never matched
    assert recorded.carries("fittest.resilient_tool_call", [], delivered)  # its hop is not compared


def test_a_step_does_not_take_another_step_of_its_call_for_itself() -> None:
    recorded = HandedOnStep(task_id="c1", task="fittest.execute", args=[{"plan": 1}, 1])
    assert not recorded.carries("fittest.execute", [{"plan": 1}, 0], {})  # the attempt before
    assert not recorded.carries("fittest.prepare_evolution", [{"plan": 1}, 1], {})
    assert recorded.carries("fittest.execute", as_worker_decodes([{"plan": 1}, 1]), {})
