"""`agentgen init`: a commented starter `agent.yaml`, asked for on a terminal.

Each question has a flag; `--yes` (or a stdin that is not a terminal) takes the default
of every question not given by a flag. The file starts with a `yaml-language-server`
line naming agentgen's manifest schema, so editors with the YAML language server
complete and check it, and it passes `agentgen validate` as written.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import AgentgenError

MANIFEST_FILE = "agent.yaml"
NAME = re.compile(r"^[a-z][a-z0-9-]*$")
KINDS = ("text", "json")
DEFAULT_DESCRIPTION = "Answers each prompt."


@dataclass(frozen=True)
class Answers:
    name: str
    description: str
    input: str  # "text" | "json"
    output: str  # "text" | "json"
    streaming: bool
    model: str = ""  # a pydantic-ai model id: the agent runs a model (the manifest's `llm`)


def default_name(folder: Path) -> str:
    """The folder's name as a manifest name (`My Agent_2` -> `my-agent-2`)."""
    words = re.findall(r"[a-z0-9]+", folder.name.lower())
    name = "-".join(words).lstrip("0123456789-")
    return name if NAME.match(name) else "my-agent"


def schema_location() -> str:
    """Where the editor finds the manifest schema: its published URL, the file in this
    agentgen's release tag of the repository. The same on every machine, so the manifest
    can be committed (a local path would name this machine's site-packages)."""
    from .. import REPOSITORY
    from .project import agentgen_version

    raw = REPOSITORY.replace("https://github.com/", "https://raw.githubusercontent.com/", 1)
    return f"{raw}/v{agentgen_version()}/schema/manifest.schema.json"


def _check_name(name: str) -> str:
    if not NAME.match(name):
        raise AgentgenError(
            f"{json.dumps(name)} is not a manifest name",
            hint="lowercase letters, digits and hyphens, starting with a letter: my-agent",
        )
    return name


def _check_model(model: str) -> str:
    """An empty answer (no model) or a pydantic-ai `provider:model` id."""
    from ..manifest.llm import model_id_problem

    problem = model_id_problem(model) if model else None
    if problem is not None:
        raise AgentgenError(problem, hint="agentgen init --model openai:gpt-4.1-mini")
    return model


def _check_kind(kind: str, what: str) -> str:
    if kind not in KINDS:
        raise AgentgenError(f"{what} must be text or json, not {json.dumps(kind)}")
    return kind


def ask(given: dict[str, object], defaults: Answers) -> Answers:
    """Ask (on the terminal) each question no flag answered."""
    import click

    def text(key: str, question: str, default: str, check: object) -> str:
        if given.get(key) is not None:
            return str(given[key])
        while True:
            value = str(click.prompt(question, default=default)).strip()
            try:
                return check(value)  # type: ignore[operator,no-any-return]
            except AgentgenError as err:
                click.echo(f"  {err.message}" + (f" ({err.hint})" if err.hint else ""))

    def choice(key: str, question: str, default: str) -> str:
        if given.get(key) is not None:
            return str(given[key])
        picked = click.prompt(question, default=default, type=click.Choice(KINDS))
        return str(picked)

    name = text("name", "Agent name", defaults.name, _check_name)
    description = text("description", "Description", defaults.description, lambda v: v)
    input_kind = choice("input", "Input: plain text or a JSON object", defaults.input)
    output_kind = choice("output", "Output: plain text or a JSON object", defaults.output)
    streaming = given.get("streaming")
    if streaming is None:
        streaming = click.confirm("Stream the output as it is produced", default=True)
    model = given.get("model")
    while model is None:
        answer = click.prompt(
            "A model for the agent (a pydantic-ai id such as openai:gpt-4.1-mini; empty: none)",
            default="",
            show_default=False,
        )
        try:
            model = _check_model(str(answer).strip())
        except AgentgenError as err:
            click.echo(f"  {err.message}")
    return Answers(name, description, input_kind, output_kind, bool(streaming), str(model).strip())


def _instructions(answers: Answers) -> str:
    """The model's instructions: the agent's name and what its description says it does."""
    said = " ".join(answers.description.split())
    if not said or said == DEFAULT_DESCRIPTION:
        return "You are a helpful assistant: answer each prompt."
    return f"You are {answers.name}. {said}"


