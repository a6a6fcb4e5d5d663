"""A verl agent loop file, as the docs' verl page writes it (the run, Redis and namespace from the environment):
verl's tool agent loop with its conversation and offered tools in its extra fields, which verl hands the reward
function in extra_info (`ConversationToolAgentLoop`); and the same loop scored by rubricd in the loop itself, where
verl takes a reward and per-turn rewards (`RubricdToolAgentLoop`)."""

import atexit
import os

from verl.experimental.agent_loop.agent_loop import register
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

from rubricd import SyncRubricdClient
from rubricd.adapters import VerlReward


@register("conversation_tool_agent")
class ConversationToolAgentLoop(ToolAgentLoop):
    """verl's tool agent loop, keeping its conversation and the tools it offers in its extra fields."""

    async def _handle_generating_state(self, agent_data, sampling_params, ignore_termination=False):
        state = await super()._handle_generating_state(agent_data, sampling_params, ignore_termination)
        tools = getattr(agent_data, "_active_tool_schemas", self.tool_schemas)
        agent_data.extra_fields.update(messages=agent_data.messages, tools=tools)
        return state


client = SyncRubricdClient(os.environ["RUBRICD_REDIS_URL"], namespace=os.environ["RUBRICD_NAMESPACE"])
reward = VerlReward(client, run_id=os.environ["RUN_ID"])
atexit.register(client.close)
atexit.register(reward.finish)


@register("rubricd_tool_agent")
class RubricdToolAgentLoop(ConversationToolAgentLoop):
    """The same loop scored in the loop: verl keeps the reward it sets, and its per-turn rewards (`turn_scores`)."""

    async def run(self, sampling_params, **kwargs):
        output = await super().run(sampling_params, **kwargs)
        await reward.score_agent_loop(output, kwargs)
        return output
