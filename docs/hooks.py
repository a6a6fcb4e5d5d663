"""MkDocs hooks: the reference pages, generated from the code at build time, and the check that the docs and the
README name only settings and commands that exist.

- reference/settings.md: every `RUBRICD_` setting of every settings class found by walking
  `rubricd_services.<package>.settings` (subclasses of `ServiceSettings`), with its type, default and description
  (`Field(description=...)`); nested models become `RUBRICD_A__B`.
- reference/messages.md: every message of `rubricd.messages.MESSAGES` and the Structs they hold (msgspec).
- reference/cli.md: every command of `rubricd_services.cli.__main__.parser()`.
- reference/keys.md: every stream, consumer group and key of `rubricd.keys`.
- reference/layout.md: the packages and modules of the tree, each with its docstring's first sentence.

The checks log warnings, which `mkdocs build --strict` (`make docs`) turns into a failed build.
"""

import argparse
import ast
import importlib
import importlib.util
import inspect
import json
import logging
import os
import pkgutil
import re
import subprocess
import types
from collections.abc import Iterator
from enum import Enum
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import msgspec
import msgspec.inspect as mi
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

log = logging.getLogger("mkdocs.hooks.rubricd")
ROOT = Path(__file__).resolve().parent.parent

# Where the code spells the RUBRICD_ names it reads that are not settings: the scripts, compose files, images and
# manifests (stack.sh's ports, images.sh's mirror, ...) and the modules that read the environment themselves (the
# simulator's RUBRICD_SIM_*). The suite's own (tests/) are not the docs' to name.
READERS = ["Makefile", ".ci/run", "compose.yaml", "compose.secure.yaml", "deploy", "services", "shared"]
CHECKED = ["README.md", "deploy/k8s/README.md"]  # besides every page under docs/


# Settings


class Setting(msgspec.Struct):
    name: str
    type: str
    descriptions: dict[str, str]  # settings class's service -> description
    defaults: dict[str, str]  # settings class's service -> default
    readers: list[str]


def settings_classes() -> list[tuple[str, type[BaseModel]]]:
    """(service, class) for ServiceSettings (the CLI reads it) and every subclass in rubricd_services.*.settings: the
    service is the class's package, or its `read_by` (the arm package's DatasetSettings: the CLI's)."""
    import rubricd_services
    from rubricd_services.settings import ServiceSettings

    for package in pkgutil.iter_modules(rubricd_services.__path__):
        name = f"rubricd_services.{package.name}.settings"
        if package.ispkg and importlib.util.find_spec(name):
            importlib.import_module(name)
    found: list[tuple[str, type[BaseModel]]] = [("every service", ServiceSettings)]
    todo = list(ServiceSettings.__subclasses__())
    while todo:
        cls = todo.pop(0)
        todo += cls.__subclasses__()
        if cls.__module__.startswith("rubricd_services."):
            found.append((getattr(cls, "read_by", None) or cls.__module__.split(".")[1], cls))
    return found


def settings() -> list[Setting]:
    by_name: dict[str, Setting] = {}
    for service, cls in settings_classes():
        prefix = str(cls.model_config.get("env_prefix", ""))
        for name, setting_type, description, default in _fields(prefix, cls.model_fields):
            s = by_name.setdefault(name, Setting(name, setting_type, {}, {}, []))
            s.descriptions[service] = description
            s.defaults[service] = default
            s.readers.append(service)
    return list(by_name.values())


def _fields(prefix: str, fields: dict[str, FieldInfo]) -> Iterator[tuple[str, str, str, str]]:
    for name, field in fields.items():
        env = f"{prefix}{name.upper()}"
        model = _model(field.annotation)
        if model is not None:  # a nested model: RUBRICD_LLM__BASE_URL
            yield from _fields(f"{env}__", model.model_fields)
        else:
            yield env, _type(field.annotation) + _bounds(_constraints(field)), field.description or "", _default(field)


