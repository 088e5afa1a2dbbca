"""The lineage graph of an artifact: every artifact it was built from, back to its task sources.

Each committed artifact's ``_lineage.json`` names its inputs (role → URI) and upstream artifacts;
:func:`trace` follows them from any artifact (a model, an evaluation, a report) to the artifacts with
no upstream (the task sets), collecting per node its step, config, identity (input file hashes, an
external model id), code version, tables with row counts and the checks it recorded (the curation
gate, steps run against steps planned, a failed check). Models or folders that are not artifacts
(a hub id as SFT base) are leaves of kind ``external``.

Views: :func:`format_tree` (the indented tree ``coa lineage`` prints), :func:`to_markdown` (the
Prefect artifact the pipeline flow publishes) and :func:`write_html` (a page with a layered picture
of the DAG, drawn with matplotlib: no network, no graphviz).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from coa import io
from coa.settings import Settings

EXTERNAL = "external"


@dataclasses.dataclass(frozen=True)
class Node:
    """One artifact (or external model) in the graph."""

    uri: str
    kind: str
    name: str
    step: str | None = None
    key: str | None = None
    code_version: str | None = None
    created_at: str | None = None
    config: Any = None
    identity: dict[str, Any] = dataclasses.field(default_factory=dict)
    tables: dict[str, int] = dataclasses.field(default_factory=dict)
    sources: tuple[dict[str, Any], ...] = ()
    """Input files of a task import: path and sha256."""
    checks: dict[str, Any] = dataclasses.field(default_factory=dict)
    """What the step recorded about its checks: ``gate``, ``steps_run``/``steps_planned``, ``failure``,
    ``alarm`` (RL's reward-hacking alarm, when it fired)."""
    lineage: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)

    @property
    def label(self) -> str:
        return f"{self.step or self.kind}: {self.name}"


@dataclasses.dataclass(frozen=True)
class Edge:
    """``child`` read ``parent`` as its input ``role``."""

    child: str
    parent: str
    role: str


@dataclasses.dataclass
class Graph:
    """The lineage DAG rooted at ``root`` (edges point from an artifact to what it read)."""

    root: str
    nodes: dict[str, Node]
    edges: list[Edge]

    def parents(self, uri: str) -> list[Edge]:
        return [e for e in self.edges if e.child == uri]

    def of_kind(self, kind: str) -> list[Node]:
        return [n for n in self.nodes.values() if n.kind == kind]

    def of_step(self, step: str) -> list[Node]:
        return [n for n in self.nodes.values() if n.step == step]

    def walk(self) -> Iterator[Node]:
        """Every node, breadth first from the root."""
        seen, queue = set(), deque([self.root])
        while queue:
            uri = queue.popleft()
            if uri in seen:
                continue
            seen.add(uri)
            yield self.nodes[uri]
            queue.extend(e.parent for e in self.parents(uri))

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "nodes": [
                {k: v for k, v in dataclasses.asdict(n).items() if k != "lineage"} for n in self.walk()
            ],
            "edges": [dataclasses.asdict(e) for e in self.edges],
        }


def trace(uri: str, settings: Settings | None = None, max_nodes: int = 500) -> Graph:
    """The lineage graph from the committed artifact at ``uri`` back to its sources."""
    root = io.open_artifact(uri, settings).uri
    nodes: dict[str, Node] = {}
    edges: list[Edge] = []
    queue = deque([root])
    while queue and len(nodes) < max_nodes:
        current = queue.popleft()
        if current in nodes:
            continue
        lineage = io.read_lineage(current, settings)
        nodes[current] = _node(current, lineage)
        for role, parent, external in _inputs(lineage):
            if external is not None:
                ext = f"{EXTERNAL}:{external}"
                nodes.setdefault(ext, Node(uri=ext, kind=EXTERNAL, name=external))
                edges.append(Edge(current, ext, role))
                continue
            edges.append(Edge(current, parent, role))
            if parent not in nodes:
                queue.append(parent)
    return Graph(root, nodes, _dedup(edges))


