"""The analyzer service: analyses each scored rollout (quality at this stage of training, reward-hacking evidence, rubric findings) into the evaluation memory."""