def _constraints(field: FieldInfo) -> list[Any]:
    """The field's own constraints, and those of the type an optional one names (`Count | None`)."""
    args = get_args(field.annotation)
    optional = get_origin(field.annotation) in (Union, types.UnionType) and len(args) == 2 and type(None) in args
    named = [a for a in args if optional and get_origin(a) is Annotated]
    return [*field.metadata, *(m for a in named for info in get_args(a)[1:] for m in getattr(info, "metadata", []))]


def _model(annotation: Any) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _type(t: Any) -> str:
    origin, args = get_origin(t), get_args(t)
    if origin is Annotated:
        return _type(args[0])
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (Union, types.UnionType):
        return " \\| ".join(_type(a) for a in args)
    if origin is not None:
        return f"{getattr(origin, '__name__', origin)}[{', '.join(_type(a) for a in args)}]"
    if t is type(None):
        return "None"
    return getattr(t, "__name__", str(t))


BOUNDS = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<", "min_length": "length ≥", "max_length": "length ≤"}


def _bounds(metadata: list[Any]) -> str:
    found = [f"{mark} {getattr(m, key)}" for m in metadata for key, mark in BOUNDS.items() if hasattr(m, key)]
    found += [f"matching `{m.pattern}`" for m in metadata if getattr(m, "pattern", None)]
    return f" ({', '.join(found)})" if found else ""


def _default(field: FieldInfo) -> str:
    value = field.default_factory() if field.default is PydanticUndefined and field.default_factory else field.default  # type: ignore[call-arg]
    if value is None or value is PydanticUndefined:
        return "unset"
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, bool | int | float | list | dict) or value == "":
        return f"`{json.dumps(value)}`"
    return f"`{value}`"


def agent_defaults() -> tuple[list[str], list[str], dict[str, dict[str, object]]]:
    """The agents, the LLM fields one may override, and each agent's defaults (AGENT_DEFAULTS)."""
    from rubricd_services.settings import AGENT_DEFAULTS, LLMSettings

    return list(AGENT_DEFAULTS), list(LLMSettings.model_fields), AGENT_DEFAULTS


def settings_page() -> str:
    from rubricd_services.settings import LLMSettings

    agents, fields, defaults = agent_defaults()
    groups: dict[str, list[Setting]] = {}
    for s in settings():
        readers = "every service" if "every service" in s.readers else ", ".join(sorted(s.readers))
        groups.setdefault(readers, []).append(s)
    out = [
        "# Settings",
        "",
        "Generated from the settings classes at build time. Every setting is an environment variable with the "
        "prefix `RUBRICD_`; a nested model's fields are joined with `__` (`RUBRICD_LLM__MODEL`). Each service reads "
        "its own class; a bad value stops it at start, naming the setting. Lists and maps are JSON.",
        "",
    ]
    for readers in sorted(groups, key=lambda r: (r != "every service", "," in r, r)):
        out += [f"## {readers.capitalize() if readers == 'every service' else f'Read by: {readers}'}", ""]
        out += ["| setting | type | default | description |", "| --- | --- | --- | --- |"]
        for s in groups[readers]:
            out.append(f"| `{s.name}` | {s.type} | {_defaults(s.defaults)} | {_description(s.descriptions)} |")
        out.append("")
    out += [
        "## Per agent: `RUBRICD_AGENTS__<AGENT>__<FIELD>`",
        "",
        "Each agent's LLM settings start from `RUBRICD_LLM__*`; where those leave a field unset, the agent's own "
        "default below applies; `RUBRICD_AGENTS__<AGENT>__<FIELD>` always wins (e.g. "
        "`RUBRICD_AGENTS__JUDGE__MODEL=gpt-4o`). An unknown agent stops the service at start.",
        "",
        f"- agents: {', '.join(f'`{a.upper()}`' for a in agents)}",
        f"- fields: {', '.join(f'`{f.upper()}`' for f in fields)}",
        "",
    ]
    keys = sorted({k for d in defaults.values() for k in d})
    out += ["| agent | " + " | ".join(f"`{k}`" for k in keys) + " |", "| --- |" + " --- |" * len(keys)]
    for a in agents:  # the agent's own default, else the one of RUBRICD_LLM__<FIELD>
        values = [defaults[a].get(k, LLMSettings.model_fields[k].default) for k in keys]
        out.append(f"| `{a}` | " + " | ".join("unset" if v is None else str(v) for v in values) + " |")
    return "\n".join(out) + "\n"


