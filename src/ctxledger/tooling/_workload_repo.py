"""The fictional repository of :mod:`ctxledger.tooling.workload` and what its tools show of it.

Every tool function takes the caller's ``random.Random`` and a size budget in characters and
returns ``(arguments, output)``, so a whole conversation depends on its seed alone. Module
sources are generated once per module from a ``Random`` derived from (seed, path), so they do not
depend on the order in which modules are first read. Output is built from whole lines and slices
of cached sources, which keeps 20,000 messages (~30 MB of text) under a second or two.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

_w = str.split
PREFIXES = _w("tide quill bramble copper harbor fern orchard nimbus granite cobalt maple ember")
SUFFIXES = _w("kit flow base line io works hub lib sync stack")
SUBPACKAGES = _w("core api storage utils cli models services io auth cache parsers workers plugins")
MODULES = _w(
    "client session parser registry schema handlers retry pool serializer validators scheduler "
    "backend router tokens loader events metrics formatters middleware query migrations "
    "transport encoder index locks settings pagination"
)
VERBS = _w("load parse build resolve fetch validate render apply merge normalize flush register "
           "encode decode compute refresh dispatch collect prepare split")
NOUNS = _w("config record payload request response token batch entry index header schema item "
           "path user session chunk result window field buffer")
TYPES = ("str", "int", "bool", "float", "bytes", "dict[str, Any]", "list[str]", "Path", "None")
ERRORS = [
    ("KeyError", "'{noun}_id'"),
    ("ValueError", "invalid {noun}: expected at most {n} items, got {m}"),
    ("TypeError", "{func}() got an unexpected keyword argument '{noun}'"),
    ("AttributeError", "'NoneType' object has no attribute '{noun}s'"),
    ("IndexError", "list index out of range"),
    ("FileNotFoundError", "[Errno 2] No such file or directory: '{noun}s/{n}.json'"),
    ("RuntimeError", "{noun} pool is closed"),
    ("TimeoutError", "timed out after {n}s waiting for {noun}"),
    ("UnicodeDecodeError", "'utf-8' codec can't decode byte 0x{n:02x} in position {m}"),
]
STATEMENTS = [
    "{v} = {v2}.get('{noun}', {n})",
    "if {v} is None:\n    raise {err}(f\"unknown {noun}: {{{v2}!r}}\")",
    "for {item} in {v}:\n    {acc}.append(_{verb}_{noun}({item}))",
    "logger.debug(\"{verb} %s {noun}s in %.2fs\", len({v}), elapsed)",
    "{v} = [{item} for {item} in {v2} if {item}.{noun}]",
    "try:\n    {v} = _{verb}_{noun}({v2}, timeout={n})\nexcept {err} as exc:\n"
    "    raise {noun_cls}Error(f\"could not {verb} {noun}\") from exc",
    "if len({v}) > {n}:\n    {v} = {v}[:{n}]",
    "{acc}[{v2}.{noun}] = {v}",
    "with self._lock:\n    self._{noun}s.pop({v}, None)",
]
_PLUGINS = ("cov-5.0.0", "xdist-3.6.1", "anyio-4.4.0", "hypothesis-6.112.0", "timeout-2.3.1")


class Module:
    """One generated source file: its lines, and its functions with their 1-based def lines."""

    __slots__ = ("functions", "lines", "path", "test_path")

    def __init__(self, project: Project, path: str, rng: random.Random) -> None:
        self.path = path
        sub, name = path.split("/")[-2], path.split("/")[-1][:-3]
        self.test_path = f"tests/{sub}/test_{name}.py"
        self.functions: list[tuple[str, int]] = []
        other = rng.choice(MODULES)
        lines = [f'"""{name.capitalize()} helpers: {rng.choice(VERBS)} and {rng.choice(VERBS)} '
                 f'{rng.choice(NOUNS)}s for the {sub} layer."""', "",
                 "from __future__ import annotations", "", "import logging", "import time",
                 "from typing import Any", "",
                 f"from {project.package}.{sub}.{other} import {other.capitalize()}Error", "",
                 "logger = logging.getLogger(__name__)"]
        target = min(40_000, int(7000 * math.exp(rng.gauss(0.0, 0.8))))
        size = 0
        while size < target:
            start = len(lines)
            if rng.random() < 0.5 or start < 20:
                lines += ["", "", f"class {name.capitalize()}{rng.choice(NOUNS).capitalize()}:",
                          f'    """Keeps {rng.choice(NOUNS)}s for one {rng.choice(NOUNS)}."""']
            func = f"{rng.choice(VERBS)}_{rng.choice(NOUNS)}"
            lines += ["", f"    def {func}(self, {rng.choice(NOUNS)}: {rng.choice(TYPES)}, *, "
                          f"limit: int = {rng.randint(1, 500)}) -> {rng.choice(TYPES)}:"]
            self.functions.append((func, len(lines)))
            lines.append(f'        """{func.replace("_", " ").capitalize()} for the caller."""')
            for _ in range(rng.randint(2, 11)):
                statement = fill(rng, rng.choice(STATEMENTS))
                lines += ["        " + part for part in statement.split("\n")]
            lines.append(f"        return {rng.choice(NOUNS)}")
            size += sum(len(line) + 1 for line in lines[start:])
        self.lines = lines


