"""Which tool a call whose candidates all failed evolves (workers/evolution_memory.py `call_failures`)."""

from __future__ import annotations

from selection.models import CallPlan, CallRequest, FailureClass, ToolExecutionResult
from workers.evolution_memory import call_failures


def attempt(tool: str, error: FailureClass, index: int = 0) -> ToolExecutionResult:
    return ToolExecutionResult(attempt_id=f"c:{index}", call_id="c", tool=tool, version="1.0.0", success=False,
                               error_class=error, error_message="no")


def test_the_tool_tried_first_is_evolved() -> None:
    plan = CallPlan(request=CallRequest(scenario="add VAT to 1200"), candidates=[],
                    attempts=[attempt("vat_price", FailureClass.crash), attempt("convert_units", FailureClass.bad_input, 1)])
    namespace, parent, failures = call_failures(plan, None)
    assert (namespace, parent, [f.error_class for f in failures]) == ("vat_price", "1.0.0", [FailureClass.crash])


def test_fallbacks_that_refused_the_input_leave_the_evolution_to_the_tool_held_back() -> None:
    """QA: with vat_price's breaker open, convert_units refused a VAT job's input and was evolved
    for it ("no mutator could propose"); the job was vat_price's, whose failures opened its breaker."""
    plan = CallPlan(request=CallRequest(scenario="add VAT to 1200"), candidates=[], held_back=["vat_price@1.0.0"],
                    attempts=[attempt("convert_units", FailureClass.bad_input)])
    assert call_failures(plan, None) == ("vat_price", None, [])  # its failures are read from memory
    # A failure of the tool's own, or a call to a namespace, keeps the rule above.
    plan.attempts.append(attempt("csv_to_json", FailureClass.crash, 1))
    assert call_failures(plan, None)[0] == "convert_units"
    named = plan.model_copy(update={"request": CallRequest(scenario="add VAT", namespace="convert_units"),
                                    "attempts": plan.attempts[:1]})
    assert call_failures(named, None)[0] == "convert_units"