def _defaults(defaults: dict[str, str]) -> str:
    base = defaults.get("every service")
    if base is None or all(v == base for v in defaults.values()):
        values = set(defaults.values())
        if len(values) == 1:
            return values.pop()
        return "; ".join(f"{service} {v}" for service, v in sorted(defaults.items()))
    others = ", ".join(f"{service} {v}" for service, v in sorted(defaults.items()) if v != base)
    return f"{base}; {others}"


def _description(descriptions: dict[str, str]) -> str:
    """One description, or each service's where they differ (a name two services read for their own purpose)."""
    base = descriptions.get("every service")
    distinct = {d for d in descriptions.values() if d and d != base}
    if base is not None and not distinct or len(set(descriptions.values())) == 1:
        return _cell(base if base is not None else next(iter(descriptions.values())))
    return "; ".join(f"{service}: {_cell(d)}" for service, d in sorted(descriptions.items()) if d)


def _cell(text: str) -> str:
    """Text for a table cell: Markdown outside code spans is kept, but `<...>` is shown, not read as HTML."""
    parts = re.split(r"(`[^`]*`)", " ".join(text.split()))
    return "".join(p if p.startswith("`") else p.replace("<", "&lt;").replace(">", "&gt;") for p in parts).replace(
        "|", "\\|"
    )


def setting_names() -> set[str]:
    """Every settable name, the per-agent family spelled out."""
    agents, fields, _ = agent_defaults()
    names = {s.name for s in settings()}
    return names | {f"RUBRICD_AGENTS__{a.upper()}__{f.upper()}" for a in agents for f in fields}


def read_names() -> set[str]:
    """Every RUBRICD_ name the code reads: the settings, the old names they are still read by, and the names the
    READERS spell out."""
    from rubricd_services.settings import RENAMED

    renamed = set(RENAMED) | {old for _, cls in settings_classes() for old in getattr(cls, "renamed", {})}
    spelled: set[str] = set()
    for reader in READERS:
        path = ROOT / reader
        for file in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if file.is_file() and "__pycache__" not in file.parts:
                spelled |= set(re.findall(r"RUBRICD_[A-Z0-9_]*[A-Z0-9]", file.read_text(errors="ignore")))
    return setting_names() | renamed | spelled


# Messages


def messages_page() -> str:
    from rubricd.messages import MESSAGES

    out = [
        "# Messages",
        "",
        "Generated from the msgspec Structs at build time. On the wire each is the UTF-8 JSON of one stream "
        "entry's `__data__` field ([the wire format](../integrators/wire.md)); `make schemas` writes their JSON "
        "Schema, one document (`shared/schemas/rubricd.schema.json`, `python -m rubricd.schema [FILE]`). Fields "
        "marked *required* must be sent; every other has the default shown. Unknown fields are ignored (but a "
        "rollout a trainer publishes: refused), and fields are only ever added.",
        "",
    ]
    seen: set[type] = set()
    todo: list[mi.StructType] = [t for t in mi.multi_type_info(MESSAGES) if isinstance(t, mi.StructType)]
    while todo:
        struct = todo.pop(0)
        if struct.cls in seen:
            continue
        seen.add(struct.cls)
        doc = inspect.cleandoc(struct.cls.__doc__ or "")
        out += [f"## {struct.cls.__name__}", ""]
        if struct.tag is not None:
            out += [f"Tag: `{struct.tag_field}: {json.dumps(struct.tag)}`.", ""]
        out += ["\n\n".join(_cell(par).replace("\\|", "|") for par in doc.split("\n\n")), ""] if doc else []
        out += ["| field | type | default |", "| --- | --- | --- |"]
        for f in struct.fields:
            default = "*required*" if f.required else _msg_default(f)
            out.append(f"| `{f.encode_name}` | {_msg_type(f.type, todo)} | {default} |")
        out.append("")
    return "\n".join(out) + "\n"


