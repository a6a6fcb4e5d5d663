"""A verl custom reward function file, as the docs' verl page writes it (the run, Redis and namespace
from the environment): verl loads it by path in each of its reward loop's workers."""

import atexit
import os

from rubricd import SyncRubricdClient
from rubricd.adapters import VerlReward

client = SyncRubricdClient(os.environ["RUBRICD_REDIS_URL"], namespace=os.environ["RUBRICD_NAMESPACE"])
reward = VerlReward(client, run_id=os.environ["RUN_ID"], prompt_field="question", rubrics=["correct"])
compute_score = reward.compute_score
compute_score_async = reward.compute_score_async
atexit.register(client.close)
atexit.register(reward.finish)