class Project:
    """A fictional Python project: its package, module paths, and the module in focus.

    ``focus`` is the module the current user request is about; each new request moves it.
    """

    def __init__(self, seed: int, rng: random.Random) -> None:
        self.seed = seed
        self.package = rng.choice(PREFIXES) + rng.choice(SUFFIXES)
        self.root = f"/workspace/{self.package}"
        self.paths = [f"src/{self.package}/{sub}/{module}.py"
                      for sub in rng.sample(SUBPACKAGES, rng.randint(4, 6))
                      for module in rng.sample(MODULES, rng.randint(3, 6))]
        self._modules: dict[str, Module] = {}
        self.focus = self.module(self.paths[0])

    def module(self, path: str) -> Module:
        """The module at ``path``, generated on first use."""
        if path not in self._modules:
            self._modules[path] = Module(self, path, random.Random(f"{self.seed}:{path}"))
        return self._modules[path]

    def pick(self, rng: random.Random) -> Module:
        """The focus module half of the time (agents return to it), else any module."""
        return self.focus if rng.random() < 0.5 else self.module(rng.choice(self.paths))


def fill(rng: random.Random, template: str, **given: Any) -> str:
    """Fill a template's placeholders with seeded choices (``given`` ones win)."""
    noun = rng.choice(NOUNS)
    values = {"v": rng.choice(NOUNS), "v2": rng.choice(("self", "options", "raw", "context")),
              "item": "item", "acc": "out", "noun": noun, "noun_cls": noun.capitalize(),
              "verb": rng.choice(VERBS), "n": rng.randint(2, 512), "m": rng.randint(513, 9000),
              "err": rng.choice(ERRORS)[0], "func": f"{rng.choice(VERBS)}_{noun}"}
    values.update(given)
    return template.format(**values)


def _numbered(lines: list[str], start: int) -> str:
    return "\n".join(f"{number:6}\t{line}" for number, line in enumerate(lines, start))


def _take(lines: list[str], budget: int, start: int = 0) -> list[str]:
    """Whole lines from ``start`` until they reach ``budget`` characters (or the lines end)."""
    taken, size = [], 0
    for line in lines[start:]:
        if size > budget:  # ``size`` counts a newline per line; the joined text has one fewer
            break
        taken.append(line)
        size += len(line) + 1
    return taken


def error_line(rng: random.Random) -> str:
    """A Python exception line such as ``KeyError: 'user_id'``."""
    name, message = rng.choice(ERRORS)
    return f"{name}: {fill(rng, message)}"