def _msg_default(f: mi.Field) -> str:
    if f.default is msgspec.NODEFAULT and f.default_factory is msgspec.NODEFAULT:  # UNSET: required as the doc says
        return "*required of a text rollout*"
    value = f.default_factory() if f.default is msgspec.NODEFAULT else f.default
    return f"`{msgspec.json.encode(value).decode()}`"


def _msg_type(t: mi.Type, todo: list[mi.StructType]) -> str:
    if isinstance(t, mi.Metadata):
        return _msg_type(t.type, todo)
    if isinstance(t, mi.StructType):
        todo.append(t)
        return f"[{t.cls.__name__}](#{t.cls.__name__.lower()})"
    if isinstance(t, mi.UnionType):
        return " \\| ".join(_msg_type(x, todo) for x in t.types)
    if isinstance(t, mi.ListType | mi.SetType | mi.FrozenSetType | mi.VarTupleType):
        return f"list[{_msg_type(t.item_type, todo)}]"
    if isinstance(t, mi.DictType):
        return f"map[{_msg_type(t.key_type, todo)}, {_msg_type(t.value_type, todo)}]"
    if isinstance(t, mi.LiteralType):
        return " \\| ".join(f"`{json.dumps(v)}`" for v in t.values)
    if isinstance(t, mi.EnumType):
        return " \\| ".join(f"`{json.dumps(m.value)}`" for m in t.cls if isinstance(m, Enum))
    names = {mi.StrType: "str", mi.IntType: "int", mi.FloatType: "float", mi.BoolType: "bool", mi.NoneType: "null"}
    name = names.get(type(t), type(t).__name__.removesuffix("Type").lower())
    bounds = [f"{mark} {getattr(t, key)}" for key, mark in BOUNDS.items() if getattr(t, key, None) is not None]
    if getattr(t, "pattern", None):
        bounds.append(f"matching `{t.pattern}`")  # type: ignore[attr-defined]
    return f"{name} ({', '.join(bounds)})".replace("|", "\\|") if bounds else name


# The CLI


def commands() -> Iterator[tuple[list[str], argparse.ArgumentParser]]:
    from rubricd_services.cli.__main__ import parser

    def walk(words: list[str], p: argparse.ArgumentParser) -> Iterator[tuple[list[str], argparse.ArgumentParser]]:
        yield words, p
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk([*words, name], sub)

    yield from walk(["rubricd"], parser())


def cli_page() -> str:
    os.environ["COLUMNS"] = "110"  # argparse's width, for the same page everywhere
    out = [
        "# The `rubricd` command",
        "",
        "Generated from its argparse parser at build time. `rubricd` (in the venv: `.venv/bin/rubricd`, or "
        "`python -m rubricd_services.cli`) reads the same `RUBRICD_*` settings as the services "
        "([settings](settings.md)).",
        "",
    ]
    for words, p in commands():
        out += [f"## `{' '.join(words)}`", "", "```text", p.format_help().rstrip(), "```", ""]
    return "\n".join(out)


def command_words() -> dict[tuple[str, ...], set[str]]:
    """Each command's words -> what may follow it as a word: its subcommands, or its first argument's choices."""
    follow: dict[tuple[str, ...], set[str]] = {}
    for words, p in commands():
        first = next((a for a in p._actions if not a.option_strings and a.dest != "help"), None)
        if first is not None and first.choices is not None:
            follow[tuple(words)] = set(first.choices)
    return follow


# Keys


