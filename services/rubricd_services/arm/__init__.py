"""The arm service: rewards for training Rubric-ARM's rubric generator and judge, in alternating phases."""
