"""A verifiers (0.4, v1) environment whose reward is rubricd's (rubricd.adapters.verifiers), as a user writes it:
a taskset of arithmetic questions, a task with one `@vf.reward` method, and a harness that asks the policy in
process (through verifiers' interception server, offering a calculator tool) instead of launching a program, so
that it runs here without a container or a package index. verifiers loads it by its id, this module's name
(tests/frameworks/verifiers_env.py puts this directory on sys.path).

The reward's run, Redis and group size come from RUBRICD_REDIS_URL, RUBRICD_NAMESPACE, RUN_ID and
GROUP_SIZE.
"""

import os

import openai
import verifiers.v1 as vf
from calc import CALC  # beside this script
from verifiers.v1.dialects.chat import message_to_wire

from rubricd import RubricdClient
from rubricd.adapters.verifiers import VerifiersReward

__all__ = ["ArithmeticTaskset", "ArithmeticTasksetConfig", "AskHarness", "AskHarnessConfig"]


# Made at import, outside any event loop: it connects on first use, in the loop verifiers scores on.
client = RubricdClient(os.environ["RUBRICD_REDIS_URL"], namespace=os.environ["RUBRICD_NAMESPACE"])
group_size = int(os.environ["GROUP_SIZE"])
reward = VerifiersReward(client, os.environ["RUN_ID"], group_size=group_size, judge_mode="group", timeout=120)


class ArithmeticData(vf.TaskData):
    answer: str = ""


class ArithmeticTask(vf.Task[ArithmeticData, vf.State, vf.TaskConfig]):
    @vf.reward
    async def rubricd(self, trace: vf.Trace) -> float:
        return await reward.score(trace)


class ArithmeticTasksetConfig(vf.TasksetConfig):
    rows: list[dict] = []


class ArithmeticTaskset(vf.Taskset[ArithmeticTask, ArithmeticTasksetConfig]):
    def load(self) -> list[ArithmeticTask]:
        return [ArithmeticTask(ArithmeticData(**row), self.config.task) for row in self.config.rows]


class AskHarnessConfig(vf.HarnessConfig):
    id: vf.ID = "vf_rubricd_env"


class AskHarness(vf.Harness[AskHarnessConfig]):
    """One chat call to the policy, the calculator offered, in process."""

    APPENDS_SYSTEM_PROMPT = True
    NEEDS_CONTAINER = False
    EXECUTES_CODE = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data) -> vf.ProgramResult:
        system, prompt = self.resolve_prompt(data)
        messages = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        else:
            messages += [message_to_wire(m) for m in prompt or []]
        async with openai.AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0) as client:
            answer = await client.chat.completions.create(model=ctx.model, messages=messages, tools=[CALC])
        return vf.ProgramResult(exit_code=0, stdout=answer.choices[0].message.content or "", stderr="")
