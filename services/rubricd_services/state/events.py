"""Reading the events stream: which events a reader asked for (`rubricd tail`, the dashboard's event tail)."""

from rubricd.messages import RENAMED_KINDS, Event


def kind(name: str) -> str:
    """An event kind as given, or its new name if it was renamed."""
    return RENAMED_KINDS.get(name, name)


def matches(event: Event, run: str | None, services: list[str] | None, kinds: list[str] | None) -> bool:
    """The event is of `run` (None: any), one of `services` and one of `kinds` (None or empty: any)."""
    return (
        (run is None or event.run_id == run)
        and (not services or event.service in services)
        and (not kinds or kind(event.kind) in kinds)
    )