def traceback(project: Project, rng: random.Random, frames: int) -> str:
    """A traceback through real lines of the project's modules, ending in an error line."""
    out = ["Traceback (most recent call last):"]
    for _ in range(frames):
        module = project.pick(rng)
        func, line = rng.choice(module.functions)
        line = min(len(module.lines), line + rng.randint(2, 6))
        out += [f'  File "{project.root}/{module.path}", line {line}, in {func}',
                f"    {module.lines[line - 1].strip()}"]
    return "\n".join([*out, error_line(rng)])


def read_file(project: Project, rng: random.Random, budget: int) -> tuple[dict[str, Any], str]:
    module = project.pick(rng)
    start = rng.randint(1, max(1, len(module.lines) - 40)) if rng.random() < 0.6 else 1
    lines = _take(module.lines, int(budget * 0.9), start - 1)
    arguments: dict[str, Any] = {"path": module.path}
    if start > 1 or len(lines) < len(module.lines):
        arguments |= {"start_line": start, "end_line": start + len(lines) - 1}
    return arguments, _numbered(lines, start)


def grep(project: Project, rng: random.Random, budget: int) -> tuple[dict[str, Any], str]:
    module = project.pick(rng)
    func, line = rng.choice(module.functions)
    hits = [f"{module.path}:{line}:{module.lines[line - 1]}"]
    size = len(hits[0])
    while size < budget:
        other = project.module(rng.choice(project.paths))
        if rng.random() < 0.3:
            hit = f"{other.test_path}:{rng.randint(5, 400)}:    assert {func}(raw) == expected"
        else:
            call = f"self.{func}({rng.choice(NOUNS)}, limit={rng.randint(1, 99)})"
            hit = f"{other.path}:{rng.randint(20, len(other.lines))}:        result = {call}"
        hits.append(hit)
        size += len(hit) + 1
    return {"pattern": func, "path": rng.choice(("src", ".", "src tests"))}, "\n".join(hits)


def _edited(module: Module, rng: random.Random) -> tuple[int, list[str], list[str]]:
    """An edit adding a guard after a docstring: (first line, old lines, the guard's lines)."""
    func, line = rng.choice(module.functions)
    old = module.lines[line : line + rng.randint(2, 6)]
    indent = " " * (len(old[0]) - len(old[0].lstrip()))
    guard = [f"{indent}if {rng.choice(NOUNS)} is None:",
             f"{indent}    raise ValueError(\"{func} needs a {rng.choice(NOUNS)}\")"]
    return line + 1, old, guard


def edit_file(project: Project, rng: random.Random, budget: int) -> tuple[dict[str, Any], str]:
    module = project.focus if rng.random() < 0.7 else project.pick(rng)
    start, old, guard = _edited(module, rng)
    new = [old[0], *guard, *old[1:]]
    first = max(1, start - 5)
    before = module.lines[first - 1 : start - 1]
    used = 150 + sum(len(line) + 8 for line in before + new)
    region = [*before, *new, *_take(module.lines, budget - used, start - 1 + len(old))]
    head = (f"Edited {module.path}: replaced {len(old)} lines at line {start} with {len(new)} "
            f"lines. Lines {first}-{first + len(region) - 1} now read:\n")
    arguments = {"path": module.path, "old_str": "\n".join(old), "new_str": "\n".join(new)}
    return arguments, head + _numbered(region, first)


def _failure(project: Project, rng: random.Random) -> tuple[str, str]:
    module = project.pick(rng)
    case = rng.choice(("empty", "twice", "none", "large"))
    test = f"test_{rng.choice(VERBS)}_{rng.choice(NOUNS)}_{case}"
    error = error_line(rng)
    frames = [f"{'_' * 20} {test} {'_' * 20}", "", f"    def {test}(tmp_path):",
              f"        raw = make_{rng.choice(NOUNS)}(tmp_path)",
              f">       result = {module.functions[0][0]}(raw)", ""]
    for _ in range(rng.randint(1, 3)):
        func, line = rng.choice(module.functions)
        body = module.lines[line : line + 4]
        frames += [f"{module.path}:{line + len(body)}: in {func}", *body[-2:]]
        module = project.pick(rng)
    name = error.split(":")[0]
    frames += [f"E   {error}", "", f"{module.test_path}:{rng.randint(10, 300)}: {name}"]
    return f"FAILED {module.test_path}::{test} - {error[:70]}", "\n".join(frames)


