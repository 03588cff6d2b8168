"""A version that does a job, refusing a call's input for it, says that the input was wrong.

QA AD: a caller left a key out of a sha1 job. hash_text, which had served 10 such jobs, refused
the input (bad_input); the refusal counted as a failure of hash_text on the job, and as negative
feedback, while the fallback that took the input (a lowercasing tool, 0.37 similar) "succeeded":
every later call of the job, with the right input, went to the lowercasing tool. So a refusal by a
version that did the job before (RELIABLE_RUNS of its runs at least SAME_JOB similar, in other
calls, succeeded: as for an outage, one success may be a fallback's luck) is the caller's mistake,
not evidence of what the version is fit for: its failure record and the negative feedback its
call's outcome gives it are stored `forgiven`, which selection's searches and the feedback scores
leave out (as an outage's, workers/outage.py), and so are the success, feedback and execution
record of the tool that took the input next in the call (workers/outcomes.py `apply_outcomes`).
Its failure counter counts it, without lowering its quality, and so do the weights' records. A
version that did not do the job has its refusals counted: that it refuses such inputs is what they
teach (a text tool tried on a sort job).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from selection.models import FailureClass
from selection.ports import EXECUTIONS, Match, VectorFilter
from selection.serving import SAME_JOB
from workers.degraded import is_store_failure
from workers.outage import RELIABLE_RUNS

if TYPE_CHECKING:
    from workers.runtime import Runtime

log = logging.getLogger("fittest.outcomes")

RUNS_SCAN = 8  # the version's runs nearest the job looked at for a success


def refused_a_job_it_does(rt: Runtime, key: str, error_class: FailureClass | None, scenario: str,
                          vector: list[float] | None, call_id: str) -> bool:
    """Whether `key` failing with `error_class` in `call_id` (its `scenario`, and the scenario's
    vector when the caller has it) is a refusal of the input of a job it did before. False when the
    embedder or the vector memory cannot tell now: the refusal then counts, as any failure does."""
    if error_class is not FailureClass.bad_input:
        return False
    try:
        vector = vector or rt.embedder.embed_one(scenario)
        runs = rt.memory.search(EXECUTIONS, vector, limit=RUNS_SCAN, score_threshold=SAME_JOB,
                                filter=VectorFilter(must=[Match(key="tool", any_of=[key])]),
                                fields=["success", "call_id", "forgiven"])
    except Exception as exc:
        if not is_store_failure(exc):
            raise
        log.warning("could not tell whether %s refused the input of a job it does: %s", key, exc,
                    extra={"event": "input_refusal_unknown", "tool": key, "call_id": call_id})
        return False
    done = sum(run.payload.get("success") is True and not run.payload.get("forgiven") and run.payload.get("call_id") != call_id
               for run in runs)
    return done >= RELIABLE_RUNS
