"""The evaluation memory every service shares: analyses, summaries and rubric updates in Weaviate.

One Weaviate collection per namespace holds every run's memory; every read is
filtered by run, so two runs never see each other's memory. Objects carry our
own vectors (the collection has no vectorizer; see `embedder.py`) and a
deterministic id derived from what the object is about (run, kind, instance,
step, ref): a re-delivered message overwrites its object instead of adding a
second one, which is what makes the services' effects exactly-once.
"""

import enum
import logging
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import msgspec
import weaviate
from weaviate.classes.aggregate import Metrics
from weaviate.classes.config import Configure, DataType, Property, Tokenization
from weaviate.classes.init import Auth
from weaviate.classes.query import Filter, MetadataQuery
from weaviate.collections import CollectionAsync
from weaviate.collections.classes.aggregate import AggregateInteger
from weaviate.collections.classes.data import DataObject
from weaviate.exceptions import UnexpectedStatusCodeError

from rubricd_services.memory.embedder import Embedder
from rubricd_services.settings import ServiceSettings

log = logging.getLogger("rubricd.memory")

_ID_SPACE = uuid.UUID("8a3f2c1e-5b7d-4e2a-9c60-7d1b0e4f6a21")  # uuid5 namespace of memory object ids
_PROPERTIES = ["kind", "run_id", "step", "text", "ref", "instance_key", "message"]


class MemoryKind(enum.StrEnum):
    ANALYSIS = "analysis"
    CHUNK_SUMMARY = "chunk_summary"
    STEP_SUMMARY = "step_summary"
    RUBRIC_UPDATE = "rubric_update"


class MemoryItem(msgspec.Struct, frozen=True, kw_only=True):
    """One memory: `text` is what is embedded, searched and shown to LLMs; `message` the whole source."""

    kind: MemoryKind
    run_id: str
    step: int
    text: str
    ref: str = ""  # rollout_id of an analysis, chunk index of a chunk summary, version of an update
    instance_key: str | None = None
    message: bytes = b""  # the full message JSON (RolloutAnalysis, StepSummary, RubricsUpdated, ...)


class Hit(msgspec.Struct, frozen=True):
    """A search result: the memory, its hybrid score (higher is closer) and its object id."""

    item: MemoryItem
    score: float
    id: str


DELETE_PAGE = 10_000  # Weaviate's QUERY_MAXIMUM_RESULTS default: the most one delete_many deletes


class Kept(msgspec.Struct, frozen=True):
    """What a run's memory holds of one kind."""

    count: int
    first_step: int
    last_step: int


def collection_name(namespace: str) -> str:
    """Weaviate class names must match ^[A-Z][_0-9A-Za-z]*$; namespaces may hold '-'."""
    return "Memory_" + namespace.replace("-", "_")


def memory_id(namespace: str, item: MemoryItem) -> str:
    """The object id of `item`: the same memory (re-delivered or recomputed) always gets the same one."""
    key = "\x1f".join([namespace, item.kind, item.run_id, item.instance_key or "", str(item.step), item.ref])
    return str(uuid.uuid5(_ID_SPACE, key))


