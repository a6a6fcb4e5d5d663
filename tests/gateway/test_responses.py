"""A Responses-API exchange as a trajectory, built with openai's own Responses types and dumped as NeMo Gym's
agents dump them (`model_dump()` of the request and the Response) before posting to /verify."""

import itertools
from typing import Any

import msgspec
import pytest
from openai.types.responses import (
    EasyInputMessageParam,
    FunctionToolParam,
    Response,
    ResponseFunctionToolCall,
    ResponseFunctionToolCallOutputItem,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Content, Summary

from rubricd_services.gateway.responses import trajectory
from tests.factories import rollout

WEATHER: FunctionToolParam = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": True,
}


def reasoning(text: str) -> ResponseReasoningItem:
    return ResponseReasoningItem(id="rs", type="reasoning", summary=[Summary(text=text, type="summary_text")])


def call(call_id: str, arguments: str, name: str = "get_weather") -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        id=f"fc_{call_id}", type="function_call", call_id=call_id, name=name, arguments=arguments, status="completed"
    )


def output(call_id: str, text: str) -> ResponseFunctionToolCallOutputItem:
    return ResponseFunctionToolCallOutputItem(
        id=f"fco_{call_id}", type="function_call_output", call_id=call_id, output=text, status="completed"
    )


def message(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def response(*items: Any) -> dict[str, Any]:
    """A Response holding `items` as its output, as NeMo Gym's simple agent returns it: every model output and
    every tool's output (`function_call_output`) in order."""
    built = Response(
        id="resp_1",
        created_at=1760000000.0,
        model="policy",
        object="response",
        output=list(items),
        parallel_tool_calls=True,
        tool_choice="auto",
        tools=[],
    )
    return built.model_dump(mode="json")


def turns(found: Any) -> list[dict[str, Any]]:
    return msgspec.to_builtins(found.turns)


USER: EasyInputMessageParam = {"role": "user", "content": "Is it warm in Paris and in Oslo?", "type": "message"}


def test_a_tool_using_exchange_is_every_turn_in_order_with_its_reasoning_calls_and_results():
    params = {"instructions": "Use the tools.", "input": [USER], "tools": [WEATHER]}
    found = trajectory(
        params,
        response(
            reasoning("I need both cities."),
            call("c1", '{"city": "Paris"}'),
            call("c2", '{"city": "Oslo"'),  # not JSON: the policy's mistake, kept to be judged
            output("c1", "24 C, sunny"),
            output("c2", '{"error": "Invalid tool call arguments"}'),
            reasoning("Paris is warm; Oslo failed."),
            message("Paris is warm (24 C). "),
        ),
    )
    assert turns(found) == [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "Is it warm in Paris and in Oslo?"},
        {
            "role": "assistant",
            "reasoning": "I need both cities.",
            "tool_calls": [  # consecutive calls: one turn
                {"id": "c1", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                {"id": "c2", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"'}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "24 C, sunny"},
        {"role": "tool", "tool_call_id": "c2", "content": '{"error": "Invalid tool call arguments"}'},
        {"role": "assistant", "reasoning": "Paris is warm; Oslo failed.", "content": "Paris is warm (24 C). "},
    ]
    assert found.prompt_turns == 2
    assert msgspec.to_builtins(found.tools) == [
        {
            "function": {
                "name": "get_weather",
                "description": "The weather in a city now.",
                "parameters": WEATHER["parameters"],
            }
        }
    ]
    asked = rollout(
        run_id="r", rollout_id="x", trajectory=found.turns, tools=found.tools, prompt_turns=found.prompt_turns
    )
    assert asked.policy_turns == [2, 5]
    assert '[tool_call get_weather({"city": "Oslo")]' in asked.response


def test_an_assistant_turn_holds_its_reasoning_then_its_text_then_its_calls_and_what_comes_before_opens_the_next():
    found = trajectory(
        {"input": "Hi"},
        response(
            message("Let me look."),
            call("c1", "{}"),  # after the text: the same turn
            output("c1", "ok"),
            message("Done."),
            message("Anything else?"),  # text after text: a new turn
            reasoning("Hidden thoughts"),  # reasoning after text: a new turn, left with nothing after it
        ),
    )
    assistant = [t for t in turns(found) if t["role"] == "assistant"]
    assert [(t.get("content"), len(t.get("tool_calls", [])), t.get("reasoning")) for t in assistant] == [
        ("Let me look.", 1, None),
        ("Done.", 0, None),
        ("Anything else?", 0, None),
        (None, 0, "Hidden thoughts"),
    ]
    assert found.prompt_turns == 1


def test_reasoning_is_read_from_its_summary_else_its_content_and_an_encrypted_one_is_left_out():
    raw = ResponseReasoningItem(
        id="rs", type="reasoning", summary=[], content=[Content(text="raw chain of thought", type="reasoning_text")]
    )
    encrypted = ResponseReasoningItem(id="rs2", type="reasoning", summary=[], encrypted_content="gAAAA")
    found = trajectory({"input": "Hi"}, response(raw, message("A."), encrypted, message("B.")))
    assert [(t.get("reasoning"), t.get("content")) for t in turns(found)[1:]] == [
        ("raw chain of thought", "A."),
        (None, "B."),
    ]


def test_a_replayed_conversation_in_the_input_is_all_prompt_and_an_output_may_answer_its_calls():
    replayed = [
        USER,
        call("c1", '{"city": "Paris"}').model_dump(mode="json"),
        output("c1", "24 C").model_dump(mode="json"),
        {"role": "assistant", "content": [{"type": "output_text", "text": "Paris is warm."}], "type": "message"},
        {"role": "user", "content": [{"type": "input_text", "text": "And "}, {"type": "input_text", "text": "Oslo?"}]},
        call("c2", '{"city": "Oslo"}').model_dump(mode="json"),
    ]
    found = trajectory({"input": replayed}, response(output("c2", "3 C"), message("Oslo is cold.")))
    assert found.prompt_turns == 6  # the call replayed last is the input's: its answer is the output's first
    assert [t["role"] for t in turns(found)] == ["user", "assistant", "tool", "assistant", "user", "assistant", "tool",
                                                 "assistant"]  # fmt: skip
    assert turns(found)[4]["content"] == "And Oslo?"


def test_other_items_are_kept_as_calls_results_and_tools_where_they_are_and_the_rest_left_out():
    found = trajectory(
        {"input": "Find it.", "tools": [{"type": "web_search"}, {"type": "mcp", "server_label": "docs"}]},
        {
            "output": [
                {"type": "mcp_list_tools", "id": "l1", "server_label": "docs", "tools": [
                    {"name": "lookup", "description": "Look a page up.", "input_schema": {"type": "object"}}
                ]},  # fmt: skip
                {"type": "web_search_call", "id": "ws1", "status": "completed", "action": {"type": "search", "query": "x"}},
                {"type": "mcp_call", "id": "mc1", "name": "lookup", "arguments": '{"page": 1}', "output": "page one"},
                {"type": "custom_tool_call", "call_id": "ct1", "name": "grep", "input": "needle"},
                {"type": "custom_tool_call_output", "call_id": "ct1", "output": [{"type": "input_image", "image_url": "data:"}]},
                {"type": "mcp_approval_request", "id": "a1", "name": "lookup", "arguments": "{}"},
                {"type": "item_reference", "id": "x"},
                {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "I cannot."}]},
            ]
        },
    )  # fmt: skip
    assert turns(found)[1:] == [
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "ws1", "function": {"name": "web_search", "arguments": {"type": "search", "query": "x"}}},
                {"id": "mc1", "function": {"name": "lookup", "arguments": '{"page": 1}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "mc1", "content": "page one"},
        {"role": "assistant", "tool_calls": [{"id": "ct1", "function": {"name": "grep", "arguments": "needle"}}]},
        {"role": "tool", "tool_call_id": "ct1", "content": [{"type": "input_image"}]},  # kept, not judged
        {"role": "assistant", "content": "I cannot."},
    ]
    assert [t.function.name for t in found.tools] == ["web_search", "lookup"]


@pytest.mark.parametrize(
    ("params", "output", "named"),
    [
        ({"input": [{"role": "bot", "content": "hi"}]}, [], "responses_create_params.input[0].role: 'bot' is not a role"),
        ({"input": ["hi"]}, [], "responses_create_params.input[0]: an item is an object, not a string"),
        ({"input": {"role": "user"}}, [], "responses_create_params.input: a list of items, not an object"),
        ({"input": [{"role": "user", "content": 7}]}, [], "responses_create_params.input[0].content: a string or a list"),
        ({"input": [{"role": "user", "content": ["hi"]}]}, [], "responses_create_params.input[0].content[0]: a part"),
        ({"input": "hi"}, [{"type": "function_call", "call_id": "c", "arguments": "{}"}], "response.output[0].name"),
        ({"input": "hi"}, [{"type": "function_call_output", "call_id": "c9", "output": "x"}], "response.output[0].call_id: 'c9' answers no earlier call"),
        ({"input": "hi"}, "all of it", "response.output: a list of items, not a string"),
        ({"input": "hi", "tools": [WEATHER, "get_time"]}, [], "responses_create_params.tools[1]: a tool is an object"),
    ],
)  # fmt: skip
def test_an_exchange_malformed_as_messages_is_refused_naming_the_item(params, output, named):
    with pytest.raises(ValueError) as refused:
        trajectory(params, {"output": output})
    assert named in str(refused.value)


ODD = [None, 0, "", "x", [], {}, [{}], {"type": 3}, {"text": None}, [{"type": "output_text"}]]


def test_no_item_however_odd_raises_anything_but_a_named_value_error():
    keys = ["type", "role", "content", "name", "call_id", "id", "arguments", "output", "summary", "tools"]
    kinds = ["message", "reasoning", "function_call", "function_call_output", "mcp_call", "x_call", "x", None]
    for kind, key, value in itertools.product(kinds, keys, ODD):
        item = {"type": kind, "role": "assistant", "name": "f", "call_id": "c", key: value}
        try:
            trajectory({"input": "hi"}, {"output": [{"type": "function_call", "call_id": "c", "name": "f"}, item]})
        except ValueError as e:
            assert str(e).startswith(("response.output[1]", "response.output[0]")), e