def keys_page() -> str:
    """Streams and groups from the assignments of `Keys.__init__` and the module's constants (with their comments),
    and the other keys from the methods' return f-strings and docstrings."""
    import rubricd.keys as keys

    source = Path(inspect.getfile(keys)).read_text()
    lines = source.splitlines()
    out = [
        "# Streams, groups and keys",
        "",
        "Generated from `rubricd.keys` at build time. Every name starts with the namespace, `<ns>` "
        "(`RUBRICD_NAMESPACE`, default `rubricd`).",
        "",
        "## Streams",
        "",
        "| stream | holds |",
        "| --- | --- |",
    ]
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Keys")
    groups = [
        (n.targets[0].id, ast.literal_eval(n.value), _comment(lines[n.lineno - 1]))
        for n in tree.body
        if isinstance(n, ast.Assign)
        and isinstance(n.targets[0], ast.Name)
        and n.targets[0].id.isupper()
        and isinstance(n.value, ast.Constant)
        and n.targets[0].id.endswith("S")
        and n.targets[0].id != "DEFAULT_NAMESPACE"
    ]
    methods = [n for n in cls.body if isinstance(n, ast.FunctionDef)]
    init = next(n for n in methods if n.name == "__init__")
    for node in ast.walk(init):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.JoinedStr)
            and not node.targets[0].attr.startswith("_")
        ):  # type: ignore[attr-defined]
            out.append(f"| `{_pattern(node.value)}` | {_cell(_comment(lines[node.lineno - 1]))} |")
    out.append("| `<ns>:replies:<client_id>` | Score and Preference, to one trainer client |")
    out += ["", "## Consumer groups", "", "| group | |", "| --- | --- |"]
    out += [f"| `{value}` | {_cell(comment)} |" for _, value, comment in groups]
    out += ["", "## Keys", "", "| key | holds |", "| --- | --- |"]
    for m in methods:
        ret = next((n for n in ast.walk(m) if isinstance(n, ast.Return) and isinstance(n.value, ast.JoinedStr)), None)
        doc = ast.get_docstring(m)
        if ret is not None and doc and m.name not in ("replies",):
            out.append(f"| `{_pattern(ret.value)}` | {_cell(' '.join(doc.split()))} |")  # type: ignore[arg-type]
    return "\n".join(out) + "\n"


def _comment(line: str) -> str:
    return line.split("#", 1)[1].strip() if "#" in line else ""


def _pattern(f: ast.JoinedStr) -> str:
    parts = []
    for v in f.values:
        if isinstance(v, ast.Constant):
            parts.append(str(v.value))
        else:
            name = ast.unparse(v.value)  # type: ignore[attr-defined]
            parts.append(
                {"ns": "<ns>", "self.namespace": "<ns>", "instance_key or GLOBAL": "<instance>"}.get(name, f"<{name}>")
            )
    return "".join(parts)


# The layout


def layout_page() -> str:
    """Each service package and shared module with the first sentence of its docstring, read from the tree."""
    out = [
        "# Layout",
        "",
        "Generated from the tree at build time: each package's or module's docstring, first sentence.",
        "",
        "| path | holds |",
        "| --- | --- |",
    ]
    services = [
        p
        for package in ("services/rubricd_services", "services/rubricd_testbed")
        for p in sorted((ROOT / package).iterdir())
        if (p / "__init__.py").exists()
    ]
    shared = [p for p in (ROOT / "shared/rubricd").iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()]
    for path in [*services, *sorted(shared)]:
        sources = [path / "__init__.py", path / "app.py"] if path.is_dir() else [path]  # a package: else its app
        docs = (ast.get_docstring(ast.parse(f.read_text())) for f in sources if f.exists())
        doc = next((d for d in docs if d), "")
        first = re.split(r"(?<=\.)\s", " ".join(doc.split()), maxsplit=1)[0]
        name = f"{path.relative_to(ROOT)}{'/' if path.is_dir() else ''}"
        out.append(f"| `{name}` | {_cell(first)} |")
    out += [
        "| `shared/schemas/rubricd.schema.json` | the JSON Schema of every message, in one document (`make schemas`) |",
        "| `deploy/local/stack.sh` | Redis, Weaviate, the simulator and the services as local processes (`make up`) |",
        "| `deploy/docker/` | the services' image; `compose.yaml` runs the whole stack from images |",
        "| `deploy/k8s/` | kustomize manifests ([Kubernetes](../operators/kubernetes.md)) |",
        "| `tests/` | mirrors the code; `tests/system/` tests the whole stack, `tests/bench/` holds the benchmark |",
    ]
    return "\n".join(out) + "\n"


# The hooks


PAGES = {
    "reference/settings.md": settings_page,
    "reference/messages.md": messages_page,
    "reference/cli.md": cli_page,
    "reference/keys.md": keys_page,
    "reference/layout.md": layout_page,
}


