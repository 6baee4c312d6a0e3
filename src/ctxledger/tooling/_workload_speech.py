"""What the people and the model say in a :mod:`ctxledger.tooling.workload` conversation.

The system prompt, user requests, the assistant's thoughts before its tool calls and its final
replies, all about the fictional project of :mod:`ctxledger.tooling._workload_repo`, from
templates and
the caller's ``random.Random``.
"""

from __future__ import annotations

import json
import random

from ctxledger.tooling._workload_repo import (
    NOUNS,
    VERBS,
    Project,
    error_line,
    fill,
    pytest_log,
    traceback,
)

_TOOL_DOCS = {
    "read_file": ("Read a file of the repository, optionally a line range.",
                  {"path": "string", "start_line": "integer", "end_line": "integer"}),
    "grep": ("Search the repository for a regular expression.",
             {"pattern": "string", "path": "string"}),
    "edit_file": ("Replace one exact occurrence of old_str in a file with new_str.",
                  {"path": "string", "old_str": "string", "new_str": "string"}),
    "run_tests": ("Run pytest on a path with options.", {"path": "string", "options": "string"}),
    "bash": ("Run a shell command in the repository root; output is truncated at 40 KB.",
             {"command": "string"}),
}


def system_prompt(project: Project, rng: random.Random) -> str:
    """The agent's instructions: its tools with JSON schemas, rules, the repository layout."""
    tools = "\n\n".join(
        f"## {name}\n{doc}\nParameters: " + json.dumps(
            {"type": "object", "properties": {k: {"type": t} for k, t in params.items()},
             "required": list(params)[:1]}, indent=2)
        for name, (doc, params) in _TOOL_DOCS.items())
    rules = [f"{i}. {rule}" for i, rule in enumerate((
        f"You work in {project.root}, a Python {rng.choice(('3.11', '3.12'))} project; "
        f"the package lives in src/{project.package}.",
        "Read the relevant code before you change it; keep every change as small as you can.",
        "Run the tests that cover a change before you report it; paste the failing lines if any.",
        "Never rewrite history or push; the user reviews your changes as an uncommitted diff.",
        "Prefer editing existing files to creating new ones; never add dependencies unasked.",
        "When a command fails, read its error output before you try something else.",
        "Reply to the user with what you changed, where, and the command that shows it works.",
    ), 1)]
    layout = [f"- {path} (tests: {path.replace('src/' + project.package, 'tests', 1)})"
              for path in project.paths]
    return "\n".join([f"You are a careful software engineering agent working on {project.package}.",
                      "You can call these tools:", "", tools, "", "# Rules", *rules, "",
                      "# Repository layout", *layout])


def user_request(project: Project, rng: random.Random) -> str:
    """A new task about a freshly chosen module, which becomes the project's focus."""
    project.focus = module = project.module(rng.choice(project.paths))
    func = rng.choice(module.functions)[0]
    kind = rng.randrange(4)
    if kind == 0:
        request = (f"The test {module.test_path}::test_{func} started failing after the last "
                   f"merge with `{error_line(rng)}`. Can you find out why and fix it? Please do "
                   f"not change the public API of {module.path}.")
    elif kind == 1:
        verb, noun = rng.choice(VERBS), rng.choice(NOUNS)
        command = f"python -m {project.package}.cli {verb} --{noun} a.json"
        failure = traceback(project, rng, rng.randint(2, 6))
        request = (f"Running `{command}` fails:\n\n```\n{failure}\n```\n\nPlease fix the bug and "
                   f"add a regression test to {module.test_path}.")
    elif kind == 2:
        request = (f"Add a `{rng.choice(NOUNS)}` keyword to `{func}` in {module.path} so callers "
                   f"can {rng.choice(VERBS)} it lazily. Keep the default behaviour and extend "
                   f"{module.test_path}.")
    else:
        request = (f"`{func}` is slow on large inputs (about {rng.randint(10, 900)}k "
                   f"{rng.choice(NOUNS)}s). Profile it and make it faster without changing its "
                   f"output.")
    if rng.random() < 0.2:
        _, log = pytest_log(project, rng, rng.randint(800, 3000))
        request += f"\n\nHere is the CI log:\n```\n{log}\n```"
    sign_off = rng.choice(("thanks!", "ping me if anything is unclear.", "no rush."))
    return (f"{request}\n\nCI runs `python -m pytest -q` from {project.root} on Python 3.11 "
            f"and 3.12 on every push; {sign_off}")