class Memory:
    """Put, list and search one namespace's evaluation memory (create it with `connect`)."""

    def __init__(self, client: weaviate.WeaviateAsyncClient, embedder: Embedder, namespace: str) -> None:
        self.client, self.embedder, self.namespace = client, embedder, namespace
        self.collection: CollectionAsync = client.collections.use(collection_name(namespace))

    @classmethod
    async def connect(cls, settings: ServiceSettings, embedder: Embedder) -> "Memory":
        """Connect to `settings.weaviate_url` (+ gRPC port), with its API key if set, and make sure the collection
        exists."""
        url = urlsplit(settings.weaviate_url)
        secure = url.scheme == "https"
        host = url.hostname or "127.0.0.1"
        key = settings.weaviate_api_key
        client = weaviate.use_async_with_custom(
            http_host=host,
            http_port=url.port or (443 if secure else 80),
            http_secure=secure,
            grpc_host=host,
            grpc_port=settings.weaviate_grpc_port,
            grpc_secure=secure,
            auth_credentials=Auth.api_key(key.get_secret_value()) if key else None,
        )
        await client.connect()
        memory = cls(client, embedder, settings.namespace)
        try:
            await memory.ensure_collection()
        except BaseException:
            await client.close()
            raise
        return memory

    async def ensure_collection(self) -> None:
        """Create the collection if missing; another service creating it at the same time is fine. One made with
        another vector index than today's flat one is used as it is, with a warning."""
        name = collection_name(self.namespace)
        if await self.client.collections.exists(name):
            if kinds := await self.other_index():
                log.warning(
                    "memory: collection %s has a %s vector index, not the flat one rubricd makes: it works, but "
                    "each insert costs more as the run's memory grows; docs/operators/capacity.md says how to remake "
                    "it",
                    name,
                    "/".join(kinds),
                )
            return
        exact: dict[str, Any] = {
            "data_type": DataType.TEXT,
            "tokenization": Tokenization.FIELD,
            "index_searchable": False,
        }
        try:
            await self.client.collections.create(
                name,
                # A flat index, not HNSW: a search is filtered by run, and Weaviate searches a filter's few
                # thousand objects by brute force in either; HNSW's graph only made each insert dearer as the
                # collection grew (3.8 times over 300 steps), and kept deleted memories in it until a clean-up.
                # Fixed when the collection is made: docs/operators/capacity.md#where-one-weaviate-stops.
                vector_config=Configure.Vectors.self_provided(vector_index_config=Configure.VectorIndex.flat()),
                properties=[
                    Property(name="run_id", **exact),
                    Property(name="kind", **exact),
                    Property(name="instance_key", **exact),
                    Property(name="ref", **exact),
                    Property(name="step", data_type=DataType.INT, index_range_filters=True),
                    Property(name="text", data_type=DataType.TEXT, tokenization=Tokenization.WORD),
                    # Kept whole for the reader, never filtered or searched.
                    Property(name="message", data_type=DataType.TEXT, index_filterable=False, index_searchable=False),
                ],
            )
        except UnexpectedStatusCodeError:
            if not await self.client.collections.exists(name):
                raise

    async def other_index(self) -> list[str]:
        """The collection's vector index types other than flat (a collection made before 2026-11-29: HNSW)."""
        config = await self.collection.config.get()
        kinds = [v.vector_index_config.vector_index_type() for v in (config.vector_config or {}).values()]
        if config.vector_index_type is not None:  # a collection's one unnamed vector
            kinds.append(config.vector_index_type.value)
        return sorted({k for k in kinds if k != "flat"})

    async def close(self) -> None:
        await self.client.close()

    async def drop(self) -> None:
        """Delete this namespace's whole memory (tests, `clean`)."""
        await self.client.collections.delete(collection_name(self.namespace))

    async def put(self, items: list[MemoryItem]) -> list[str]:
        """Store `items` (one embedding call for all); an item stored before is overwritten. Returns ids."""
        if not items:
            return []
        vectors = await self.embedder.embed([item.text for item in items])
        ids = [memory_id(self.namespace, item) for item in items]
        objects = [
            DataObject(properties=_properties(item), uuid=id_, vector=vector)
            for item, id_, vector in zip(items, ids, vectors)
        ]
        done = await self.collection.data.insert_many(objects)
        if done.has_errors:
            first = next(iter(done.errors.values()))
            raise RuntimeError(f"memory: {len(done.errors)} of {len(items)} objects not stored: {first.message}")
        return ids

    async def recent(
        self,
        run_id: str,
        kind: MemoryKind,
        *,
        limit: int,
        instance_key: str | None = None,
        before_step: int | None = None,
        step: int | None = None,
        after_step: int | None = None,
    ) -> list[MemoryItem]:
        """The latest `limit` memories of `kind` in the run (and instance), highest step first; of one `step`, or
        before one, or after one.

        Sorted here, never by Weaviate: its sort by a property reads every object of the collection whatever the
        filter (8 ms of its CPU a call at 3,000 objects, against 1 ms unsorted: docs/operators/capacity.md), so a
        run's every step would cost more than the last. A read before a step looks back through a window of steps,
        doubled until it holds `limit` memories or reaches the run's start (or `after_step`)."""
        filters = _filters(run_id, [kind], instance_key)
        if step is not None:
            filters &= Filter.by_property("step").equal(step)
        if after_step is not None:
            filters &= Filter.by_property("step").greater_than(after_step)
        if before_step is None or step is not None:
            return _latest(await self._fetch(filters), limit)
        floor = after_step if after_step is not None else -1
        window = max(4 * limit, 16)
        while True:
            low = max(floor, before_step - 1 - window)
            found = await self._fetch(
                filters
                & Filter.by_property("step").greater_than(low)
                & Filter.by_property("step").less_than(before_step)
            )
            if len(found) >= limit or low <= floor:
                return _latest(found, limit)
            window *= 2

    async def _fetch(self, filters: Any) -> list[MemoryItem]:
        """What `filters` matches, unsorted, up to one read's most (Weaviate's QUERY_MAXIMUM_RESULTS)."""
        found = await self.collection.query.fetch_objects(
            filters=filters, limit=DELETE_PAGE, return_properties=_PROPERTIES
        )
        return [_item(o.properties) for o in found.objects]

    async def search(
        self,
        run_id: str,
        query: str,
        *,
        limit: int,
        kinds: Sequence[MemoryKind] | None = None,
        instance_key: str | None = None,
        alpha: float = 0.5,
    ) -> list[Hit]:
        """The run's memories closest to `query`: hybrid of vector similarity (alpha=1) and BM25 on text (alpha=0)."""
        [vector] = await self.embedder.embed([query])
        found = await self.collection.query.hybrid(
            query=query,
            vector=vector,
            alpha=alpha,
            query_properties=["text"],
            filters=_filters(run_id, kinds, instance_key),
            limit=limit,
            return_metadata=MetadataQuery(score=True),
            return_properties=_PROPERTIES,
        )
        return [Hit(_item(o.properties), o.metadata.score or 0.0, str(o.uuid)) for o in found.objects]

    async def count(self, run_id: str, kind: MemoryKind | None = None) -> int:
        """How many memories the run holds (of one kind, if given)."""
        found = await self.collection.aggregate.over_all(
            filters=_filters(run_id, [kind] if kind else None, None), total_count=True
        )
        return found.total_count or 0

    async def forget(self, run_id: str, kind: MemoryKind, before_step: int) -> int:
        """Delete the run's memories of `kind` from the steps before `before_step` (retention); how many. A rubric
        update (the rubric history) is never deleted: it raises ValueError."""
        if kind is MemoryKind.RUBRIC_UPDATE:
            raise ValueError("the rubric history (rubric_update memories) is always kept")
        where = _filters(run_id, [kind], None) & Filter.by_property("step").less_than(before_step)
        return await self._delete(where, f"{kind} memories of {run_id}")

    async def every(self, run_id: str, window: int = 64) -> AsyncIterator[MemoryItem]:
        """Every memory of the run (`rubricd archive`), a window of steps at a time: a window that reaches the
        most one read returns is halved; a single step that does raises ValueError."""
        for kind, k in (await self.kept(run_id)).items():
            step = k.first_step
            while step <= k.last_step:
                where = _filters(run_id, [kind], None) & Filter.by_property("step").greater_or_equal(step)
                where &= Filter.by_property("step").less_than(step + window)
                found = await self.collection.query.fetch_objects(
                    filters=where, limit=DELETE_PAGE, return_properties=_PROPERTIES
                )
                if len(found.objects) == DELETE_PAGE:
                    if window == 1:
                        raise ValueError(f"step {step} holds {DELETE_PAGE:,}+ {kind} memories: more than one read")
                    window //= 2
                    continue
                for o in found.objects:
                    yield _item(o.properties)
                step += window

    async def drop_run(self, run_id: str) -> int:
        """Delete every memory of the run, its rubric history too (`rubricd archive`, after the export); how
        many."""
        return await self._delete(_filters(run_id, None, None), f"memories of {run_id}")

    async def _delete(self, where: Any, what: str) -> int:
        """Delete what `where` matches, a call at a time (one deletes at most Weaviate's QUERY_MAXIMUM_RESULTS)."""
        deleted = 0
        while True:
            done = await self.collection.data.delete_many(where=where)
            deleted += done.successful
            if done.failed:
                raise RuntimeError(f"memory: {done.failed} of {done.matches} {what} not deleted")
            if done.matches < DELETE_PAGE or done.successful == 0:
                return deleted

    async def kept(self, run_id: str) -> dict[MemoryKind, Kept]:
        """What the run's memory holds, by kind: how many memories, from which step to which."""
        found: dict[MemoryKind, Kept] = {}
        for kind in MemoryKind:
            got = await self.collection.aggregate.over_all(
                filters=_filters(run_id, [kind], None),
                total_count=True,
                return_metrics=Metrics("step").integer(minimum=True, maximum=True),
            )
            step = got.properties["step"]
            if got.total_count:
                assert isinstance(step, AggregateInteger)
                found[kind] = Kept(got.total_count, int(step.minimum or 0), int(step.maximum or 0))
        return found


