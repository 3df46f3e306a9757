"""The layer map of bkspark, checked: no import points up a layer, no package uses another's private names.

docs/architecture.md, "Layers", states the map in words; this test is its one executable home.  The check is
an own AST walk over ``bkspark/`` and ``bookie_server/`` (no import is executed):

* **back-arrows** -- a module of one unit may import its own unit and the units of lower layers only; two units
  of the same layer are independent; nothing in ``bkspark`` imports ``bookie_server``, and ``bookie_server``
  (beside the client, not above it) imports only the layers below the client;
* **private names** -- ``from x import _y`` across units, and ``something._y`` where no module of the unit
  defines ``_y`` (a private name reached in another unit's module, class or object, kazoo's included).  The
  unit of privacy is a subpackage of ``bkspark`` (``bkspark.client``...), a top-level module of ``bkspark``
  (``bkspark.cli``), and each module of the flat ``bookie_server`` package (its rooms meet through public
  interfaces);
* **the client's loop-only parts** -- ``.pool``, ``.ctx``, ``.services`` named outside ``bkspark.client``: other
  code uses the blocking client's public methods (``open_tail``, ``refresh_tails``, ``wait_for_tails``,
  ``run_coroutine``);
* **one door to ZooKeeper** -- ``kazoo`` imported outside ``bkspark.metadata``: other code goes through its
  ``Znodes``, ``ZkClient``, ``LeaderElection``, ``ZK_FAILURES`` (docs/architecture.md, "ZooKeeper: one door").

Violations that other branches are removing right now are on :data:`ALLOWED`, each naming its owner and issue
item; an entry that no longer matches anything fails the test, so the list only shrinks.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: The layers, bottom first.  A unit may import units of lower layers; units of one layer are independent.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("bkspark", "bkspark.errors"),  # the package itself (its version; the name alone, not a prefix); the exceptions
    ("bkspark.properties", "bkspark.retry", "bkspark.spark_arrow"),  # the properties-file parser; the retry policy
    # of the errors' flags; Spark's Arrow schema on every PySpark release
    ("bkspark.config",),  # typed configuration, secrets, the bookie's settings
    ("bkspark.protocol",),  # sans-IO codecs
    ("bkspark.placement", "bkspark.security", "bkspark.pulsar"),  # pulsar: Pulsar's entry and topic formats
    ("bkspark.metadata", "bkspark.confkeys"),  # ZooKeeper metadata; the registry of known configuration keys
    ("bkspark.client",),
    ("bkspark.context",),
    ("bkspark.datasource",),
    ("bkspark.audit",),
    ("bkspark.shell",),
    ("bkspark.devcluster",),
    ("bkspark.testing",),  # testcontainers clusters for users' tests (docs/testing.md)
    ("bkspark.cli",),
)
#: The units matched by their name alone (a module under ``bkspark.x`` is not part of the package root's unit).
EXACT = frozenset({"bkspark"})
#: The bookie stands beside the client: it may import the layers below ``bkspark.client``, never the client or
#: above, and no module of ``bkspark`` imports it.
BESIDE_CLIENT = "bookie_server"
#: The client's loop-only parts (its connection pool and the services its handles share): only bkspark.client
#: names them; other code drives the client through its public methods (tails: open_tail, refresh_tails,
#: wait_for_tails; any coroutine: run_coroutine).
LOOP_ONLY = frozenset({"pool", "ctx", "services"})
LOOP_OWNER = "bkspark.client"
#: The one package that imports the ZooKeeper library; everywhere else it is a violation.
ZK_LIBRARY = "kazoo"
ZK_HOME = "bkspark.metadata"
#: Underscore names that are public API by convention (namedtuple's methods).
CONVENTIONAL = frozenset({"_make", "_asdict", "_replace", "_fields", "_field_defaults"})
#: Generated code (protoc's output) is not checked.
GENERATED_SUFFIX = "_pb2.py"

#: Known violations being removed on other branches: (path, violation text, who removes it).  Remove an entry
#: when its violation is gone (the test fails on an entry that matches nothing).
ALLOWED: tuple[tuple[str, str, str], ...] = (
    # kazoo has no public call for a read-only multi (ZooKeeper's multiRead, op 22): bkspark/metadata, the one
    # home of ZooKeeper, sends it through the connection's request queue (docs/architecture.md).
    ("bkspark/metadata/multiread.py", "private name zk._call", "deliberate: kazoo has no public multiRead"),
    # The fault injector of the connector's tests raises exactly what a ZooKeeper call raises when the link drops
    # (kazoo's ConnectionLoss), so that the code under test meets the real exception (docs/architecture.md).
    ("bkspark/datasource/faults.py", "kazoo.exceptions imported outside bkspark.metadata",
     "deliberate: the fault is kazoo's own exception"),
    # Layer 4, below bkspark.metadata: the ZooKeeper ACLs and SASL options every kazoo client is made with are
    # kazoo's own types (docs/architecture.md).
    ("bkspark/security/zk.py", "kazoo.security imported outside bkspark.metadata",
     "deliberate: security sits below metadata and builds kazoo's ACL objects"),
    # Layer 4, below bkspark.metadata: the topic resolver reads Pulsar's znodes with a client it is handed.
    ("bkspark/pulsar/topics.py", "kazoo.exceptions imported outside bkspark.metadata",
     "the Pulsar line of work (issue 45, item 1): pulsar sits below metadata"),
)


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text}"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_unit(module: str, layers: tuple[tuple[str, ...], ...] = LAYERS) -> tuple[int, str] | None:
    """(layer index, unit) of a bkspark module; the longest matching unit wins; None outside bkspark."""
    best: tuple[int, str] | None = None
    for index, units in enumerate(layers):
        for unit in units:
            inside = module == unit or (unit not in EXACT and module.startswith(unit + "."))
            if inside and (best is None or len(unit) > len(best[1])):
                best = (index, unit)
    return best


def privacy_unit(module: str, beside: str = BESIDE_CLIENT, layers: tuple[tuple[str, ...], ...] = LAYERS) -> str:
    """Where a private name may be used: a bkspark unit, or one module of the bookie."""
    if module == beside or module.startswith(beside + "."):
        return module
    found = layer_unit(module, layers)
    return found[1] if found else module.split(".")[0]


def _imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str, str | None]]:
    """(line, imported module, imported name or None) of every import, relative ones resolved."""
    out: list[tuple[int, str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, base] if base else package)
            for alias in node.names:
                # ``from bkspark import retry`` imports the module bkspark.retry.
                out.append((node.lineno, f"{base}.{alias.name}" if base == "bkspark" else base, alias.name))
    return out


def _defined_names(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.keyword) and node.arg:
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[0])
    return names


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in CONVENTIONAL


def check_tree(
    root: Path,
    packages: tuple[str, ...] = ("bkspark", BESIDE_CLIENT),
    layers: tuple[tuple[str, ...], ...] = LAYERS,
    beside: str = BESIDE_CLIENT,
    beside_below: str = "bkspark.client",
    zk_home: str = ZK_HOME,
) -> list[Violation]:
    """Every back-arrow and cross-unit private name under ``root`` (see the module docstring)."""
    files = sorted(p for pkg in packages for p in (root / pkg).rglob("*.py") if not p.name.endswith(GENERATED_SUFFIX))
    parsed = {p: ast.parse(p.read_text(encoding="utf-8"), str(p)) for p in files}
    defined: dict[str, set[str]] = {}
    for path, tree in parsed.items():
        defined.setdefault(privacy_unit(module_name(path, root), beside, layers), set()).update(_defined_names(tree))
    client_layer = layer_unit(beside_below, layers)
    assert client_layer is not None
    out: list[Violation] = []
    for path, tree in parsed.items():
        rel = path.relative_to(root).as_posix()
        module = module_name(path, root)
        mine = layer_unit(module, layers)
        my_privacy = privacy_unit(module, beside, layers)
        in_beside = module == beside or module.startswith(beside + ".")
        in_zk_home = module == zk_home or module.startswith(zk_home + ".")
        for line, target, name in _imports(tree, module, path.name == "__init__.py"):
            top = target.split(".")[0]
            if top == ZK_LIBRARY and not in_zk_home:
                out.append(Violation(rel, line, f"{target} imported outside {zk_home}"))
            if top not in packages:
                continue
            target_in_beside = top == beside
            theirs = None if target_in_beside else layer_unit(target, layers)
            if target_in_beside and not in_beside:
                out.append(Violation(rel, line, f"back-arrow {module} -> {target} ({beside} is never imported by bkspark)"))
            elif in_beside and theirs is not None and theirs[0] >= client_layer[0]:
                out.append(Violation(rel, line, f"back-arrow {module} -> {target} ({beside} stands beside {beside_below})"))
            elif mine is not None and theirs is not None and mine[1] != theirs[1]:
                if theirs[0] > mine[0]:
                    out.append(Violation(rel, line, f"back-arrow {module} -> {target} (layer {mine[0]} imports layer {theirs[0]})"))
                elif theirs[0] == mine[0]:
                    out.append(Violation(rel, line, f"back-arrow {module} -> {target} ({mine[1]} and {theirs[1]} are independent)"))
            if name is not None and _is_private(name) and privacy_unit(target, beside, layers) != my_privacy:
                out.append(Violation(rel, line, f"private import {target}.{name}"))
        mine_defined = defined.get(my_privacy, set())
        outside_client = not (module == LOOP_OWNER or module.startswith(LOOP_OWNER + "."))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                continue
            if _is_private(node.attr) and node.attr not in mine_defined:
                out.append(Violation(rel, node.lineno, f"private name {ast.unparse(node)}"))
            elif node.attr in LOOP_ONLY and outside_client:
                out.append(Violation(rel, node.lineno, f"loop-only client part {ast.unparse(node)}"))
    return out


def _allowed(violation: Violation) -> bool:
    return any(violation.path == path and violation.text == text for path, text, _owner in ALLOWED)


@functools.cache
def _repository_violations() -> tuple[Violation, ...]:
    return tuple(check_tree(REPO))


def test_the_repository_keeps_the_layer_map() -> None:
    found = _repository_violations()
    unexpected = [str(v) for v in found if not _allowed(v)]
    assert not unexpected, "layering violations (docs/architecture.md, 'Layers'):\n" + "\n".join(unexpected)


def test_every_allowlist_entry_still_names_a_violation() -> None:
    found = {(v.path, v.text) for v in _repository_violations()}
    stale = [f"{path}: {text} ({owner})" for path, text, owner in ALLOWED if (path, text) not in found]
    assert not stale, "fixed: remove these entries from ALLOWED:\n" + "\n".join(stale)


def test_every_package_of_bkspark_is_on_the_map() -> None:
    units = {u for layer in LAYERS for u in layer}
    for child in sorted((REPO / "bkspark").iterdir()):
        name = child.stem if child.suffix == ".py" else child.name
        if (child.is_dir() and (child / "__init__.py").exists()) or (child.suffix == ".py" and name != "__init__"):
            assert f"bkspark.{name}" in units, f"bkspark.{name} has no layer: add it to LAYERS and docs/architecture.md"


# -- the checker itself, on small trees -------------------------------------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for pkg in ("bkspark", BESIDE_CLIENT):
        (tmp_path / pkg).mkdir(exist_ok=True)
        for directory in [tmp_path / pkg, *(d for d in (tmp_path / pkg).rglob("*") if d.is_dir())]:
            (directory / "__init__.py").touch()
    return tmp_path


CLEAN = {
    "bkspark/errors.py": "class BKError(Exception):\n    pass\n",
    "bkspark/protocol/codec.py": "from bkspark.errors import BKError\n\ndef _helper():\n    return BKError\n",
    "bkspark/protocol/other.py": "from bkspark.protocol.codec import _helper\n",  # private, but the same unit
    "bkspark/client/api.py": "from bkspark.protocol import codec\n\nclass Client:\n    def _run(self):\n        return codec\n",
    "bkspark/client/tail.py": "def follow(bk):\n    return bk._run()\n",  # the client's own private name
    "bookie_server/server.py": "from bkspark.protocol.codec import BKError\n",
}


def test_checker_passes_a_clean_tree(tmp_path: Path) -> None:
    assert check_tree(_tree(tmp_path, CLEAN)) == []


@pytest.mark.parametrize(
    "planted, expected",
    [
        ({"bkspark/protocol/up.py": "from bkspark.client.api import Client\n"}, "back-arrow bkspark.protocol.up -> bkspark.client.api"),
        ({"bkspark/protocol/up.py": "import bkspark.client.api\n"}, "back-arrow bkspark.protocol.up -> bkspark.client.api"),
        ({"bkspark/errors2.py": ""}, None),  # a unit off the map is not checked here (the map test catches it)
        ({"bkspark/placement/p.py": "from bkspark.security import s\n", "bkspark/security/s.py": ""}, "are independent"),
        ({"bkspark/shell/cmd.py": "from bookie_server.server import BKError\n"}, "is never imported by bkspark"),
        ({"bookie_server/app.py": "from bkspark.client.api import Client\n"}, "stands beside bkspark.client"),
        ({"bkspark/protocol/rel.py": "from ..client import api\n"}, "back-arrow bkspark.protocol.rel -> bkspark.client"),
        ({"bkspark/datasource/s.py": "from bkspark.protocol.codec import _helper\n"}, "private import bkspark.protocol.codec._helper"),
        ({"bkspark/datasource/s.py": "def go(bk):\n    return bk._run()\n"}, "private name bk._run"),
        ({"bkspark/datasource/s.py": "def go(bk):\n    return bk.aio.pool\n"}, "loop-only client part bk.aio.pool"),
        ({"bookie_server/security.py": "def hook(conn):\n    conn._send_v3()\n", "bookie_server/server.py": "class C:\n    def _send_v3(self):\n        pass\n"}, "private name conn._send_v3"),
        ({"bkspark/shell/zk.py": "from kazoo.client import KazooClient\n"}, "kazoo.client imported outside bkspark.metadata"),
        ({"bookie_server/gc.py": "def f():\n    import kazoo.exceptions\n"}, "kazoo.exceptions imported outside bkspark.metadata"),
        ({"bkspark/metadata/zk.py": "from kazoo.client import KazooClient\n"}, None),  # the one home
    ],
)
def test_checker_finds_a_planted_violation(tmp_path: Path, planted: dict[str, str], expected: str | None) -> None:
    found = [str(v) for v in check_tree(_tree(tmp_path, {**CLEAN, **planted}))]
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and expected in found[0], found


def test_checker_lets_a_layer_import_any_layer_below(tmp_path: Path) -> None:
    files = {**CLEAN, "bkspark/cli.py": "from bkspark.client.api import Client\nfrom bkspark.errors import BKError\n"}
    assert check_tree(_tree(tmp_path, files)) == []