_OBSERVATIONS = [
    "The error points at `{func}` in {focus}, where `{v}` can be None when the {noun} is empty.",
    "`{func}` catches {err} too broadly, which hides the real failure from the {verb} step.",
    "So `{func}` only ever gets a {noun} that went through `_{verb}_{noun}`, except from the CLI.",
    "The {noun} cache in {focus} is keyed by id, but `{func}` passes the whole {noun}.",
    "That output shows the limit of {n} {noun}s is applied after the {verb}, not before.",
    "Two tests still fail, but both are in {test} and look like the same root cause.",
    "The traceback goes through `{func}` twice, so the retry wraps the {err} it should re-raise.",
    "Nothing in {test} covers an empty {noun}, which is why CI did not catch this.",
]
_INTENTS = {
    "read_file": "Let me read {path} to see how `{func}` builds the {noun}.",
    "grep": "Before I change `{pattern}` I want every caller, so I will search for it.",
    "bash": "Let me check the state of the tree with `{command}`.",
    "edit_file": "The fix is to validate the {noun} before it is used; editing {path}.",
    "run_tests": "Running {path} now should show whether the {noun} handling is fixed.",
}
_PLAN = ["reproduce the failure with the narrowest test", "find where the {noun} becomes None",
         "add the guard in `{func}`", "check the callers in {focus} still pass a {noun}",
         "add a regression test to {test}", "run the whole suite for the {verb} path",
         "look at the git diff before reporting back"]


def thought(
    project: Project, rng: random.Random, tools: list[str], arguments: str, min_chars: int
) -> str:
    """An assistant's reasoning before its calls: observations or a plan, then its intent."""
    given = {"focus": project.focus.path, "test": project.focus.test_path,
             "func": rng.choice(project.focus.functions)[0], **json.loads(arguments)}
    if len(tools) > 1:
        intent = f"I will run {len(tools)} lookups in parallel: {', '.join(tools)}."
    else:
        intent = fill(rng, _INTENTS[tools[0]], **given)
    observations = rng.sample(_OBSERVATIONS, len(_OBSERVATIONS))
    parts = [fill(rng, observations.pop(), **given)]
    while observations and (
        sum(len(part) + 1 for part in parts) + len(intent) < min_chars or rng.random() < 0.3
    ):
        parts.append(fill(rng, observations.pop(), **given))
    if rng.random() < 0.12:
        steps = rng.sample(_PLAN, rng.randint(3, len(_PLAN)))
        parts.append("Plan:\n" + "\n".join(f"{i}. {fill(rng, step, **given)}"
                                            for i, step in enumerate(steps, 1)) + "\n")
    parts.append(intent)
    return " ".join(parts)


def final_reply(project: Project, rng: random.Random) -> str:
    """The assistant's answer closing a turn: what changed, where, and the test command."""
    module = project.focus
    func = rng.choice(module.functions)[0]
    return "\n".join([
        f"Done. `{func}` now {fill(rng, 'validates the {noun} before it calls `{func}`')}, so the "
        f"{error_line(rng).split(':')[0]} no longer escapes.", "", "Changes:",
        f"- {module.path}: guard in `{func}` (line {rng.randint(20, len(module.lines))})",
        f"- {module.test_path}: added `test_{func}_rejects_empty_input`", "",
        f"`python -m pytest {module.test_path} -q` now passes ({rng.randint(5, 120)} passed)."])
