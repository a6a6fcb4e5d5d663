"""Reward functions for trainers, backed by rubricd: TRL's `reward_funcs` (rubric rewards, and Rubric-ARM's two
models' with `trl_arm_reward`), verl's `compute_score`, OpenPipe ART's group scoring (`ArtReward`, in place of
RULER) and a verifiers task's `@vf.reward` (`VerifiersReward`). One module per framework; `reward` holds what they share.

    client = SyncRubricdClient("redis://rubricd-redis:6399/0")
    reward = trl_reward(client, run_id="grpo-1", reference_column="answer")
    GRPOTrainer(..., reward_funcs=[reward]).train()
    reward.finish()  # close the last step

TRL's and verl's take a SyncRubricdClient (they call synchronously); ART's, verifiers' and `async_trl_reward` a
RubricdClient, used on the framework's own event loop; the run's options are every adapter's keywords (`reward.RewardOptions`).
A batch is published in one round trip; per-sample calls wait concurrently on the client's one reply reader.
Rollout ids are fresh per call; the first rollout of a later step closes the earlier ones (`finish()` the
last), each rank closing its own part (`RANK`, `WORLD_SIZE`, or `rank=`, `world_size=`); evaluation calls are
published as evaluation rollouts. A trainer's chat messages (tool calls and results included) are sent as the
rollout's trajectory (`conversation.turns`). Details: docs/integrators/ (trl.md, verl.md, art.md, verifiers.md).
"""

from .art import ArtReward
from .reward import NotScored
from .trl import async_trl_reward, trl_reward
from .trl_arm import ArmRejected, trl_arm_reward
from .verifiers import VerifiersReward
from .verl import VerlReward

__all__ = [
    "ArmRejected",
    "ArtReward",
    "NotScored",
    "VerifiersReward",
    "VerlReward",
    "async_trl_reward",
    "trl_arm_reward",
    "trl_reward",
]
