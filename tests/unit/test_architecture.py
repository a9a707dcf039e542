"""The package boundaries, as import contracts read from the source (every import, module level or not).

- No import circle between modules of ``app``, nor between its packages, type-only imports (``if TYPE_CHECKING:``)
  included.
- No private name (``_x``) imported from another package.
- The worker side (``app.compute``) imports nothing of the web side, nor Flask.
- Nothing outside ``app.serving`` (gunicorn's side) imports it.
- The web side reaches ``app.compute`` only through the pool and the light modules a job needs
  (``jobs``, ``results``, ``catalog``) or the plain-Python streaming detector, and those modules import
  nothing numeric, so the numeric stack never loads in the web process.
- Domain code raises ``app.errors``' kinds: outside the web package and the route, schema and OpenAPI modules,
  only the few modules named below import ``app.web.errors``.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WEB_SAFE_COMPUTE = {"app.compute", "app.compute.pool", "app.compute.pool_process", "app.compute.clients"} | {
    f"app.compute.{area}.{module}" for area in ("forecast", "detect") for module in ("work", "results", "catalog")
} | {"app.compute.forecast", "app.compute.detect", "app.compute.detect.streaming", "app.compute.detect.surprises",
    "app.compute.detect.state", "app.compute.detect.budget", "app.compute.detect.predictors",
    "app.compute.detect.weekly", "app.compute.detect.habits", "app.compute.detect.snapshot",
    "app.compute.detect.counts", "app.compute.detect.native", "app.compute.detect.values",
    "app.compute.detect.frozen", "app.compute.detect.windows", "app.compute.detect.reasons"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def app_modules() -> dict[str, Path]:
    return {module_name(path): path for path in (ROOT / "app").rglob("*.py")}


def imports_of(path: Path, modules: dict[str, Path], *, at_load: bool = False, type_only: bool = False
               ) -> list[tuple[str, list[str]]]:
    """(imported module, names taken from it) for every import statement of one file that runs; with
    ``type_only``, those of ``if TYPE_CHECKING:`` blocks too; with ``at_load``, only those that run when the
    module is imported (not inside functions or classes)."""
    out: list[tuple[str, list[str]]] = []
    tree = ast.parse(path.read_text(), filename=str(path))
    for_types = set() if type_only else {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for inner in ast.walk(node)
    }
    skipped = {
        id(inner)
        for node in ast.walk(tree)
        if at_load and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in for_types or id(node) in skipped:  # type-only: never executed, never a load
            continue
        if isinstance(node, ast.Import):
            out.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [alias.name for alias in node.names]
            # "from app.web import pipeline" imports the module app.web.pipeline
            submodules = [f"{node.module}.{name}" for name in names if f"{node.module}.{name}" in modules]
            out.extend((sub, []) for sub in submodules)
            taken = [n for n in names if f"{node.module}.{n}" not in modules]
            if taken or not submodules:
                out.append((node.module, taken))
    return out


def package_of(module: str) -> str:
    parts = module.split(".")
    if parts[:2] == ["app", "compute"] and len(parts) > 3:
        return ".".join(parts[:3])
    return ".".join(parts[:2]) if len(parts) > 2 or module in {"app"} else module


def graph() -> dict[str, set[str]]:
    modules = app_modules()
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for target, _ in imports_of(path, modules, type_only=True):
            if target in modules and target != name:
                edges[name].add(target)
    return edges


def test_no_import_circle() -> None:
    edges = graph()
    state: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                circles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    # A package's __init__ importing its own modules is how packages work, not a circle.
    circles = [c for c in circles if not any(m.count(".") < 1 for m in c)]
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_no_private_name_crosses_a_package() -> None:
    modules = app_modules()
    offences = []
    for name, path in modules.items():
        for target, names in imports_of(path, modules):
            if not target.startswith("app") or package_of(target) == package_of(name):
                continue
            offences += [f"{name} takes {target}.{n}" for n in names if n.startswith("_") and not n.startswith("__")]
    assert not offences, "\n".join(offences)


def imports_across(importer: Callable[[str], bool], imported: Callable[[str], bool]) -> list[str]:
    """"X imports Y" for every import of a module ``importer`` accepts of a module ``imported`` accepts."""
    modules = app_modules()
    return [f"{name} imports {target}" for name, path in modules.items() if importer(name)
            for target, _ in imports_of(path, modules) if imported(target)]


def test_worker_side_imports_nothing_of_the_web_side() -> None:
    web_roots = ("flask", "werkzeug", "app.web", "app.forecast", "app.anomalies", "app.monitors", "app.keys",
                 "app.dashboard", "app.compat.azure", "app.services", "app.web.metrics")
    offences = imports_across(lambda name: name.startswith("app.compute"),
                              lambda target: target.startswith(web_roots))
    assert not offences, "\n".join(offences)


def test_web_side_reaches_compute_only_through_the_pool_and_job_modules() -> None:
    offences = imports_across(lambda name: not name.startswith("app.compute"),
                              lambda target: target.startswith("app.compute") and target not in WEB_SAFE_COMPUTE)
    assert not offences, "\n".join(offences)


def test_what_the_web_side_may_import_from_compute_loads_nothing_numeric() -> None:
    import sys

    modules = app_modules()
    allowed_roots = set(sys.stdlib_module_names) | {"app"}
    offences = [
        f"{name} imports {target}"
        for name in sorted(WEB_SAFE_COMPUTE & set(modules))
        for target, _ in imports_of(modules[name], modules, at_load=True)
        if target.split(".")[0] not in allowed_roots
        or (target.startswith("app.") and target not in WEB_SAFE_COMPUTE and not target.startswith("app.series"))
    ]
    assert not offences, "\n".join(offences)


def test_only_gunicorns_side_imports_app_serving() -> None:
    """app.serving holds what gunicorn.conf.py's hooks and worker use: the app runs without it (flask run, the
    job workers), so no module outside it imports it."""
    offences = imports_across(lambda name: not name.startswith("app.serving"),
                              lambda target: target == "app.serving" or target.startswith("app.serving."))
    assert not offences, "\n".join(offences)


def route_modules(modules: dict[str, Path]) -> set[str]:
    """Modules that declare endpoints (a Flask Blueprint): leaves that only the composition root wires."""
    return {name for name, path in modules.items() if "Blueprint(" in path.read_text()}


def test_no_module_imports_a_route_module() -> None:
    """Routes are leaves: no module of another package imports one (create_app wires them). A package's own
    modules may share its blueprint (the dashboard's pages)."""
    modules = app_modules()
    routes = route_modules(modules)
    offences = [
        f"{name} imports {target}"
        for name, path in modules.items()
        if name != "app"
        for target, _ in imports_of(path, modules)
        if target in routes and package_of(target) != package_of(name)
    ]
    assert not offences, "\n".join(sorted(set(offences)))


def test_no_circle_between_packages() -> None:
    """Packages depend one way: no package reaches itself again through the packages it imports, directly or
    through others, TYPE_CHECKING imports included (a type named above the package that uses it is a circle in
    the design, even though the import never runs)."""
    modules = app_modules()
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        for target, _ in imports_of(path, modules, type_only=True):
            if target in modules and package_of(target) != package_of(name) and package_of(name) != "app":
                edges.setdefault(package_of(name), set()).add(package_of(target))

    def reachable(start: str) -> dict[str, str]:
        """Every package reachable from ``start``, with the package it was first reached from."""
        seen: dict[str, str] = {}
        frontier = [start]
        while frontier:
            package = frontier.pop()
            for target in sorted(edges.get(package, ())):
                if target not in seen:
                    seen[target] = package
                    frontier.append(target)
        return seen

    circles = set()
    for package in edges:
        came_from = reachable(package)
        if package in came_from:
            path = [package]
            while (step := came_from[path[-1]]) != package:
                path.append(step)
            circles.add(" -> ".join([package, *reversed(path[1:]), package]))
    assert not circles, "package circles:\n" + "\n".join(sorted(circles))


# The HTTP edge besides the web package: the composition root registers the error handlers, and modules with these
# names are a capability's routes, request schemas and OpenAPI document.
HTTP_EDGE_NAMES = {"routes", "schemas", "openapi_doc"}
# Dashboard pages that answer a domain error with the status the API gives it (api_error_for, the one mapping).
PAGES_WITH_API_STATUS = {"app.dashboard.work_pages"}
# A batch series' result carries its error in the envelope its own request would be answered with: the front doors'
# checks raise the HTTP edge's errors (they are schemas), the work after them the domain's.
BATCH_RESULTS_IN_API_ENVELOPE = {"app.batches.one_series"}
MOST_MODULES_IMPORTING_WEB_ERRORS = 5


def modules_importing_web_errors() -> set[str]:
    """App modules outside the HTTP edge that import app.web.errors (type-only imports included)."""
    modules = app_modules()
    return {
        name for name, path in modules.items()
        if name != "app" and not name.startswith("app.web") and name.rsplit(".", 1)[-1] not in HTTP_EDGE_NAMES
        and any(target == "app.web.errors" for target, _ in imports_of(path, modules, type_only=True))
    }


def test_domain_code_raises_the_domains_errors() -> None:
    importing = modules_importing_web_errors()
    allowed = PAGES_WITH_API_STATUS | BATCH_RESULTS_IN_API_ENVELOPE
    unlisted = importing - allowed
    assert not unlisted, "raise app.errors' kinds instead of app.web.errors' classes:\n" + "\n".join(sorted(unlisted))
    moved = allowed - importing
    assert not moved, "no longer import app.web.errors; strike them off the lists:\n" + "\n".join(sorted(moved))
    assert len(importing) <= MOST_MODULES_IMPORTING_WEB_ERRORS