# Plans


def plan_output(args: str) -> str:
    """`rubricd plan ARGS` as a shell block: the command and what it prints, run when the page is built."""
    import contextlib
    import io
    import shlex

    from rubricd_services.cli.__main__ import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        if main(["plan", *shlex.split(args)]) != 0:
            raise RuntimeError(f"rubricd plan {args} failed")
    return f"```console\n$ rubricd plan {args}\n{out.getvalue().rstrip()}\n```"


def plan_defaults() -> str:
    """The settings `rubricd plan` assumes, as a table of their names and defaults (the services' own)."""
    from rubricd_services.cli.plan import Defaults

    d = Defaults.read()
    rows = [
        ("RUBRICD_ANSWER_TTL_S", f"{d.answer_ttl_s:,} s", "a score kept for redelivery"),
        ("RUBRICD_JUDGE_CACHE_TTL_S", f"{d.judge_cache_ttl_s:,} s", "a verdict reused"),
        ("RUBRICD_KEPT_MAXLEN", f"{d.kept_maxlen:,}", "a run's scored rollouts kept (the scorer's)"),
        ("RUBRICD_KEPT_TTL_S", f"{d.kept_ttl_s:,} s", "after a run's last score"),
        ("RUBRICD_STREAM_MAXLEN", f"{d.stream_maxlen:,}", "entries a stream keeps"),
        ("RUBRICD_MAX_IN_FLIGHT", f"{d.scorer_in_flight} / {d.analyzer_in_flight}", "a scorer's / an analyzer's"),
        ("RUBRICD_CHUNK_SIZE", f"{d.chunk_size}", "analyses a chunk summary reads"),
    ]
    return "| setting | default | |\n| --- | --- | --- |\n" + "".join(f"| `{n}` | {v} | {w} |\n" for n, v, w in rows)


# Versions

# (what, where its pin is, the pattern that reads it, how the suite runs it)
PINS = [
    (
        "TRL",
        "Makefile",
        r"\btrl==([\w.]+)",
        "GRPOTrainer trains on CPU, one process and two ranks (tests/system/test_trl.py)",
    ),
    (
        "verl",
        "Makefile",
        r"\bverl==([\w.]+)",
        "its reward loop and tool agent loop on a local Ray (tests/system/test_verl.py)",
    ),
    (
        "OpenRLHF",
        "Makefile",
        r"\bopenrlhf==([\w.]+)",
        "its agent executor posting to the gateway (tests/gateway/test_openrlhf.py)",
    ),
    ("torch", "Makefile", r"\btorch==([\w.]+)", "CPU, for TRL, verl and OpenRLHF"),
    ("transformers", "Makefile", r"\btransformers==([\w.]+)", "for TRL"),
    (
        "ART",
        "Makefile",
        r"\bopenpipe-art==([\w.]+)",
        "gather_trajectory_groups, in place of RULER (tests/system/test_art.py)",
    ),
    (
        "verifiers",
        "Makefile",
        r"\bverifiers==([\w.]+)",
        "an environment's rubric and its evaluation (tests/system/test_verifiers.py)",
    ),
    (
        "NeMo Gym",
        "Makefile",
        r"NEMO_GYM_VERSION := ([\w.]+)",
        "its resources server's verify calls, on Python 3.13 (tests/gateway/test_nemo_gym.py)",
    ),
    ("Weaviate", "deploy/local/stack.sh", r"WEAVIATE_VERSION=(v[\w.]+)", "built from source, every stack"),
    (
        "Kubernetes",
        "deploy/local/cluster.sh",
        r"K8S_VERSION=(v[\w.]+)",
        "a cluster built from its modules (make k8s-test)",
    ),
    ("KEDA", "deploy/local/cluster.sh", r"KEDA_VERSION=(v[\w.]+)", "the redis-streams scaler, on that cluster"),
    (
        "llama.cpp",
        "deploy/local/stack.sh",
        r"LLAMA_CPP_PYTHON=([\w.]+)",
        "llama-server, as llama-cpp-python's sdist vendors it",
    ),
]