def pytest_log(project: Project, rng: random.Random, budget: int) -> tuple[str, str]:
    """A pytest session of about ``budget`` chars; returns (the path tested, the log)."""
    target = project.focus.test_path if rng.random() < 0.6 else "tests"
    failed = 0 if rng.random() < 0.3 else rng.randint(1, 2 + budget // 6000)
    failures = [_failure(project, rng) for _ in range(failed)]
    verbose = budget > 6000
    header = ["=" * 29 + " test session starts " + "=" * 30,
              f"platform linux -- Python 3.11.{rng.randint(4, 9)}, "
              f"pytest-8.{rng.randint(0, 3)}.{rng.randint(0, 3)}, pluggy-1.5.0",
              f"rootdir: {project.root}", "configfile: pyproject.toml",
              f"plugins: {', '.join(rng.sample(_PLUGINS, 2))}"]
    used = sum(len(part) for part in header) + sum(len(block) for _, block in failures)
    progress: list[str] = []
    passed = skipped = 0
    while used < budget * 0.85 or not progress:
        module = project.module(rng.choice(project.paths))
        if verbose:
            case = f"test_{rng.choice(VERBS)}_{rng.choice(NOUNS)}"
            line = f"{module.test_path}::{case} PASSED"
            passed += 1
        else:
            dots = "".join(rng.choices("......s", k=rng.randint(3, 40)))
            skipped += dots.count("s")
            passed += len(dots) - dots.count("s")
            line = f"{module.test_path} {dots}"
        progress.append(line)
        used += len(line) + 8
    total = passed + skipped + failed
    progress = [f"{line:<70} [{100 * (i + 1) // len(progress):3}%]"
                for i, line in enumerate(progress)]
    lines = [*header, f"collected {total} items", "", *progress, ""]
    if failures:
        lines += ["=" * 35 + " FAILURES " + "=" * 35, *(block for _, block in failures)]
        lines += ["=" * 28 + " short test summary info " + "=" * 27, *(s for s, _ in failures)]
    counts = ", ".join(f"{n} {what}" for n, what in ((failed, "failed"), (passed, "passed"),
                                                      (skipped, "skipped")) if n)
    lines.append(f"{'=' * 20} {counts} in {rng.uniform(0.4, 60):.2f}s {'=' * 20}")
    return target, "\n".join(lines)


def run_tests(project: Project, rng: random.Random, budget: int) -> tuple[dict[str, Any], str]:
    target, log = pytest_log(project, rng, budget)
    return {"path": target, "options": rng.choice(("-x -q", "-q", "-v", "--lf -q"))}, log


# The shell commands of ``bash`` calls: each returns (command, output, exit code).
_Shell = Callable[["Project", random.Random, int], tuple[str, str, int]]


def _ls(project: Project, rng: random.Random, budget: int) -> tuple[str, str, int]:
    folders = sorted({path.rsplit("/", 1)[0] for path in project.paths})
    if budget < 1500:
        folders = [rng.choice(folders)]
    out: list[str] = []
    for folder in folders:
        inside = (path.rsplit("/", 1)[1] for path in project.paths if path.startswith(folder + "/"))
        names = ["__init__.py", *inside]
        out += [f"{folder}:" if len(folders) > 1 else "", f"total {8 * len(names)}"]
        out += [f"-rw-r--r-- 1 dev dev {rng.randint(200, 40000):6} Mar {rng.randint(1, 28):2} "
                f"{rng.randint(0, 23):02}:{rng.randint(0, 59):02} {name}" for name in names]
    where = folders[0] if len(folders) == 1 else f"-R src/{project.package}"
    return f"ls -la {where}", "\n".join(out).strip(), 0


def _find(project: Project, rng: random.Random, budget: int) -> tuple[str, str, int]:
    found = _take([p for m in project.paths for p in (m, project.module(m).test_path)], budget)
    return f"find src tests -name '*.py' | head -n {len(found)}", "\n".join(found), 0


def _git_status(project: Project, rng: random.Random, budget: int) -> tuple[str, str, int]:
    changed = rng.sample(project.paths, min(len(project.paths), 2 + budget // 300))
    return "git status", "\n".join([
        f"On branch fix/{rng.choice(NOUNS)}-{rng.randint(100, 999)}",
        "Your branch is up to date with 'origin/main'.", "", "Changes not staged for commit:",
        '  (use "git add <file>..." to update what will be committed)', "",
        *(f"\tmodified:   {p}" for p in changed), "",
        'no changes added to commit (use "git add" and/or "git commit -a")']), 0


def _git_diff(project: Project, rng: random.Random, budget: int) -> tuple[str, str, int]:
    out: list[str] = []
    while sum(len(line) + 1 for line in out) < budget:
        module = project.pick(rng)
        start, old, guard = _edited(module, rng)
        out += [f"diff --git a/{module.path} b/{module.path}",
                f"index {rng.getrandbits(28):07x}..{rng.getrandbits(28):07x} 100644",
                f"--- a/{module.path}", f"+++ b/{module.path}",
                f"@@ -{start},{len(old)} +{start},{len(old) + len(guard)} @@",
                " " + old[0], *("+" + line for line in guard), *(" " + line for line in old[1:])]
    return "git diff", "\n".join(out), 0


def _git_log(project: Project, rng: random.Random, budget: int) -> tuple[str, str, int]:
    count = max(6, budget // 45)
    subjects = (fill(rng, "Fix {verb} of empty {noun}s in {v}") for _ in range(count))
    log = "\n".join(f"{rng.getrandbits(28):07x} {subject}" for subject in subjects)
    return f"git log --oneline -n {count}", log, 0


def _wc(project: Project, rng: random.Random, budget: int) -> tuple[str, str, int]:
    paths = project.paths[:12]
    counts = "\n".join(f"{len(project.module(p).lines):6} {p}" for p in paths)
    return f"wc -l {' '.join(paths)}", counts, 0


def _sed(project: Project, rng: random.Random, budget: int) -> tuple[str, str, int]:
    module = project.pick(rng)
    lines = _take(module.lines, budget)
    return f"sed -n '1,{len(lines)}p' {module.path}", "\n".join(lines), 0


def _pip(project: Project, rng: random.Random, budget: int) -> tuple[str, str, int]:
    dependencies = rng.sample(("httpx", "msgspec", "click", "rich", "attrs", "anyio"), 3)
    return "pip install -e .", "\n".join([
        f"Obtaining file://{project.root}", "  Installing build dependencies ... done",
        "  Checking if build backend supports build_editable ... done",
        "  Getting requirements to build editable ... done",
        *(f"Requirement already satisfied: {name} in ./.venv/lib/python3.11/site-packages"
          for name in dependencies),
        f"Building editable for {project.package} (pyproject.toml) ... done",
        f"Successfully installed {project.package}-0.{rng.randint(1, 9)}.{rng.randint(0, 20)}"]), 0


def _python(project: Project, rng: random.Random, budget: int) -> tuple[str, str, int]:
    dotted = project.pick(rng).path[4:-3].replace("/", ".")
    return (f"python -c 'import {dotted} as m; m.main()'",
            traceback(project, rng, rng.randint(2, 5)), 1)


_SHELL: tuple[_Shell, ...] = (
    _ls, _find, _git_status, _git_diff, _git_log, _wc, _sed, _pip, _python,
)


def bash(project: Project, rng: random.Random, budget: int) -> tuple[dict[str, Any], str]:
    command, output, code = rng.choice(_SHELL)(project, rng, budget)
    return {"command": command}, output + (f"\n[exit code {code}]" if code else "")


TOOL_OUTPUTS: dict[str, Callable[[Project, random.Random, int], tuple[dict[str, Any], str]]] = {
    "read_file": read_file, "grep": grep, "edit_file": edit_file, "run_tests": run_tests,
    "bash": bash,
}
