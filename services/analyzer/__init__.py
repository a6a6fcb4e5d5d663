"""The analyzer service: analyses each scored rollout (quality, reward-hacking evidence, rubric findings) into the evaluation memory.

Skeleton for now; the memory loop brings its work.
"""
