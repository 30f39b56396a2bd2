"""One owner of flavour facts (``loadgen/flavours.py``, docs/ARCHITECTURE.md): no module outside
the registry and the adapters uses a flavour's name (``"vllm"``, ``"llamacpp"`` …) as a
flavour key: compared with a flavour, a key of a table, a flavour set or returned by name.

The check reads the source's syntax tree, so a docstring or a message naming a server is
no violation; what is one is code that decides by a flavour's name: ``if target.flavour ==
"llamacpp"``, ``flavour in ("vllm", "embedded")``, ``{"sglang": …}``, ``backend="embedded"``,
``return "vllm"``. Such a fact belongs in the flavour's registry entry.
"""

from __future__ import annotations

import ast
from pathlib import Path

from loadgen.flavours import NAMES

ROOT = Path(__file__).resolve().parents[2]
#: Where flavour names are the subject: the registry, and the adapters (one per API, and
#: the APIs of their own are named after their servers).
OWNERS = ("loadgen/flavours.py", "loadgen/adapters/")
#: What names a flavour in code: a variable, attribute or key with one of these words.
FLAVOUR_WORDS = ("flavour", "backend")


def _packages(root: Path = ROOT) -> list[str]:
    """The installed packages: the top-level folders that are Python packages."""
    return sorted(p.parent.name for p in root.glob("*/__init__.py"))


def _names_a_flavour(node: ast.AST) -> bool:
    """``flavour``, ``target.flavour``, ``options.backend``, ``target.get("flavour")``,
    ``info["flavour"]``."""
    if isinstance(node, ast.Name):
        word = node.id
    elif isinstance(node, ast.Attribute):
        word = node.attr
    elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        word = str(node.args[0].value)
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        word = str(node.slice.value)
    else:
        return False
    return any(w in word.lower() for w in FLAVOUR_WORDS)


def _flavour_literals(node: ast.AST | None) -> list[str]:
    """The flavour names written literally in ``node`` (a constant, or a tuple/list/set of them)."""
    if isinstance(node, ast.Constant) and node.value in NAMES:
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [n for item in node.elts for n in _flavour_literals(item)]
    return []


def violations(source: str, where: str) -> list[str]:
    """``where:line: "name" …`` for every use of a flavour name as a flavour key."""
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        why = ""
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_names_a_flavour(s) for s in sides):
                names = [n for s in sides for n in _flavour_literals(s)]
                why = "compared with a flavour"
        elif isinstance(node, ast.Dict):
            names = [n for key in node.keys for n in _flavour_literals(key)]
            why = "a table keyed by flavour"
        elif isinstance(node, ast.keyword) and node.arg and _names_a_flavour(ast.Name(node.arg)):
            names = _flavour_literals(node.value)
            why = "a flavour set by name"
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_names_a_flavour(t) for t in targets):
                names = _flavour_literals(node.value)
                why = "a flavour set by name"
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.Constant):
            names = _flavour_literals(node.value)
            why = "a flavour returned by name"
        found += [(getattr(node, "lineno", 0), name, why) for name in names]
    return [f"{where}:{line}: {name!r} {why}" for line, name, why in sorted(found)]


def tree_violations(root: Path = ROOT) -> list[str]:
    out = []
    for package in _packages(root):
        for path in sorted((root / package).rglob("*.py")):
            where = path.relative_to(root).as_posix()
            if where.startswith(OWNERS):
                continue
            out += violations(path.read_text(encoding="utf-8"), where)
    return out


def test_no_flavour_name_is_used_as_a_flavour_key_outside_the_registry() -> None:
    assert tree_violations() == []


def test_a_planted_flavour_literal_is_caught(tmp_path: Path) -> None:
    """Each shape the rule knows, planted in a copy of one real module, is reported with
    its line; the names in its docstring and messages are not."""
    real = (ROOT / "loadgen/cache.py").read_text(encoding="utf-8")
    planted = real + (
        "\n\ndef planted(target, info):\n"
        '    if target.flavour == "llamacpp":\n'
        "        return 1\n"
        '    if info.get("flavour") in ("vllm", "embedded"):\n'
        "        return 2\n"
        '    table = {"sglang": 3}\n'
        '    flavour = "openai"\n'
        '    call(backend="embedded")\n'
        '    return "vllm"\n'
    )
    start = len(real.splitlines()) + 3
    assert violations(real, "loadgen/cache.py") == []
    assert violations(planted, "x.py") == [
        f"x.py:{start + 1}: 'llamacpp' compared with a flavour",
        f"x.py:{start + 3}: 'embedded' compared with a flavour",
        f"x.py:{start + 3}: 'vllm' compared with a flavour",
        f"x.py:{start + 5}: 'sglang' a table keyed by flavour",
        f"x.py:{start + 6}: 'openai' a flavour set by name",
        f"x.py:{start + 7}: 'embedded' a flavour set by name",
        f"x.py:{start + 8}: 'vllm' a flavour returned by name",
    ]


def test_a_planted_module_in_the_tree_fails_the_check(tmp_path: Path) -> None:
    """The whole-tree walk finds a planted module and leaves the registry alone."""
    for package in _packages():
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "loadgen" / "flavours.py").write_text('TABLE = {"vllm": 1}\n')
    planted = Path("diagnose", "advice.py")  # a module the repository does not hold
    (tmp_path / planted).write_text(
        'def flag(view):\n    return "--batch-size" if view.flavour == "llamacpp" else ""\n'
    )
    assert tree_violations(tmp_path) == [
        f"{planted.as_posix()}:2: 'llamacpp' compared with a flavour"
    ]
