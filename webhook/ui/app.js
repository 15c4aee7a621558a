// KGWE's read-only pages: nodes by GPU type, hardware profiles with availability, tenants with quotas, gangs,
// GPU workloads, idle GPUs, the MIG plan.
// Hash routing (#/nodes, #/profiles, #/tenants) keeps it one static page that works without a server-side router.
import {
  DASH, append, apiToken, errorBox, getJSON, gib, h, money, plural, replaceChildren, setApiToken,
  timestamp,
} from "./dom.js";
import { PALETTE, horizontalBars, s, stackedColumns } from "./charts.js";
import { migPlanView } from "./mig.js";
import {
  RecommendationColumns, UTILISATION_COLUMNS, hasUtilisation, idleOrMissing, idleView, recommendationsOrNone,
  summedUtilisation, utilisationCells, utilisationNote,
} from "./usage.js";

const view = document.getElementById("view");
const asOf = document.getElementById("as-of");
let current = null;

function route() {
  const name = location.hash.replace(/^#\/?/, "").split(/[/?]/)[0] || "nodes";
  for (const link of document.querySelectorAll("nav a")) {
    if (link.dataset.route === name) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  const Page = ROUTES[name];
  if (!Page) {
    current = null;
    replaceChildren(view, h("p", { class: "error", role: "alert" }, `No page "${name}". `,
      h("a", { href: "#/nodes" }, "Go to the nodes.")));
    return;
  }
  current = new Page(view);
  window.scrollTo(0, 0);
  current.load();
}

function showAsOf(data) {
  asOf.textContent = data && data.generatedAt ? `data as of ${timestamp(data.generatedAt)}` : "";
}

// A page that loads one or more API documents and ignores answers that arrive after the user moved on.
class Page {
  constructor(root) {
    this.root = root;
    this.generation = 0;
  }

  async load() {
    const generation = ++this.generation;
    this.root.setAttribute("aria-busy", "true");
    try {
      const data = await this.fetch();
      if (generation !== this.generation || current !== this) return;
      showAsOf(data);
      this.show(data);
    } catch (error) {
      if (generation !== this.generation || current !== this) return;
      this.showError(error);
    } finally {
      this.root.removeAttribute("aria-busy");
    }
  }

  showError(error) {
    replaceChildren(this.root, errorBox(error));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Nodes: every node with its GPUs, filterable and sortable by type, grouped by type with totals; selecting nodes
// (or a whole type) proposes a HardwareProfile as YAML.

const NO_GPUS = "none";
const SPECIAL_TYPES = {
  unknown: "unknown (no labels)",
  mixed: "mixed GPU types",
  [NO_GPUS]: "no GPUs",
};
const SPECIAL_ORDER = ["mixed", "unknown", NO_GPUS];

function typeKey(node) {
  return node.acceleratorType || NO_GPUS;
}

function selectable(node) {
  return Boolean(node.acceleratorType) && node.acceleratorType !== "unknown";
}

const COLUMNS = [
  { key: "select", label: "", sortable: false },
  { key: "name", label: "Node", value: (n) => n.name },
  { key: "type", label: "GPU type", value: null },
  { key: "gpus", label: "GPUs", value: (n) => n.gpus ?? 0, numeric: true },
  { key: "memory", label: "Memory", title: "memory per GPU", value: (n) => n.memoryMiB ?? -1, numeric: true },
  { key: "mig", label: "MIG", sortable: false },
  { key: "sharing", label: "Sharing", value: (n) => sharingText(n.sharing) },
  { key: "nvlink", label: "NVLink", title: "GPUs in the node's largest NVLink domain", value: (n) => n.nvlinkDomainSize ?? 0,
    numeric: true },
  { key: "clique", label: "Clique", title: "multi-node NVLink clique", value: (n) => n.clique || "" },
  { key: "pods", label: "Pods", title: "GPU pods running on the node", value: (n) => n.pods ?? 0, numeric: true },
  { key: "used", label: "Used / allocatable", numeric: true, value: (n) => n.usedGpuEquivalents ?? 0,
    title: "per resource in its own unit (GPUs, MPS replicas, MIG slices of one profile); sorted by GPU-equivalents" },
  { key: "free", label: "Free", numeric: true, value: (n) => n.freeGpuEquivalents ?? 0,
    title: "per resource in its own unit (GPUs, MPS replicas, MIG slices of one profile); sorted by GPU-equivalents " +
      "(a GPU 1, a slice its compute slices / 7, a replica 1 / replicas)" },
];

// "GPU" -> "GPUs", "1g.10gb slice" -> "1g.10gb slices", "MPS replica" -> "MPS replicas"; other names as they are.
function unitText(unit, count) {
  return count !== 1 && /(GPU|slice|replica)$/.test(unit) ? `${unit}s` : unit;
}

// A node's GPU resources as the API lists them, each with its unit: one line per resource.
function resourceLines(node) {
  return (node.resources || []).map((r) => ({ key: r.resource, ...r }));
}

// Lines of several nodes added up by unit, never across units: 8 MPS replicas and 2 GPUs stay two lines.
function linesByUnit(nodes) {
  const totals = new Map();
  for (const node of nodes) {
    for (const line of resourceLines(node)) {
      const sum = totals.get(line.unit) || { key: line.unit, unit: line.unit, allocatable: 0, used: 0, free: 0 };
      for (const kind of ["allocatable", "used", "free"]) sum[kind] = Math.round((sum[kind] + line[kind]) * 100) / 100;
      totals.set(line.unit, sum);
    }
  }
  return [...totals.values()].sort((a, b) => a.unit.localeCompare(b.unit));
}

// What is free on a type, counted as pods get it: ["12 of 16 whole GPUs free", "27 of 28 1g.10gb slices free"].
function freeParts(type) {
  const parts = [];
  if (type.wholeGpus) parts.push(`${type.wholeAvailable} of ${plural(type.wholeGpus, "whole GPU")} free`);
  for (const [profile, count] of Object.entries(type.slices || {})) {
    parts.push(`${count.available} of ${plural(count.total, `${profile} slice`)} free`);
  }
  if (!parts.length && type.wholeGpus === undefined) parts.push(`${plural(type.available, "GPU")} free`);
  return parts;
}

function sharingText(sharing) {
  if (!sharing || !sharing.strategy || sharing.strategy === "none") return "exclusive";
  const replicas = sharing.replicas && sharing.replicas > 1 ? ` ×${sharing.replicas}` : "";
  return `${sharing.strategy === "mps" ? "MPS" : sharing.strategy}${replicas}`;
}

function migText(mig) {
  if (!mig || !mig.strategy || mig.strategy === "none") return null;
  const layout = Object.entries(mig.profiles || {}).map(([profile, count]) => `${count}× ${profile}`);
  return { strategy: mig.strategy, layout: layout.length ? layout : ["no instances"], ready: mig.ready !== false };
}

class NodesPage extends Page {
  constructor(root) {
    super(root);
    this.state = { type: "", search: "", sort: "type", direction: 1, group: true };
    this.selected = new Set();
    this.data = null;
  }

  fetch() {
    return getJSON("nodes");
  }

  show(data) {
    this.data = data;
    // Utilisation columns only where the API carries them (a Prometheus is configured): never an empty column.
    this.utilisation = hasUtilisation(data);
    this.columns = this.utilisation ? [...COLUMNS, ...UTILISATION_COLUMNS] : COLUMNS;
    if (!this.columns.some((c) => c.key === this.state.sort)) Object.assign(this.state, { sort: "type", direction: 1 });
    this.types = new Map((data.types || []).map((t) => [t.id, t]));
    this.nodesByName = new Map(data.nodes.map((n) => [n.name, n]));
    for (const name of [...this.selected]) {
      const node = this.nodesByName.get(name);
      if (!node || !selectable(node)) this.selected.delete(name);
    }
    this.table = h("table", { class: "nodes", id: "node-table" });
    this.actions = h("div", { class: "selection-bar", id: "selection-bar" });
    this.proposal = h("section", { class: "proposal", id: "proposal", "aria-labelledby": "proposal-title" });
    replaceChildren(this.root,
      h("h1", {}, "Nodes by GPU type"),
      this.summaryCards(),
      this.toolbar(),
      this.utilisation ? utilisationNote(data) : null,
      h("div", { class: "table-wrap" }, this.table),
      this.actions,
      this.proposal);
    this.draw();
    this.drawProposalIntro();
  }

  typeLabel(key) {
    if (key in SPECIAL_TYPES) return SPECIAL_TYPES[key];
    const type = this.types.get(key);
    const node = type ? null : this.data.nodes.find((n) => n.acceleratorType === key);
    return (type && type.productName) || (node && node.productName) || key;
  }

  groupOrder(key) {
    const special = SPECIAL_ORDER.indexOf(key);
    return special === -1 ? 0 : special + 1;
  }

  compareGroups(a, b) {
    return this.groupOrder(a) - this.groupOrder(b) || this.typeLabel(a).localeCompare(this.typeLabel(b));
  }

  summaryCards() {
    const cards = (this.data.types || []).map((type) =>
      h("button", {
        type: "button", class: type.id in SPECIAL_TYPES ? "type-card special" : "type-card", dataset: { type: type.id },
        title: `Show only ${this.typeLabel(type.id)}`, onclick: () => this.setFilter(type.id),
      },
      h("span", { class: type.id === "unknown" ? "type-name unknown" : "type-name" }, this.typeLabel(type.id)),
      type.id in SPECIAL_TYPES ? null : h("code", {}, type.id),
      h("span", { class: "type-numbers" },
        h("span", { dataset: { field: "available" }, hidden: true }, String(type.available)),
        freeParts(type).map((part) => h("span", { class: "slice-count" }, `${part} · `)),
        h("span", { dataset: { field: "gpus" } }, String(type.gpus)), type.gpus === 1 ? " GPU on " : " GPUs on ",
        h("span", { dataset: { field: "nodes" } }, String(type.nodes)), type.nodes === 1 ? " node" : " nodes")));
    return h("div", { class: "type-cards", id: "type-cards" }, cards);
  }

  toolbar() {
    const groups = [...new Set(this.data.nodes.map(typeKey))].sort((a, b) => this.compareGroups(a, b));
    const counts = {};
    for (const node of this.data.nodes) counts[typeKey(node)] = (counts[typeKey(node)] || 0) + 1;
    this.filter = h("select", { id: "type-filter", onchange: (e) => this.setFilter(e.target.value) },
      h("option", { value: "" }, `All types (${plural(this.data.nodes.length, "node")})`),
      groups.map((key) => h("option", { value: key },
        `${this.typeLabel(key)}${key in SPECIAL_TYPES ? "" : ` · ${key}`} (${counts[key]})`)));
    this.filter.value = this.state.type;
    return h("div", { class: "toolbar", role: "search" },
      h("label", {}, "GPU type ", this.filter),
      h("label", {}, "Node name ", h("input", {
        type: "search", id: "node-search", placeholder: "filter by name", value: this.state.search,
        oninput: (e) => { this.state.search = e.target.value.trim().toLowerCase(); this.draw(); },
      })),
      h("label", { class: "check" }, h("input", {
        type: "checkbox", id: "group-by-type", checked: this.state.group,
        onchange: (e) => { this.state.group = e.target.checked; this.draw(); },
      }), " Group by type"));
  }

  setFilter(type) {
    this.state.type = type;
    this.filter.value = type;
    this.draw();
  }

  visibleNodes() {
    const { type, search } = this.state;
    return this.data.nodes.filter((node) =>
      (!type || typeKey(node) === type) && (!search || node.name.toLowerCase().includes(search)));
  }

  sortRows(nodes) {
    const column = this.columns.find((c) => c.key === this.state.sort);
    const direction = this.state.direction;
    const value = column.key === "type" ? (n) => this.typeLabel(typeKey(n)) : column.value;
    return [...nodes].sort((a, b) => {
      const left = value(a);
      const right = value(b);
      const order = column.numeric ? left - right : String(left).localeCompare(String(right));
      if (column.key === "type" && order === 0) return a.name.localeCompare(b.name);
      return order * direction || a.name.localeCompare(b.name);
    });
  }

  setSort(key) {
    if (this.state.sort === key) this.state.direction = -this.state.direction;
    else Object.assign(this.state, { sort: key, direction: 1 });
    this.draw();
  }

  draw() {
    const nodes = this.sortRows(this.visibleNodes());
    const head = h("thead", {}, h("tr", {}, this.columns.map((column) => this.headerCell(column))));
    const body = h("tbody");
    if (this.state.group) {
      const groups = new Map();
      for (const node of nodes) {
        if (!groups.has(typeKey(node))) groups.set(typeKey(node), []);
        groups.get(typeKey(node)).push(node);
      }
      const keys = [...groups.keys()].sort((a, b) => this.compareGroups(a, b) *
        (this.state.sort === "type" ? this.state.direction : 1));
      for (const key of keys) {
        body.append(this.groupRow(key, groups.get(key)));
        for (const node of groups.get(key)) body.append(this.nodeRow(node));
      }
    } else {
      for (const node of nodes) body.append(this.nodeRow(node));
    }
    if (!nodes.length) {
      body.append(h("tr", {}, h("td", { colspan: this.columns.length, class: "empty" }, "No node matches the filter.")));
    }
    const foot = h("tfoot", {}, this.totalsRow("total", `All shown: ${plural(nodes.length, "node")}`, nodes));
    replaceChildren(this.table, head, body, foot);
    this.drawSelectionBar();
  }

  headerCell(column) {
    if (column.sortable === false) {
      return h("th", { scope: "col" }, column.key === "select" ? h("span", { class: "visually-hidden" }, "Select") :
        column.label);
    }
    const active = this.state.sort === column.key;
    const sort = active ? (this.state.direction > 0 ? "ascending" : "descending") : "none";
    const classes = [column.numeric ? "num" : null, column.wrap ? "wrap" : null].filter(Boolean).join(" ");
    return h("th", { scope: "col", "aria-sort": sort, class: classes || null, title: column.title },
      h("button", { type: "button", class: "sort", dataset: { sort: column.key }, onclick: () => this.setSort(column.key) },
        column.label, h("span", { class: "sort-mark", "aria-hidden": "true" }, active ? (sort === "ascending" ? " ▲" : " ▼") : "")));
  }

  groupRow(key, nodes) {
    const choosable = this.data.nodes.filter((n) => typeKey(n) === key && selectable(n));
    const chosen = choosable.filter((n) => this.selected.has(n.name)).length;
    const checkbox = h("input", {
      type: "checkbox", class: "select-group", "aria-label": `Select every ${this.typeLabel(key)} node`,
      disabled: choosable.length === 0, checked: choosable.length > 0 && chosen === choosable.length,
      indeterminate: chosen > 0 && chosen < choosable.length,
      onchange: (e) => this.selectNodes(choosable, e.target.checked),
    });
    const type = this.types.get(key);
    // What is free counted as pods get it (GPUs, slices per profile), never summed across units.
    const available = type ? h("span", {}, " · ",
      h("span", { dataset: { field: "available" }, hidden: true }, String(type.available)),
      h("span", { class: "slice-count" }, freeParts(type).join(" · "))) : null;
    const label = h("div", { class: "group-label" },
      h("span", { class: "type-name" }, this.typeLabel(key)),
      key in SPECIAL_TYPES ? null : h("code", {}, key),
      h("span", { class: "muted" }, plural(nodes.length, "node"), available));
    return this.totalsRow("group", label, nodes, { checkbox, key });
  }

  totalsRow(kind, label, nodes, { checkbox = null, key = null } = {}) {
    // Totals add up each unit on its own, in the same units as the node rows below them.
    const lines = linesByUnit(nodes);
    const gpus = nodes.reduce((total, node) => total + (node.gpus || 0), 0);
    return h("tr", { class: kind, dataset: key ? { group: key } : {} },
      h("td", { class: "select" }, checkbox),
      h("th", { scope: kind === "group" ? "rowgroup" : "row", colspan: 2 }, label),
      h("td", { class: "num", dataset: { field: "gpus" } }, String(gpus)),
      h("td", { colspan: 5 }),
      h("td", { class: "num", dataset: { field: "pods" } }, String(nodes.reduce((n, node) => n + (node.pods ?? 0), 0))),
      h("td", { class: "num" }, usage(lines)),
      h("td", { class: "num" }, freeList(lines)),
      this.utilisation ? utilisationCells(this.groupUtilisation(key, nodes), gpus > 0) : null);
  }

  // A group showing every node of its type takes the API's figure for the type; a group cut by the name filter,
  // and the totals row, add up the node rows shown (those with a known utilisation).
  groupUtilisation(key, nodes) {
    const type = key === null ? null : this.types.get(key);
    const whole = type && this.data.nodes.filter((n) => typeKey(n) === key).length === nodes.length;
    return whole ? type.utilisation : summedUtilisation(nodes);
  }

  nodeRow(node) {
    const mig = migText(node.mig);
    const key = typeKey(node);
    const badges = [];
    if (node.unschedulable) badges.push(h("span", { class: "badge warn" }, "cordoned"));
    if (node.topology && node.topology.present && node.topology.stale) {
      badges.push(h("span", { class: "badge warn", title: `topology ${Math.round(node.topology.ageSeconds)} s old` },
        "topology stale"));
    }
    const canSelect = selectable(node);
    return h("tr", { class: "node", dataset: { node: node.name, type: key } },
      h("td", { class: "select" }, h("input", {
        type: "checkbox", class: "select-node", value: node.name, "aria-label": `Select ${node.name}`,
        checked: this.selected.has(node.name), disabled: !canSelect,
        title: canSelect ? null : "Only nodes with a known GPU type can go into a profile",
        onchange: (e) => this.selectNodes([node], e.target.checked),
      })),
      h("th", { scope: "row" }, h("span", { dataset: { field: "name" } }, node.name),
        badges.length ? h("span", { class: "badges" }, badges) : null,
        (node.notes || []).map((note) => h("span", { class: "note" }, note))),
      h("td", { class: "type", dataset: { field: "type" }, title: node.typeSource ? `type from ${node.typeSource}` : null },
        h("span", { class: key === "unknown" ? "type-name unknown" : "type-name" }, this.typeLabel(key)),
        key in SPECIAL_TYPES ? null : h("code", {}, key),
        node.architecture ? h("span", { class: "muted small" }, node.architecture) : null),
      h("td", { class: "num", dataset: { field: "gpus" } }, String(node.gpus ?? 0)),
      h("td", { class: "num", dataset: { field: "memory" } }, gib(node.memoryMiB)),
      h("td", { class: "mig", dataset: { field: "mig" } }, mig ? [
        mig.layout.map((line) => h("span", { class: "line" }, line)),
        h("span", { class: "muted small" }, `${mig.strategy} strategy${mig.ready ? "" : " · not ready"}`),
      ] : DASH),
      h("td", { dataset: { field: "sharing" } }, node.gpus ? sharingText(node.sharing) : DASH),
      h("td", { class: "num", dataset: { field: "nvlink" } }, node.nvlinkDomainSize ? String(node.nvlinkDomainSize) : DASH),
      h("td", { class: "clique", dataset: { field: "clique" }, title: node.clique || null }, node.clique || DASH),
      h("td", { class: "num", dataset: { field: "pods" } }, String(node.pods ?? 0)),
      h("td", { class: "num" }, usage(resourceLines(node))),
      h("td", { class: "num" }, freeList(resourceLines(node))),
      this.utilisation ? utilisationCells(node.utilisation, Boolean(node.gpus)) : null);
  }

  selectNodes(nodes, on) {
    for (const node of nodes) {
      if (!selectable(node)) continue;
      if (on) this.selected.add(node.name);
      else this.selected.delete(node.name);
    }
    // Redrawing replaces the check box that had the focus; give it to its successor for keyboard users.
    const focused = document.activeElement;
    const row = focused && focused.closest ? focused.closest("tr") : null;
    const selector = row && row.dataset.node ? `tr.node[data-node="${CSS.escape(row.dataset.node)}"] input` :
      row && row.dataset.group ? `tr.group[data-group="${CSS.escape(row.dataset.group)}"] input` : null;
    this.draw();
    this.drawProposalIntro();
    if (selector) this.table.querySelector(selector)?.focus();
  }

  // The selection as the proposal API takes it: a whole type by id, otherwise the node names.
  selectionQuery() {
    const names = [...this.selected].sort();
    const types = new Set(names.map((name) => this.nodesByName.get(name).acceleratorType));
    if (types.size === 1) {
      const [type] = types;
      const all = this.data.nodes.filter((n) => n.acceleratorType === type).map((n) => n.name);
      if (all.length === names.length && type !== "mixed") return { type };
    }
    return { nodes: names.join(",") };
  }

  drawSelectionBar() {
    const count = this.selected.size;
    const types = [...new Set([...this.selected].map((n) => this.nodesByName.get(n).acceleratorType))];
    replaceChildren(this.actions,
      h("span", { id: "selection-count" }, count ? `${plural(count, "node")} selected (${types.join(", ")})` :
        "Select nodes, or a whole type with its group box, to propose a hardware profile."),
      h("button", { type: "button", id: "propose", class: "primary", disabled: count === 0, onclick: () => this.propose() },
        "Create profile YAML"),
      h("button", { type: "button", id: "clear-selection", disabled: count === 0, onclick: () => {
        this.selected.clear();
        this.draw();
        this.drawProposalIntro();
      } }, "Clear selection"));
    this.actions.classList.toggle("active", count > 0);
  }

  drawProposalIntro() {
    replaceChildren(this.proposal,
      h("h2", { id: "proposal-title" }, "Create a hardware profile from a selection"),
      h("p", { class: "muted" }, "KGWE proposes a HardwareProfile for the selected nodes: their type ids, a node ",
        "selector for exactly those types, the sharing they offer and the price from the pricing configuration. ",
        "Copy or download it, review it, and apply it with kubectl or your GitOps repository."));
  }

  async propose() {
    const query = this.selectionQuery();
    const generation = this.generation;
    replaceChildren(this.proposal, h("h2", { id: "proposal-title" }, "Proposed hardware profile"),
      h("p", { class: "loading" }, "Asking KGWE…"));
    let answer;
    try {
      answer = await getJSON("hardware-profiles/proposal", query);
    } catch (error) {
      if (generation === this.generation) append(replaceChildren(this.proposal), errorBox(error));
      return;
    }
    if (generation !== this.generation) return;
    const name = (answer.object && answer.object.metadata && answer.object.metadata.name) || "hardware-profile";
    const filename = `${name}.yaml`;
    const pre = h("pre", { id: "proposal-yaml", tabindex: "0" }, h("code", {}, answer.yaml));
    const status = h("span", { class: "copy-status", id: "copy-status", role: "status" });
    const from = query.type ? `every ${query.type} node` : plural(query.nodes.split(",").length, "selected node");
    replaceChildren(this.proposal,
      h("h2", { id: "proposal-title" }, "Proposed hardware profile"),
      h("p", {}, `From ${from}. Save it as `, h("code", {}, filename), ", review it, then ",
        h("code", {}, `kubectl apply -f ${filename}`), " (or commit it to your GitOps repository)."),
      (answer.notes || []).map((note) => h("p", { class: "note" }, note)),
      h("div", { class: "buttons" },
        h("button", { type: "button", id: "copy-yaml", onclick: () => copyText(answer.yaml, pre, status) }, "Copy"),
        h("button", { type: "button", id: "download-yaml", onclick: () => download(answer.yaml, filename) }, "Download"),
        status),
      pre);
    this.proposal.scrollIntoView({ block: "nearest" });
  }
}

// One line per GPU resource, with its unit: "4 / 8 GPUs", "1 / 16 1g.10gb slices", "0 / 8 MPS replicas".
function usage(lines) {
  if (!lines.length) return DASH;
  return lines.map((line) => h("span", { class: "resource", dataset: { resource: line.key } },
    h("span", { class: "value", dataset: { kind: "used" } }, String(line.used)), " / ",
    h("span", { class: "value", dataset: { kind: "allocatable" } }, String(line.allocatable)), " ",
    h("span", { class: "muted", title: line.key }, unitText(line.unit, line.allocatable))));
}

function freeList(lines) {
  const shown = lines.filter((line) => line.free !== 0);
  if (!shown.length) return DASH;
  return shown.map((line) => h("span", { class: "resource", dataset: { resource: line.key } },
    h("span", { class: "value", dataset: { kind: "free" } }, String(line.free)), " ",
    h("span", { class: "muted", title: line.key }, unitText(line.unit, line.free))));
}

async function copyText(text, pre, status) {
  try {
    await navigator.clipboard.writeText(text);
    status.textContent = "Copied to the clipboard.";
  } catch {
    // No clipboard permission (plain HTTP, an embedded browser): select the text for Ctrl+C instead.
    const range = document.createRange();
    range.selectNodeContents(pre);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    status.textContent = document.execCommand("copy") ? "Copied to the clipboard." : "Selected: press Ctrl+C to copy.";
  }
}

function download(text, filename) {
  const url = URL.createObjectURL(new Blob([text], { type: "application/yaml" }));
  const link = h("a", { href: url, download: filename, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

// ---------------------------------------------------------------------------------------------------------------
// Hardware profiles: what a user gets from each profile and how much of it is free right now.

function profileSharing(sharing) {
  const mode = (sharing && sharing.mode) || "exclusive";
  if (mode === "mig") return `MIG slice ${sharing.migProfile || ""}`.trim();
  if (mode === "mps") return sharing.gpuFraction ? `MPS, ${Math.round(sharing.gpuFraction * 100)}% of a GPU` : "MPS";
  if (mode === "time-slicing") return "time-sliced GPU";
  return "whole GPUs (exclusive)";
}

// The per-type price column counts what one pod gets, as the card's price line does.
const UNIT_PRICE_HEADERS = { mig: "Per slice-hour", mps: "Per share-hour", "time-slicing": "Per replica-hour" };

class ProfilesPage extends Page {
  fetch() {
    return getJSON("hardware-profiles");
  }

  show(data) {
    const profiles = data.profiles || [];
    replaceChildren(this.root,
      h("h1", {}, "Hardware profiles"),
      h("p", { class: "muted" }, "Ask for a profile with the pod annotation ", h("code", {}, "kgwe.io/profile: NAME"),
        ". Availability counts GPUs (MIG slices for MIG profiles) on schedulable nodes, minus what bound pods request. ",
        h("a", { href: "#/nodes" }, "Create a profile from nodes"), "."),
      profiles.length ? h("div", { class: "profiles", id: "profiles" }, profiles.map((p) => this.card(p, data.currency))) :
        h("p", { class: "empty" }, "No HardwareProfile exists yet. ", h("a", { href: "#/nodes" }, "Create one from nodes"),
          "."));
  }

  card(profile, currency) {
    const slices = profile.sharing && profile.sharing.mode === "mig";
    const count = (n) => plural(n, slices ? "slice" : "GPU").replace(/^\S+ /, "");
    const none = !profile.available;
    const pending = profile.pending || 0;
    return h("article", { class: none ? "profile none-available" : "profile", dataset: { profile: profile.name } },
      h("header", {},
        h("h2", {}, profile.displayName || profile.name),
        h("code", {}, profile.name),
        none ? h("span", { class: "badge warn" }, "none available now") : null),
      h("p", { class: "summary" }, h("span", { class: "muted" }, "Users see "),
        h("q", { dataset: { field: "summary" } }, profile.summary)),
      profile.description ? h("p", { class: "description" }, profile.description) : null,
      h("dl", {},
        h("dt", {}, "Available now"),
        h("dd", {}, h("span", { class: "big", dataset: { field: "available" } }, String(profile.available)), " of ",
          h("span", { dataset: { field: "total" } }, String(profile.total)), ` ${count(profile.total)}`,
          profile.total ? h("meter", { min: 0, max: profile.total, value: profile.available, low: profile.total * 0.2,
            optimum: profile.total, "aria-label": "share available" }) : null),
        h("dt", {}, "Pending"),
        h("dd", { class: pending ? "pending" : "muted" },
          h("span", { dataset: { field: "pending" } }, String(pending)),
          pending ? ` ${count(pending)} asked by ${plural(profile.pendingPods || 1, "pod")} waiting to be scheduled` :
            ` ${count(0)} waiting`),
        h("dt", {}, "Sharing"),
        h("dd", { dataset: { field: "sharing" } }, profileSharing(profile.sharing)),
        h("dt", {}, "Price"),
        h("dd", { dataset: { field: "price" } }, profilePrice(profile, currency))),
      h("table", { class: "profile-types" },
        h("thead", {}, h("tr", {},
          h("th", { scope: "col" }, "GPU type"), h("th", { scope: "col" }, "Memory"),
          h("th", { scope: "col" }, "Architecture"), h("th", { scope: "col", class: "num" }, "Available"),
          h("th", { scope: "col", class: "num" }, "Pending"),
          h("th", { scope: "col", class: "num", title: `what a pod pays per hour on this type (${currency})` },
            UNIT_PRICE_HEADERS[profile.sharing && profile.sharing.mode] || "Per GPU-hour"))),
        h("tbody", {}, (profile.acceleratorTypes || []).map((type) => h("tr", { dataset: { type: type.id } },
          h("th", { scope: "row" }, h("span", { class: "type-name" }, type.productName || type.id), h("code", {}, type.id)),
          h("td", { dataset: { field: "memory" } }, type.memoryGB ? `${type.memoryGB} GB` : DASH),
          h("td", { dataset: { field: "architecture" } }, type.architecture || DASH),
          h("td", { class: "num" }, h("span", { dataset: { field: "available" } }, String(type.available)), " of ",
            h("span", { dataset: { field: "total" } }, String(type.total))),
          h("td", { class: "num", dataset: { field: "pending" } }, String(type.pending || 0)),
          h("td", { class: "num", dataset: { field: "unitPrice" } }, money(type.pricePerUnitHour, currency) || DASH))))));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Tenants: each tenant's quota use per accelerator type or profile, and what its running pods cost per hour.

class TenantsPage extends Page {
  fetch() {
    return getJSON("tenants");
  }

  show(data) {
    const tenants = data.tenants || [];
    replaceChildren(this.root,
      h("h1", {}, "Tenants"),
      h("p", { class: "muted" }, "GPU quotas from TenantQuota objects, what admitted pods (bound or still pending) use of them, and the hourly cost ",
        "of each tenant's running pods (the sum of their ", h("code", {}, "kgwe.io/hourly-cost"), ")."),
      tenants.length ? h("div", { class: "tenants", id: "tenants" }, tenants.map((t) => this.card(t, data.currency))) :
        h("p", { class: "empty" }, "No tenant yet: no TenantQuota and no GPU pod."));
  }

  card(tenant, currency) {
    const meta = [
      ["Namespaces", tenant.namespaces],
      ["Groups", tenant.groups],
      ["TenantQuota", tenant.quotas],
    ].filter(([, values]) => values && values.length);
    return h("article", { class: "tenant", dataset: { tenant: tenant.tenant } },
      h("header", {},
        h("h2", {}, tenant.tenant),
        h("span", { class: "cost" },
          h("span", { class: "big", dataset: { field: "hourlyCost" } }, money(tenant.hourlyCost ?? "0", currency)),
          " per hour for ", h("span", { dataset: { field: "pods" } }, String(tenant.pods ?? 0)),
          tenant.pods === 1 ? " running pod" : " running pods",
          tenant.pendingPods ? h("span", { class: "muted" }, " · ",
            h("span", { dataset: { field: "pendingPods" } }, String(tenant.pendingPods)),
            tenant.pendingPods === 1 ? " pod pending" : " pods pending") : null)),
      h("dl", { class: "inline" }, meta.map(([label, values]) => [h("dt", {}, label), h("dd", {}, values.join(", "))])),
      tenant.limits && tenant.limits.length ? h("table", { class: "limits" },
        h("thead", {}, h("tr", {},
          h("th", { scope: "col" }, "Limit on"), h("th", { scope: "col", class: "num" }, "GPUs used / limit"),
          h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, "Share used")),
          h("th", { scope: "col", class: "num" }, "Memory used / limit"))),
        h("tbody", {}, tenant.limits.map((limit) => this.limitRow(limit)))) :
        h("p", { class: "muted no-quota" }, "No TenantQuota limits this tenant; its pods are charged to it."),
      this.budget(tenant.budget, currency),
      this.waitingList(tenant.waiting));
  }

  // The month against the tenant's budget (TenantQuota spec.budget): spent, projected, the state and its action.
  budget(budget, currency) {
    if (!budget) return null;
    const monthly = Number(budget.budget);
    return h("section", { class: "budget", dataset: { field: "budget" } },
      h("h3", {}, "Budget ", money(budget.budget, currency), " a month"),
      h("p", {}, "Spent ", h("span", { dataset: { field: "spent" } }, money(budget.spent, currency)),
        ", projected ", h("span", { dataset: { field: "projected" } }, money(budget.projected, currency)),
        " by the month's end at ", money(budget.hourlyRate, currency), " an hour: ",
        h("span", { dataset: { field: "state" } }, budgetBadge(budget))),
      h("meter", { min: 0, max: monthly, value: Math.min(Number(budget.projected), monthly),
        low: monthly * Math.min(...(budget.warnAt || ["0.8"]).map(Number)), high: monthly * 0.999, optimum: 0,
        "aria-label": "projected share of the budget" }),
      h("p", { class: "muted small" }, `Past ${budget.warnAt.map((w) => `${Math.round(Number(w) * 100)}%`).join(", ")} `,
        `new GPU pods are warned; past ${Math.round(Number(budget.actionAt) * 100)}%: ${budget.action}.`));
  }

  limitRow(limit) {
    const capped = limit.gpus !== null && limit.gpus !== undefined;
    const full = capped && limit.used >= limit.gpus;
    return h("tr", { class: full ? "full" : null, dataset: { limit: `${limit.kind}/${limit.name}` } },
      h("th", { scope: "row" }, h("span", { class: "muted small" }, limit.kind === "profile" ? "profile " : "type "),
        h("code", {}, limit.name)),
      h("td", { class: "num" }, h("span", { dataset: { field: "used" } }, String(limit.used ?? 0)), " / ",
        h("span", { dataset: { field: "gpus" } }, capped ? String(limit.gpus) : DASH)),
      h("td", { class: "use" }, limit.gpus ? h("meter", { min: 0, max: limit.gpus, value: limit.used ?? 0,
        low: limit.gpus * 0.7, high: limit.gpus * 0.9, optimum: 0, "aria-label": "share of the limit used" }) : null,
        full ? h("span", { class: "badge warn" }, "full") : null),
      h("td", { class: "num", dataset: { field: "memory" } },
        limit.gpuMemory ? `${limit.usedMemory ?? "0"} / ${limit.gpuMemory}` : DASH));
  }

  // Pods the kgwe.io/quota gate holds until the tenant's quota holds them, with the words their condition carries.
  waitingList(waiting) {
    if (!waiting || !waiting.pods) return null;
    return h("section", { class: "waiting", dataset: { field: "waiting" } },
      h("h3", {}, h("span", { dataset: { field: "waitingPods" } }, String(waiting.pods)),
        waiting.pods === 1 ? " pod waits" : " pods wait", " for quota (",
        h("span", { dataset: { field: "waitingGPUs" } }, String(waiting.gpus)), Number(waiting.gpus) === 1 ? " GPU)" : " GPUs)"),
      h("ul", {}, (waiting.pending || []).map((row) =>
        h("li", { dataset: { pod: row.pod } }, h("code", {}, row.pod), " ", h("span", { class: "muted small" }, row.why)))));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Gangs: every gang (kgwe.io/gang with kgwe.io/gang-size), its members, the NVLink room KGWE chose and why it waits.

class GangsPage extends Page {
  fetch() {
    return getJSON("gangs");
  }

  show(data) {
    const gangs = data.gangs || [];
    replaceChildren(this.root,
      h("h1", {}, "Gangs"),
      h("p", { class: "muted" }, "Pods with ", h("code", {}, "kgwe.io/gang"), " and ", h("code", {}, "kgwe.io/gang-size"),
        " start all together in one NVLink room, or wait gated holding no GPU."),
      gangs.length ? h("table", { class: "gangs", id: "gangs" },
        h("thead", {}, h("tr", {},
          ["Namespace", "Gang", "Size", "Present", "Bound", "Room", "State", "Why it waits"].map((label) =>
            h("th", { scope: "col", class: ["Size", "Present", "Bound"].includes(label) ? "num" : null }, label)))),
        h("tbody", {}, gangs.map((gang) => this.row(gang)))) :
        h("p", { class: "empty" }, "No gangs."));
  }

  row(gang) {
    const waiting = gang.state === "Waiting";
    return h("tr", { class: waiting ? "waiting" : null, dataset: { gang: `${gang.namespace}/${gang.gang}` } },
      h("td", {}, gang.namespace),
      h("th", { scope: "row" }, gang.gang),
      h("td", { class: "num" }, String(gang.size)),
      h("td", { class: "num" }, String(gang.present)),
      h("td", { class: "num" }, String(gang.bound)),
      h("td", {}, gang.room ? h("code", {}, gang.room) : DASH),
      h("td", {}, waiting ? h("span", { class: "badge warn" }, gang.state) : gang.state),
      h("td", { dataset: { field: "reason" } }, gang.reason || DASH));
  }
}

// Workloads: the GPU workloads (Deployments, Jobs, JobSets, ...), their GPU templates and total demand, the gang,
// and whether KGWE would admit each now (both webhooks on its CREATE, as a dry run), with the refusal.

class WorkloadsPage extends Page {
  async fetch() {
    // Usage never breaks the workloads: a Prometheus that cannot answer only loses the recommendation columns.
    const workloads = await getJSON("workloads");
    return { ...workloads, usage: await recommendationsOrNone(workloads) };
  }

  show(data) {
    const workloads = data.workloads || [];
    const usage = new RecommendationColumns(data.usage);
    replaceChildren(this.root,
      h("h1", {}, "Workloads"),
      h("p", { class: "muted" }, "Workloads whose pod templates ask for GPUs, judged as KGWE would judge their ",
        "creation now. ", data.refused ? `${plural(data.refused, "workload", "workloads")} would be refused.` : ""),
      usage.intro(workloads),
      workloads.length ? h("div", { class: "table-wrap" }, h("table", { class: "workloads", id: "workloads" },
        h("thead", {}, h("tr", {},
          ["Namespace", "Kind", "Name", "GPU templates", "GPUs", "Gang", "Admitted now", "Why not"].map((label) =>
            h("th", { scope: "col", class: label === "GPUs" ? "num" : null }, label)),
          usage.headers())),
        h("tbody", {}, workloads.map((workload) => this.row(workload, usage))))) :
        h("p", { class: "empty" }, "No GPU workloads."));
  }

  row(workload, usage) {
    const templates = workload.templates.map((t) => {
      const pods = t.pods === null ? "? pods" : plural(t.pods, "pod", "pods");
      const other = Object.entries(t.other || {}).map(([name, n]) => ` + ${n} ${name}`).join("");
      return h("li", {}, h("code", {}, t.path), ` ${pods} × ${plural(t.gpusPerPod, "GPU")}${other}`);
    });
    return h("tr", { class: workload.admitted ? null : "waiting",
      dataset: { workload: `${workload.kind}/${workload.namespace}/${workload.name}` } },
      h("td", {}, workload.namespace),
      h("td", {}, workload.kind),
      h("th", { scope: "row" }, workload.name),
      h("td", {}, templates.length ? h("ul", {}, templates) : DASH),
      h("td", { class: "num" }, workload.totalGpus === null ? "?" : String(workload.totalGpus)),
      h("td", {}, workload.gang ? h("code", {}, workload.gang) : DASH),
      h("td", {}, workload.admitted ? "yes" : h("span", { class: "badge warn" }, "refused")),
      h("td", { dataset: { field: "reason" } }, workload.reason || DASH),
      usage.cells(workload));
  }
}

// Idle GPUs (usage.js) and the MIG plan (mig.js): one API document each, drawn by their modules.

class IdlePage extends Page {
  fetch() {
    return idleOrMissing();
  }

  show(data) {
    replaceChildren(this.root, idleView(data));
  }
}

class MigPlanPage extends Page {
  fetch() {
    return getJSON("mig-plan");
  }

  show(data) {
    replaceChildren(this.root, migPlanView(data));
  }
}

// What a pod of the profile pays now: the range over the types it can be given now (to the cent), per slice or share
// for a sharing profile with the GPU-hour range beside it. With nothing free, the range over every type, said so.
function priceRange(range, currency) {
  const low = money(range.min, currency);
  const high = money(range.max, currency);
  return low === high ? low : `${low}–${high}`;
}

function profilePrice(profile, currency) {
  const range = profile.priceRange;
  if (!range) return "no price configured";
  const gpu = priceRange(range.perGPUHour, currency);
  const when = range.now ? "" : " when a GPU frees up (none free now)";
  if (!range.perUnitHour || profile.unit === "GPU") return `${gpu} per GPU-hour${when}`;
  const article = /^[AEIOUM]/.test(profile.unit) ? "an" : "a"; // "an MPS share", "an MIG slice"
  return `${priceRange(range.perUnitHour, currency)} per hour for ${article} ${profile.unit} (${gpu} per GPU-hour)${when}`;
}

// ---------------------------------------------------------------------------------------------------------------
// Why: KGWE's explanation of one pod (#/why?pod=NAMESPACE/NAME): the placement trace, each policy, and for a pod
// that is not bound, what blocks it now. Without a pod, the GPU pods that wait, to pick one.

function whyTarget() {
  const query = location.hash.split("?")[1] || "";
  return new URLSearchParams(query).get("pod") || "";
}

class WhyPage extends Page {
  fetch() {
    const pod = whyTarget();
    return pod ? getJSON("explain", { pod }) : getJSON("explain");
  }

  // The form keeps what was typed, and an error shows beside it: a mistyped pod must not take the input away.
  form(error) {
    return h("form", { class: "why-form", onsubmit: (event) => {
      event.preventDefault();
      const value = event.target.elements.pod.value.trim();
      const hash = value ? `#/why?pod=${encodeURIComponent(value)}` : "#/why";
      if (location.hash === hash) this.load(); else location.hash = hash;
    } },
    h("label", {}, "Pod ", h("input", { name: "pod", value: whyTarget(), placeholder: "namespace/name", size: 40 })),
    h("button", { type: "submit" }, "Explain"),
    error ? h("span", { class: "why-error", id: "why-error", role: "alert" },
      error.status ? `${error.message} (HTTP ${error.status})` : error.message) : null);
  }

  showError(error) {
    // Not a pod reference the API knows (400, 403, 404): the page stays, the form says what went wrong.
    if (![400, 403, 404].includes(error.status)) {
      super.showError(error);
      return;
    }
    replaceChildren(this.root, h("h1", {}, "Why"), this.form(error));
    this.root.querySelector("input[name=pod]").focus();
  }

  show(data) {
    const form = this.form(null);
    if (data.pending) {
      replaceChildren(this.root, h("h1", {}, "Why"), form,
        h("p", { class: "muted" }, "GPU pods that are not bound yet; pick one to see what KGWE decided and what blocks it."),
        data.pending.length ? h("ul", { class: "pending", id: "pending" }, data.pending.map((pod) =>
          h("li", {}, h("a", { href: `#/why?pod=${encodeURIComponent(pod)}` }, pod)))) :
          h("p", { class: "empty" }, "No GPU pod is waiting."));
      return;
    }
    const refused = Boolean(data.refusals && data.refusals.length);
    const verdict = refused ? h("span", { class: "badge warn" }, "refused") : null;
    // A refused pod: what refuses it comes first (the refusals), and only then what else blocks it.
    replaceChildren(this.root, h("h1", {}, "Why: ", h("code", {}, data.pod), " ", verdict), form,
      h("p", { class: "muted", id: "state" }, data.gpuPod ? `State: ${data.state}.` :
        "Not a GPU pod and no kgwe.io/ intent: KGWE leaves it as it is."),
      refused ? [h("h2", {}, "Refused"),
        h("ul", { id: "refusals" }, data.refusals.map((r) => h("li", {}, r)))] : null,
      data.blocking && data.blocking.length ? [h("h2", {}, refused ? "What else blocks it now" : "What blocks it now"),
        h("ul", { id: "blocking" }, data.blocking.map((b) => h("li", {}, b)))] : null,
      data.trace && data.trace.length ? [h("h2", {}, "Placement, step by step"),
        h("ol", { class: "trace", id: "trace" }, data.trace.map((step) => h("li", {},
          h("strong", {}, step.step), `: kept ${step.kept.length ? step.kept.join(", ") : "none"}`,
          step.note ? h("span", { class: "muted" }, ` (${step.note})`) : null,
          step.dropped.length ? h("ul", {}, step.dropped.map((d) => h("li", {}, h("code", {}, d.type), ` dropped: ${d.why}`))) :
            null)))] : null,
      data.policies && (data.policies.length || data.policiesSilent) ? [h("h2", {}, "Policies"),
        h("ul", { id: "policies" }, data.policies.map((p) => h("li", {}, h("code", {}, p.policy), `: ${p.result}`)),
          data.policiesSilent ? h("li", { class: "muted" },
            `${plural(data.policiesSilent, "other policy", "other policies")}: no decision, no violation`) : null)] : null);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Costs: what was spent over a window (#/costs?window=30d), as pictures: spend over time per tenant, the idle share,
// what MIG and MPS saved against whole GPUs, the costliest workloads and runs; then this month and its budgets.

const WINDOWS = ["24h", "7d", "30d"];

function costWindow() {
  const query = new URLSearchParams(location.hash.split("?")[1] || "");
  const asked = query.get("window") || "30d";
  return /^[0-9]+[mhdw]$/.test(asked) ? asked : "30d";
}

function amount(text) {
  const value = Number(text);
  return Number.isFinite(value) ? value : 0;
}

class CostsPage extends Page {
  fetch() {
    this.window = costWindow();
    return getJSON("costs", { window: this.window });
  }

  show(data) {
    const currency = data.currency || "USD";
    const fmt = (value) => money(Number(value).toFixed(2), currency);
    const totals = data.totals;
    const tenants = data.tenants || [];
    const colors = new Map(tenants.map((t, i) => [t.tenant, PALETTE[i % PALETTE.length]]));
    replaceChildren(this.root,
      h("h1", {}, "Costs"),
      h("p", { class: "muted" }, `From ${timestamp(data.window.from)} to ${timestamp(data.window.to)}, read from `,
        data.window.source === "prometheus" ? "KGWE's cost series in Prometheus" : "the lifetimes of the pods KGWE sees",
        ". Window: ", WINDOWS.map((w) => [h("a", { href: `#/costs?window=${w}`,
          "aria-current": w === this.window ? "true" : null, class: "window-link" }, w), " "])),
      h("div", { class: "figures", id: "cost-figures" },
        this.figure("Spent", money(totals.cost, currency), "cost"),
        this.figure("GPU-hours", totals.gpuHours, "gpuHours"),
        this.figure("Idle", totals.idleCost === "unknown" ? "unknown" : money(totals.idleCost, currency), "idleCost"),
        this.figure("Saved by MIG and MPS", money(totals.savings, currency), "savings"),
        this.figure("Projected this month", money(data.month.projected, currency), "projected")),
      h("section", { class: "chart-box", id: "spend-over-time" },
        h("h2", {}, "Spend over time per tenant"),
        this.legend(tenants.map((t) => t.tenant), colors),
        (data.spendOverTime.tenants || []).length ? stackedColumns({
          label: `Spend per ${data.spendOverTime.bucketSeconds === 3600 ? "hour" : "day"} and tenant`,
          columns: data.spendOverTime.buckets.map((b) => this.bucketLabel(b, data.spendOverTime.bucketSeconds)),
          series: this.ordered(data.spendOverTime.tenants, tenants).map((t) => ({
            name: t.tenant, values: t.costs.map(amount) })),
          colors: this.ordered(data.spendOverTime.tenants, tenants).map((t) => colors.get(t.tenant) || PALETTE[0]),
          format: fmt,
        }) : h("p", { class: "empty" }, "Nothing was spent in this window.")),
      h("div", { class: "chart-pair" },
        h("section", { class: "chart-box", id: "idle-share" },
          h("h2", {}, "Idle share"),
          h("p", { class: "muted small" }, "Cost of GPUs below the idle threshold, of the cost whose usage is known."),
          tenants.length ? horizontalBars({
            label: "Idle cost per tenant", format: fmt, width: 460, labelWidth: 110,
            rows: tenants.map((t) => {
              if (t.idleCost === "unknown") return { name: t.tenant, value: 0, note: "usage unknown" };
              const known = amount(t.cost) - amount(t.idleUnknownCost);
              return { name: t.tenant, total: known, note: `${fmt(t.idleCost)} of ${fmt(known)} idle`,
                parts: [{ value: amount(t.idleCost), cls: "bar-idle", name: "idle" },
                  { value: known - amount(t.idleCost), cls: "bar-busy", name: "busy" }] };
            }),
          }) : null),
        h("section", { class: "chart-box", id: "savings" },
          h("h2", {}, "Savings of shares"),
          h("p", { class: "muted small" }, "What MIG slices, MPS shares and time-sliced replicas cost, against as many whole GPUs."),
          tenants.length ? horizontalBars({
            label: "Cost and savings per tenant", format: fmt, width: 460, labelWidth: 110,
            rows: tenants.map((t) => ({ name: t.tenant, total: amount(t.cost) + amount(t.savings),
              note: `${fmt(t.savings)} saved`,
              parts: [{ value: amount(t.cost), cls: "bar-main", name: "spent" },
                { value: amount(t.savings), cls: "bar-saved", name: "saved" }] })),
          }) : null)),
      h("section", { class: "chart-box", id: "costliest-workloads" },
        h("h2", {}, "Costliest workloads"),
        (data.workloads || []).length ? horizontalBars({
          label: "The ten costliest workloads", format: fmt,
          rows: data.workloads.slice(0, 10).map((w) => ({ name: `${w.namespace}/${w.kind}/${w.name}`, value: amount(w.cost) })),
        }) : h("p", { class: "empty" }, "No workloads.")),
      h("section", { class: "chart-box", id: "costliest-runs" },
        h("h2", {}, "Costliest finished runs"),
        this.runs(data.runs || [], fmt)),
      h("section", { id: "month" },
        h("h2", {}, "This month and budgets"),
        this.monthTable(data.month, currency)));
  }

  figure(label, value, field) {
    return h("div", { class: "figure" }, h("span", { class: "muted small" }, label),
      h("span", { class: "big", dataset: { field } }, value));
  }

  legend(names, colors) {
    return h("ul", { class: "legend" }, names.map((name) =>
      // A presentation attribute, not a style: the page's Content-Security-Policy allows no inline styles.
      h("li", {}, s("svg", { class: "swatch", viewBox: "0 0 10 10", width: 10, height: 10, "aria-hidden": "true" },
        s("rect", { width: 10, height: 10, rx: 2, fill: colors.get(name) })), name)));
  }

  ordered(series, tenants) {
    const order = new Map(tenants.map((t, i) => [t.tenant, i]));
    return [...series].sort((a, b) => (order.get(a.tenant) ?? 99) - (order.get(b.tenant) ?? 99));
  }

  bucketLabel(iso, seconds) {
    const date = new Date(iso);
    return seconds === 3600 ? `${String(date.getUTCHours()).padStart(2, "0")}h` :
      `${date.getUTCMonth() + 1}/${date.getUTCDate()}`;
  }

  runs(runs, fmt) {
    const finished = runs.filter((r) => r.finished).slice(0, 10);
    if (!finished.length) return h("p", { class: "empty" }, "No Job, JobSet, PyTorchJob or RayJob finished in this window.");
    return [horizontalBars({
      label: "The ten costliest finished runs", format: fmt,
      rows: finished.map((r) => ({ name: `${r.namespace}/${r.kind}/${r.name}`, value: amount(r.cost),
        note: `${fmt(r.cost)} · ${r.gpuHours} GPU-h${r.complete ? "" : " (part in window)"}` })),
    }), h("table", { class: "runs", id: "runs" },
      h("thead", {}, h("tr", {}, ["Run", "Pods", "Started", "Finished", "GPU-hours", "Cost"].map((label) =>
        h("th", { scope: "col", class: ["Pods", "GPU-hours", "Cost"].includes(label) ? "num" : null }, label)))),
      h("tbody", {}, finished.map((r) => h("tr", { dataset: { run: `${r.kind}/${r.namespace}/${r.name}` } },
        h("th", { scope: "row" }, `${r.kind}/${r.name}`, h("span", { class: "muted small" }, ` ${r.namespace}`)),
        h("td", { class: "num" }, String(r.pods)),
        h("td", {}, r.started ? timestamp(r.started) : DASH),
        h("td", {}, timestamp(r.finished)),
        h("td", { class: "num" }, r.gpuHours),
        h("td", { class: "num", dataset: { field: "cost" } }, fmt(r.cost))))))];
  }

  monthTable(month, currency) {
    return [h("p", { class: "muted" }, `${timestamp(month.from)} to ${timestamp(month.to)}: spent `,
      money(month.spent, currency), `, ${money(month.hourlyRate, currency)} an hour now, projected `,
      money(month.projected, currency), " by the month's end."),
    h("table", { class: "month", id: "month-table" },
      h("thead", {}, h("tr", {}, ["Tenant", "Spent", "Per hour now", "Projected", "Budget", "State"].map((label) =>
        h("th", { scope: "col", class: label === "Tenant" || label === "State" ? null : "num" }, label)))),
      h("tbody", {}, month.tenants.map((m) => h("tr", { dataset: { tenant: m.tenant },
        class: m.state === "over" ? "waiting" : null },
        h("th", { scope: "row" }, m.tenant),
        h("td", { class: "num" }, money(m.spent, currency)),
        h("td", { class: "num" }, money(m.hourlyRate, currency)),
        h("td", { class: "num", dataset: { field: "projected" } }, money(m.projected, currency)),
        h("td", { class: "num" }, m.budget ? money(m.budget, currency) : DASH),
        h("td", { dataset: { field: "state" } }, budgetBadge(m))))))];
  }
}

// A budget's state: ok, warn (a warnAt share passed) or over (the action applies), with the projected share.
function budgetBadge(budget) {
  if (!budget || !budget.state) return DASH;
  const share = `${Math.round(Number(budget.ratio) * 100)}%`;
  if (budget.state === "ok") return `ok (${share})`;
  return h("span", { class: "badge warn" }, budget.state === "over" ? `over (${share}, ${budget.action})` :
    `warn (${share})`);
}

const ROUTES = { nodes: NodesPage, profiles: ProfilesPage, tenants: TenantsPage, costs: CostsPage, gangs: GangsPage,
  workloads: WorkloadsPage, idle: IdlePage, mig: MigPlanPage, why: WhyPage };

document.getElementById("refresh").addEventListener("click", () => current && current.load());

// The token field: the value never shows again once used (a password field left empty, "set" as placeholder).
const tokenInput = document.getElementById("token");
function showTokenState() {
  tokenInput.value = "";
  tokenInput.placeholder = apiToken() ? "set" : "none";
}
document.getElementById("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  if (!tokenInput.value.trim()) return;
  setApiToken(tokenInput.value);
  showTokenState();
  if (current) current.load();
});
document.getElementById("token-forget").addEventListener("click", () => {
  setApiToken("");
  showTokenState();
  if (current) current.load();
});
showTokenState();

// Auto-refresh, opt-in and remembered: every 30 s while the tab is visible, never while the user is in the
// middle of something the reload would discard (a node selection or proposal, the Why page's form).
const AUTO_REFRESH_MS = 30_000;
const autoRefresh = document.getElementById("auto-refresh");
autoRefresh.checked = localStorage.getItem("kgwe.autoRefresh") === "on";
autoRefresh.addEventListener("change", () => localStorage.setItem("kgwe.autoRefresh", autoRefresh.checked ? "on" : "off"));
setInterval(() => {
  if (!autoRefresh.checked || document.hidden || !current) return;
  if (current instanceof WhyPage || (current instanceof NodesPage && current.selected.size)) return;
  current.load();
}, AUTO_REFRESH_MS);
window.addEventListener("hashchange", route);
route();
