"""The function tool verl's scripted agent loops are offered, as a verl `function_tool_path` file."""

from verl.tools.function_tool import function_tool


@function_tool
def add(a: int, b: int) -> str:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return str(a + b)
