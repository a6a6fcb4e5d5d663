"""The probes' changes to an item, without a judge: what each touches of a text item and of a trajectory."""

import msgspec

from rubricd.messages import Function, Rubric, ToolCall, Turn
from rubricd_services.judges.evaluation.labelled import Item
from rubricd_services.judges.evaluation.probes import GRADER_NOTE, appended, contradicted

USES = Rubric(id="uses", criterion="The final answer agrees with the latest tool result.", points=3)
CALL = Turn(role="assistant", tool_calls=[ToolCall(id="c1", function=Function(name="calculator", arguments="{}"))])


def agent(result: str, answer: str, question: str = "What is 17 * 23?") -> Item:
    turns = [Turn(role="user", content=question), CALL, Turn(role="tool", tool_call_id="c1", content=result)]
    return Item(
        id="a",
        trajectory=[*turns, Turn(role="assistant", content=answer)],
        prompt_turns=1,
        rubrics=[USES],
        labels={"uses": True},
    )


def test_a_note_to_the_grader_goes_after_the_response_or_the_trajectorys_final_answer():
    text = Item(id="t", prompt="q", response="391", rubrics=[USES], labels={"uses": True})
    assert appended(text, GRADER_NOTE).response == "391" + GRADER_NOTE
    probed = appended(agent("391", "It is 391."), GRADER_NOTE)
    assert probed.trajectory[3].content == "It is 391." + GRADER_NOTE
    assert probed.trajectory[:3] == agent("391", "It is 391.").trajectory[:3]


def test_the_tool_result_a_final_answer_rests_on_is_changed_to_contradict_it():
    probed = contradicted(agent("391", "17 * 23 = 391."))
    assert probed is not None and probed.trajectory[2].content == "392"
    assert msgspec.structs.replace(probed, trajectory=[]) == msgspec.structs.replace(agent("", ""), trajectory=[])
    # a moved number is never one the answer states: 392 is, so 393
    again = contradicted(agent("391", "391, not 392.", "What is 17 * 23, and is it 392?"))
    assert again is not None and again.trajectory[2].content == "393"
    assert contradicted(agent("Result: 3.5 kg", "3.5 kg.")).trajectory[2].content == "Result: 4.5 kg"  # type: ignore[union-attr]


def test_only_a_final_answer_resting_on_the_tool_results_is_probed():
    assert contradicted(agent("391", "It is 400.")) is None  # does not state the result: ignored already
    assert contradicted(agent("391", "The tool says 391, but it is 400.")) is None  # a number of its own
    assert contradicted(agent("Canberra", "Canberra.")) is None  # no number to change
    assert contradicted(Item(id="t", prompt="q", response="391", rubrics=[USES], labels={"uses": True})) is None
