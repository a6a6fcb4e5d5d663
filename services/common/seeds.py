"""The rubrics a run starts with, for every service that may seed a rubric set (the scorer, the updater).

A set is seeded (version 1) the first time a run (or, in per-instance mode, an
instance of it) is scored. Its rubrics are the instance's own predefined set,
when RUBRICD_INSTANCE_RUBRICS names a JSON object {instance key: [rubric, ...]},
else the seed: RUBRICD_SEED_RUBRICS (a JSON list of rubrics) or the built-in
`seed_rubrics.json`.
"""

from importlib import resources
from pathlib import Path

import msgspec
from pydantic import BaseModel, Field, field_validator

from rubricd.messages import InstanceKey, Rubric

# What each file holds.
SeedFile = list[Rubric]
InstanceFile = dict[InstanceKey, list[Rubric]]


class SeedSettings(BaseModel):
    """Settings of the services that seed rubric sets; the files are checked at start, so a bad one stops the service naming it."""

    seed_rubrics: Path | None = Field(
        None, description="JSON list of rubrics every run starts with; default: the built-in seed"
    )
    instance_rubrics: Path | None = Field(
        None, description="JSON object {instance key: [rubric, ...]}: predefined per-instance sets"
    )

    @field_validator("seed_rubrics")
    @classmethod
    def _seed(cls, path: Path | None) -> Path | None:
        return _checked(path, SeedFile)

    @field_validator("instance_rubrics")
    @classmethod
    def _instances(cls, path: Path | None) -> Path | None:
        return _checked(path, InstanceFile)


class Seeds:
    def __init__(self, default: list[Rubric], per_instance: dict[str, list[Rubric]] | None = None) -> None:
        self.default = default
        self.per_instance = per_instance or {}

    def rubrics(self, instance_key: str | None) -> list[Rubric]:
        """The rubrics a new set of `instance_key` (None: the run's global set) starts with."""
        return self.per_instance.get(instance_key, self.default) if instance_key else self.default

    @classmethod
    def load(cls, settings: SeedSettings) -> "Seeds":
        default = (
            settings.seed_rubrics.read_bytes()
            if settings.seed_rubrics
            else resources.files(__package__).joinpath("seed_rubrics.json").read_bytes()
        )
        per_instance = settings.instance_rubrics.read_bytes() if settings.instance_rubrics else b"{}"
        return cls(msgspec.json.decode(default, type=SeedFile), msgspec.json.decode(per_instance, type=InstanceFile))


def _checked(path: Path | None, type_: type) -> Path | None:
    if path is None:
        return None
    if not path.is_file():
        raise ValueError(f"no such file: {path}")
    try:
        msgspec.json.decode(path.read_bytes(), type=type_)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise ValueError(f"{path}: {e}") from None
    return path