def versions_table() -> str:
    """What the suite runs rubricd against, each version read from the pin the tests use."""
    rows = []
    for name, where, pattern, how in PINS:
        found = re.search(pattern, (ROOT / where).read_text())
        if found is None:
            raise RuntimeError(f"no pin of {name} in {where} ({pattern})")
        version = found[1] + (" (llama-cpp-python)" if name == "llama.cpp" else "")
        rows.append((name, version, how, where))
    redis = subprocess.run(["redis-server", "--version"], capture_output=True, text=True, check=False).stdout
    served = re.search(r"v=([\d.]+)", redis)
    rows.append(("Redis", served[1] if served else "the system's", "the distribution's redis-server (Debian)", "-"))
    rows.append(("slime", "not run", "its remote_rm requests, as its source sends them (tests/gateway)", "-"))
    table = "| | version | how the suite runs it | pinned in |\n| --- | --- | --- | --- |\n"
    return table + "".join(
        f"| {n} | {v} | {h} | `{w}` |\n" if w != "-" else f"| {n} | {v} | {h} | |\n" for n, v, h, w in rows
    )


def on_page_markdown(markdown: str, **_: Any) -> str:
    """`<!-- rubricd plan ARGS -->` becomes the plan's own output, `<!-- rubricd plan defaults -->` its settings,
    `<!-- rubricd versions -->` the versions the suite runs against."""
    markdown = markdown.replace("<!-- rubricd versions -->", versions_table())
    markdown = markdown.replace("<!-- rubricd plan defaults -->", plan_defaults())
    return re.sub(r"<!-- rubricd plan (.+?) -->", lambda m: plan_output(m.group(1)), markdown)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for path, page in PAGES.items():
        files.append(File.generated(config, path, content=page()))
    check(Path(config.docs_dir))
    return files


def check(docs: Path) -> None:
    """Warn for every RUBRICD_ name and `rubricd` command the pages and the README name that does not exist, and
    every relative link of the README that leads nowhere."""
    known = read_names()
    follow = command_words()
    top = follow[("rubricd",)]
    for path in [*sorted(docs.rglob("*.md")), *(ROOT / p for p in CHECKED)]:
        text = path.read_text()
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        for name in sorted(set(re.findall(r"RUBRICD_[A-Za-z0-9_*<>]*", text))):
            if not _known(name, known):
                log.warning(f"{where}: {name} is read by no code (reference/settings.md, or a script's variable)")
        for code in re.findall(r"```.*?```|`[^`\n]+`", text, flags=re.S):
            # a command line: `rubricd` first on a line, after a shell operator, or as a path's last part
            for words in re.findall(r"(?:^[ \t`]*|[;&|(][ \t]*|/)rubricd((?:[ \t]+[a-z][a-z_-]*)+)", code, re.M):
                _check_command(where, words.split(), top, follow)
    readme = ROOT / "README.md"
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme.read_text()):
        if "://" not in target and not (ROOT / target).exists():
            log.warning(f"README.md: the link {target} leads nowhere")


def _known(name: str, known: set[str]) -> bool:
    if name in known or name == "RUBRICD_":  # the prefix itself
        return True
    if "*" in name or "<" in name or name.endswith("__"):  # a family: RUBRICD_*_PROMPT, RUBRICD_LLM__(*)
        pattern = re.sub(r"<[A-Za-z_]+>", "*", name) + ("*" if name.endswith("__") else "")
        return pattern != "RUBRICD_" and any(fnmatchcase(k, pattern) for k in known)
    return False


def _check_command(where: Path, words: list[str], top: set[str], follow: dict[tuple[str, ...], set[str]]) -> None:
    if words[0] not in top:
        log.warning(f"{where}: `rubricd {words[0]}` is not a command (reference/cli.md)")
        return
    path = ("rubricd", words[0])
    for word in words[1:]:
        if path not in follow:
            return
        if word not in follow[path]:
            log.warning(f"{where}: `{' '.join(path)} {word}`: expected one of {sorted(follow[path])}")
            return
        path = (*path, word)