def _inputs(lineage: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    """(role, parent URI, external model name) for each input; upstream artifacts not named by role."""
    out: list[tuple[str, str, str | None]] = []
    named = set()
    for role, value in sorted((lineage.get("inputs") or {}).items()):
        if value.get("uri"):
            out.append((role, value["uri"].rstrip("/"), None))
            named.add(value["uri"].rstrip("/"))
        elif value.get("model"):
            out.append((role, "", str(value["model"])))
    for up in lineage.get("upstream") or []:
        uri = up["uri"].rstrip("/")
        if uri not in named:
            out.append(("upstream", uri, None))
            named.add(uri)
    return out


def _node(uri: str, lineage: dict[str, Any]) -> Node:
    wrapped = lineage.get("config") or {}
    is_step = isinstance(wrapped, dict) and {"config", "identity"} <= set(wrapped)
    config = wrapped.get("config") if is_step else wrapped
    identity = dict(wrapped.get("identity") or {}) if is_step else {}
    sources: list[dict[str, Any]] = []
    hashes = identity.get("input_sha256") or []
    declared = (config or {}).get("sources") if isinstance(config, dict) else None
    for i, digest in enumerate(hashes):
        path = declared[i].get("path") if declared and i < len(declared) else None
        sources.append({"path": path, "sha256": digest})
    checks: dict[str, Any] = {}
    for key in ("gate", "steps_run", "steps_planned", "model", "base_model", "alarm"):
        if lineage.get(key) is not None:
            checks[key] = lineage[key]
    failure = (lineage.get("result") or {}).get("failure")
    if failure:
        checks["failure"] = failure
    return Node(
        uri=uri,
        kind=str(lineage.get("kind", "?")),
        name=str(lineage.get("name", uri.rsplit("/", 1)[-1])),
        step=lineage.get("step"),
        key=lineage.get("key"),
        code_version=lineage.get("code_version"),
        created_at=lineage.get("created_at"),
        config=config,
        identity=identity,
        tables={k: int(v.get("rows", 0)) for k, v in (lineage.get("tables") or {}).items()},
        sources=tuple(sources),
        checks=checks,
        lineage=lineage,
    )


def _dedup(edges: list[Edge]) -> list[Edge]:
    """Each (child, parent, role) once; two roles read from one parent (a step's tasks and its
    encyclopedia, both from the synthetic step) stay two edges."""
    seen, out = set(), []
    for e in edges:
        if (e.child, e.parent, e.role) not in seen:
            seen.add((e.child, e.parent, e.role))
            out.append(e)
    return out


# -- views -------------------------------------------------------------------------------------


def _describe(node: Node) -> str:
    if node.kind == EXTERNAL:
        return f"external model {node.name}"
    rows = ", ".join(f"{t} {r}" for t, r in node.tables.items())
    bits = [f"[{node.kind}] {node.label}", node.uri]
    if rows:
        bits.append(f"rows: {rows}")
    if node.code_version:
        bits.append(f"code {node.code_version}")
    return "  ".join(bits)


def _details(node: Node) -> list[str]:
    out = [f"source {s['path']} sha256 {str(s['sha256'])[:16]}" for s in node.sources]
    for key, value in node.checks.items():
        out.append(f"{key}: {value}")
    return out


def format_tree(graph: Graph) -> str:
    """The graph as an indented tree from the root; a node reached twice is printed once."""
    lines: list[str] = []
    printed: set[str] = set()

    def visit(uri: str, role: str | None, depth: int, path: tuple[str, ...]) -> None:
        node = graph.nodes[uri]
        pad = "  " * depth
        head = f"{pad}{'└─ ' + role + ': ' if role else ''}{_describe(node)}"
        if uri in printed:
            lines.append(f"{head}  (see above)")
            return
        printed.add(uri)
        lines.append(head)
        for detail in _details(node):
            lines.append(f"{pad}     {detail}")
        for edge in graph.parents(uri):
            if edge.parent not in path:
                visit(edge.parent, edge.role, depth + 1, (*path, uri))

    visit(graph.root, None, 0, ())
    return "\n".join(lines)


def to_markdown(graph: Graph) -> str:
    """The tree (in a code block) and a table of the nodes: what the pipeline flow publishes."""
    lines = [f"# Lineage of `{graph.root}`", "", "```", format_tree(graph), "```", ""]
    lines += ["| step | kind | artifact | code version | created |", "|---|---|---|---|---|"]
    for n in graph.walk():
        lines.append(
            f"| {n.step or '-'} | {n.kind} | {n.uri} | {n.code_version or '-'} | {n.created_at or '-'} |"
        )
    return "\n".join(lines)


def layers(graph: Graph) -> dict[str, int]:
    """Each node's layer: its longest distance from the root (sources end up farthest)."""
    depth = {graph.root: 0}
    for _ in range(len(graph.nodes)):
        changed = False
        for e in graph.edges:
            if e.child in depth and depth.get(e.parent, -1) < depth[e.child] + 1:
                depth[e.parent] = depth[e.child] + 1
                changed = True
        if not changed:
            break
    return depth


def figure(graph: Graph) -> Any:
    """A matplotlib figure of the DAG: sources on the left, the root on the right, one column per layer."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    depth = layers(graph)
    deepest = max(depth.values())
    columns: dict[int, list[str]] = {}
    for uri in sorted(depth, key=lambda u: (graph.nodes[u].kind, u)):
        columns.setdefault(depth[uri], []).append(uri)
    tallest = max(len(v) for v in columns.values())
    fig = Figure(figsize=(3.2 * (deepest + 1), 1.3 * tallest + 1))
    ax = fig.add_subplot()
    pos = {}
    for d, uris in columns.items():
        for i, uri in enumerate(uris):
            pos[uri] = (deepest - d, (len(uris) - 1) / 2 - i)
    for e in graph.edges:
        (x0, y0), (x1, y1) = pos[e.parent], pos[e.child]
        ax.annotate(
            "", xy=(x1 - 0.28, y1), xytext=(x0 + 0.28, y0), arrowprops={"arrowstyle": "->", "color": "#777"}
        )
        ax.text((x0 + x1) / 2, (y0 + y1) / 2 + 0.08, e.role, fontsize=7, color="#555", ha="center")
    colors = {"tasks": "#dbe9f6", "trajectories": "#fde2c8", "curated": "#fff3b0", "model": "#d4f1d4"}
    for uri, (x, y) in pos.items():
        node = graph.nodes[uri]
        text = f"{node.step or node.kind}\n{node.name}" + (f"\n{node.key[:8]}" if node.key else "")
        ax.text(
            x,
            y,
            text,
            ha="center",
            va="center",
            fontsize=8,
            bbox={"boxstyle": "round", "fc": colors.get(node.kind, "#eee"), "ec": "#444"},
        )
    ax.set_xlim(-0.6, deepest + 0.6)
    ax.set_ylim(-(tallest + 1) / 2, (tallest + 1) / 2)
    ax.axis("off")
    return fig


def write_html(graph: Graph, out: str) -> str:
    """Write a self-contained page (picture, tree, node table) to ``out`` (local or remote)."""
    from coa import pages

    rows = [
        [
            n.step or "-",
            n.kind,
            n.uri,
            ", ".join(f"{t}={r}" for t, r in n.tables.items()),
            n.code_version or "-",
        ]
        for n in graph.walk()
    ]
    body = [
        pages.figure(pages.png(figure(graph)), "Lineage DAG: inputs on the left, the artifact on the right"),
        "<h2>Tree</h2><pre>" + pages.escape(format_tree(graph)) + "</pre>",
        "<h2>Artifacts</h2>",
        pages.table(["step", "kind", "artifact", "rows", "code version"], rows),
    ]
    fs, path = io.filesystem(out)
    parent = path.rsplit("/", 1)[0]
    if parent:
        fs.makedirs(parent, exist_ok=True)
    with fs.open(path, "wb") as fh:
        fh.write(pages.page(f"Lineage of {graph.nodes[graph.root].label}", body).encode())
    return out


def nearest(
    uri: str, match: Callable[[Node], bool], settings: Settings | None = None, max_nodes: int = 500
) -> Node | None:
    """The first artifact, breadth first from ``uri`` (itself included), that ``match`` accepts: the
    nearest ancestor of that kind (a model's last conversion before a farther one); None when none
    of the first ``max_nodes`` does. Reads only the lineage it walks, not the whole graph."""
    seen: set[str] = set()
    queue = deque([io.open_artifact(uri, settings).uri])
    while queue and len(seen) < max_nodes:
        current = queue.popleft()
        if current in seen:
            continue
        seen.add(current)
        lineage = io.read_lineage(current, settings)
        node = _node(current, lineage)
        if match(node):
            return node
        queue.extend(parent for _, parent, external in _inputs(lineage) if external is None)
    return None


CONVERT_STEP = "convert"
"""The step whose lineage records the prompt format of the data it rendered (its config's
``prompt_style`` and ``variants``)."""


def trained_on(uri: str, settings: Settings | None = None) -> Node | None:
    """The conversion nearest the model at ``uri`` in its lineage (``convert``, ``convert.r2``…): the
    data it was last trained on (the tiny student built on it, an SFT round, RL from a model trained
    on it, a registry champion all reach one); None when there is none."""

    def is_conversion(node: Node) -> bool:
        step = (node.step or "").split(".")[0]
        return step == CONVERT_STEP and isinstance(node.config, dict) and "prompt_style" in node.config

    return nearest(uri, is_conversion, settings)
