"""The HTTP reward gateway: RL frameworks' remote-reward calls in, rollouts on the stream, scores back."""