def _latest(items: list[MemoryItem], limit: int) -> list[MemoryItem]:
    """The `limit` of `items` with the highest steps, highest first."""
    return sorted(items, key=lambda item: item.step, reverse=True)[:limit]


def _filters(run_id: str, kinds: Sequence[MemoryKind] | None, instance_key: str | None) -> Any:
    filters = Filter.by_property("run_id").equal(run_id)
    if kinds:
        filters &= Filter.by_property("kind").contains_any([str(k) for k in kinds])
    if instance_key is not None:
        filters &= Filter.by_property("instance_key").equal(instance_key)
    return filters


def _properties(item: MemoryItem) -> dict[str, Any]:
    props: dict[str, Any] = {
        "kind": str(item.kind),
        "run_id": item.run_id,
        "step": item.step,
        "text": item.text,
        "ref": item.ref,
        "message": item.message.decode(),
    }
    if item.instance_key is not None:
        props["instance_key"] = item.instance_key
    return props


def _item(props: Mapping[str, Any]) -> MemoryItem:
    return MemoryItem(
        kind=MemoryKind(props["kind"]),
        run_id=props["run_id"],
        step=int(props["step"]),
        text=props["text"],
        ref=props.get("ref") or "",
        instance_key=props.get("instance_key"),
        message=(props.get("message") or "").encode(),
    )