def render(answers: Answers, schema_url: str) -> str:
    """The starter manifest, commented; every value written as a JSON scalar (valid YAML)."""
    lines = [
        f"# yaml-language-server: $schema={schema_url}",
        "# An ACP agent manifest (the schema above gives your editor completion and checks).",
        "# `agentgen validate agent.yaml` checks it; `agentgen new DIR -m agent.yaml` makes the",
        "# project.",
        "",
        f"name: {json.dumps(answers.name)}  # the project, package and console-script name",
        'version: "0.1.0"',
        f"description: {json.dumps(answers.description, ensure_ascii=False)}",
        "",
    ]
    if answers.input == "text":
        lines += [
            "# the prompt's text, as it is (remove `input` to get ACP content blocks instead)",
            "input:",
            "  type: string",
        ]
    else:
        lines += [
            "# a JSON object: the prompt's text is parsed as it (your handler gets `Input`)",
            "input:",
            "  type: object",
            "  properties:",
            "    query: {type: string, description: What to do.}",
            "  required: [query]",
        ]
    lines.append("")
    if answers.output == "text":
        lines += ["# what the handler returns: text", "output:", "  type: string"]
    else:
        lines += [
            "# what the handler returns: a JSON object (`Output`)",
            "output:",
            "  type: object",
            "  properties:",
            "    answer: {type: string}",
            "  required: [answer]",
        ]
    lines += [
        "",
        "output_modes:",
        f"  streaming: {str(answers.streaming).lower()}  # send text while working",
        "",
    ]
    if answers.model:
        lines += [
            "# a model in the agent (pydantic-ai, a dependency of the project): the editor may",
            "# route it with providers/set on the provider `main`, else the provider's usual",
            "# environment variables (OPENAI_API_KEY, ANTHROPIC_API_KEY); ACP_MODEL overrides",
            "providers:",
            "  - id: main",
            "    supported: [openai, anthropic]",
            "    required: false",
            "llm:",
            f"  default_model: {json.dumps(answers.model)}",
            "  provider: main",
            f"  instructions: {json.dumps(_instructions(answers), ensure_ascii=False)}",
            "",
        ]
    lines += [
        "# More: config (options a client can set), interrupts (questions to the user),",
        '# errors, providers, auth, states: the README\'s "The manifest" section.',
    ]
    return "\n".join(lines) + "\n"


def examples() -> dict[str, Path]:
    """The examples this agentgen carries (examples/<name>/agent.yaml), by name."""
    from ..packaged import data_dir

    root = data_dir("examples")
    return {p.parent.name: p.parent for p in sorted(root.glob("*/agent.yaml"))}


def run_example(directory: Path, example: str, *, alone: bool = True) -> int:
    """`agentgen init --example NAME [DIR]`: DIR/agent.yaml and DIR/handlers.py, the
    example's own (from the installed package: a wheel carries the examples too)."""
    from ..files import write_output
    from ..manifest.load import load_manifest

    if not alone:
        raise AgentgenError(
            "--example writes the example as it is: not with --name, --description, "
            "--input, --output, --streaming or --model"
        )
    found = examples()
    if example not in found:
        raise AgentgenError(
            f"no example {json.dumps(example)}",
            hint="agentgen init --example " + " | ".join(found),
        )
    folder = directory.expanduser().absolute()
    targets = {f.name: f for f in (found[example] / MANIFEST_FILE, found[example] / "handlers.py")}
    for name in targets:
        if (folder / name).exists() or (folder / name).is_symlink():
            raise AgentgenError("exists; refusing to overwrite it", source=str(directory / name))
    manifest = targets[MANIFEST_FILE].read_text(encoding="utf-8")
    header = f"# yaml-language-server: $schema={schema_location()}\n"
    for name, source in targets.items():
        text = source.read_text(encoding="utf-8")
        write_output(folder / name, header + manifest if name == MANIFEST_FILE else text, name)
    project = str(load_manifest(folder / MANIFEST_FILE).data.get("name") or example)
    from .. import console

    console.summary(
        f"wrote {directory / MANIFEST_FILE} and {directory / 'handlers.py'} ({example})"
    )
    package = project.replace("-", "_")
    print(
        f"next:\n  agentgen new {project} -m {directory / MANIFEST_FILE}\n"
        f"  cp {directory / 'handlers.py'} {project}/{package}/handlers.py"
        "   # the example's handlers in place of the stub"
    )
    return 0


def run_init(
    directory: Path,
    *,
    name: str | None = None,
    description: str | None = None,
    input_kind: str | None = None,
    output_kind: str | None = None,
    streaming: bool | None = None,
    model: str | None = None,
    yes: bool = False,
    interactive: bool = False,
) -> int:
    """`agentgen init [DIR]`: write DIR/agent.yaml (never over an existing file)."""
    from ..files import write_output
    from ..manifest.validate import load_valid

    folder = directory.expanduser().absolute()
    target = folder / MANIFEST_FILE
    if target.exists() or target.is_symlink():
        raise AgentgenError(
            "exists; refusing to overwrite it", source=str(directory / MANIFEST_FILE)
        )
    if name is not None:
        _check_name(name)
    if model is not None:
        model = _check_model(model.strip())
    for kind, what in ((input_kind, "--input"), (output_kind, "--output")):
        if kind is not None:
            _check_kind(kind, what)
    defaults = Answers(
        name=default_name(folder),
        description=DEFAULT_DESCRIPTION,
        input="text",
        output="text",
        streaming=True,
    )
    given: dict[str, object] = {
        "name": name,
        "description": description,
        "input": input_kind,
        "output": output_kind,
        "streaming": streaming,
        "model": model,
    }
    if interactive and not yes:
        answers = ask(given, defaults)
    else:
        answers = Answers(
            name=name or defaults.name,
            description=description if description is not None else defaults.description,
            input=input_kind or defaults.input,
            output=output_kind or defaults.output,
            streaming=defaults.streaming if streaming is None else streaming,
            model=(model or "").strip(),
        )
    write_output(target, render(answers, schema_location()), "the manifest")
    try:
        load_valid(target)  # as written, it validates
    except AgentgenError:
        target.unlink(missing_ok=True)
        raise
    from .. import console

    shown = directory / MANIFEST_FILE
    console.summary(f"wrote {shown} ({answers.name})")
    print(f"next:\n  agentgen validate {shown}\n  agentgen new {answers.name} -m {shown}")
    return 0
