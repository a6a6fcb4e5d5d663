"""The gateway's settings (env prefix RUBRICD_, see settings)."""

from pydantic import Field, model_validator

from rubricd_services.settings import Count, Duration, ServiceSettings


class GatewaySettings(ServiceSettings):
    gateway_port: int = Field(
        8300, ge=1, le=65535, description="the gateway's HTTP port: reward routes, /health, /metrics"
    )
    gateway_host: str = Field("127.0.0.1", description="address of that listener (0.0.0.0 in a container)")
    default_run_id: str = Field(
        "gateway",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$",
        description="the run of a request that names none (X-Rubricd-Run header, ?run=, a body field)",
    )
    deadline_s: Duration = Field(
        100.0,
        description="how long a request waits for its scores; keep it below the framework's own timeout "
        "(OpenRLHF 180 s, slime 120 s); a request may ask for less or more (X-Rubricd-Deadline, ?deadline=), "
        "up to max_deadline_s. Samples unscored by then get the contract's failure form",
    )
    max_deadline_s: Duration = Field(900.0, description="the longest deadline a request may ask for")
    max_rollouts_in_flight: Count = Field(
        4096,
        description="rollouts this process waits for at once; a request that would go beyond is answered 429",
    )
    retry_after_s: Count = Field(1, description="the Retry-After of a 429")
    failed_reward: float = Field(
        0.0,
        description="the reward a contract that needs a number gets for a sample without one (judge failed, "
        "masked, deadline), always beside a flag saying so (see the docs per framework)",
    )

    @model_validator(mode="after")
    def _deadline_within_max(self) -> "GatewaySettings":
        if self.deadline_s > self.max_deadline_s:
            raise ValueError(f"deadline_s ({self.deadline_s}) is above max_deadline_s ({self.max_deadline_s})")
        return self
