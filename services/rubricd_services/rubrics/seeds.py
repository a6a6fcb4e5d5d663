"""The rubrics a run starts with, for every service that may seed a rubric set (the scorer, the updater).

A set is seeded (version 1) the first time a run, or an instance of it, is scored: from the instance's own
predefined set (RUBRICD_INSTANCE_RUBRICS) or the seed (RUBRICD_SEED_RUBRICS, else the built-in one). A file
with an undeclared meta-class is refused at start. The files: docs/researchers/rubrics.md, "Rubric sets".
"""

from importlib import resources
from pathlib import Path

import msgspec
from pydantic import BaseModel, Field, field_validator, model_validator

from rubricd.messages import HEALTHBENCH_AXES, InstanceKey, Rubric
from rubricd_services.rubrics import healthbench

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
        if path is not None and path.is_file() and healthbench.is_healthbench(path.read_bytes()):
            try:
                healthbench.read(path.read_bytes())
            except healthbench.Invalid as e:
                raise ValueError(f"{path}: {e}") from None
            return path
        return _checked(path, InstanceFile)

    @model_validator(mode="after")
    def _declared_classes(self) -> "SeedSettings":
        """Every rubric of the seed and instance files has a declared meta-class (ServiceSettings.meta_classes;
        these settings are mixed into a service's)."""
        declared = list(getattr(self, "meta_classes", HEALTHBENCH_AXES))
        if self.instance_rubrics and healthbench.is_healthbench(data := self.instance_rubrics.read_bytes()):
            try:
                healthbench.read(data, declared)  # to name the line
            except healthbench.Invalid as e:
                raise ValueError(f"RUBRICD_INSTANCE_RUBRICS ({self.instance_rubrics}): {e}") from None
        seeds = Seeds.load(self)
        for setting, path, sets in (
            ("RUBRICD_SEED_RUBRICS", self.seed_rubrics or "the built-in seed_rubrics.json", {"": seeds.default}),
            ("RUBRICD_INSTANCE_RUBRICS", self.instance_rubrics, seeds.per_instance),
        ):
            for key, rubrics in sets.items():
                for r in rubrics:
                    if r.meta_class not in declared:
                        raise ValueError(
                            f"{setting} ({path}): {f'instance {key!r}, ' if key else ''}rubric {r.id!r}: meta_class "
                            f"{r.meta_class!r} is not one of RUBRICD_META_CLASSES {declared}"
                        )
        return self


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
        return cls(msgspec.json.decode(default, type=SeedFile), instance_sets(settings.instance_rubrics))


def instance_sets(path: Path | None) -> dict[str, list[Rubric]]:
    """The predefined sets of an instance file (either format; see the module's docstring)."""
    if path is None:
        return {}
    data = path.read_bytes()
    return healthbench.read(data) if healthbench.is_healthbench(data) else msgspec.json.decode(data, type=InstanceFile)


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
