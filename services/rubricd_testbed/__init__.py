"""rubricd's test bed: the offline LLM simulator and the demo trainer, for the tests and the demo, never for a
deployment. The services never import it (`make lint`); only `rubricd serve simulator` starts the simulator."""
