// What GPUs do (SPEC 11): the recommendation columns of the Workloads page and the utilisation columns of the Nodes
// page. Both exist only where KGWE reads a Prometheus: without one the API leaves the fields out (nodes) or
// answers 404 (recommendations), and the pages then show no column at all rather than an empty one.
import { ApiError, DASH, getJSON, h, money, plural, timestamp } from "./dom.js";

// ---------------------------------------------------------------------------------------------------------------
// Workloads: /api/v1/recommendations beside /api/v1/workloads.

// The recommendations document, null where no Prometheus is configured (the workloads document says so), or
// { error } when it cannot answer: the workloads themselves must still show when usage cannot be read.
export async function recommendationsOrNone(workloads) {
  if (!workloads.usageConfigured) return null;
  try {
    return await getJSON("recommendations");
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) return null;
    return { error: error.message };
  }
}

// Recommendations are keyed Kind/namespace/name[/part]; a workload of several templates (a PyTorchJob's master and
// worker) has one per part, and they all belong on the workload's row.
function ownedBy(key, base) {
  return key === base || key.startsWith(`${base}/`);
}

function partOf(key, base) {
  return key === base ? "" : key.slice(base.length + 1);
}

export class RecommendationColumns {
  constructor(usage) {
    this.usage = usage && !usage.error ? usage : null;
    this.error = usage && usage.error ? usage.error : null;
  }

  get shown() {
    return this.usage !== null;
  }

  // One unit per column, said in its header; the title says what the number counts.
  headers() {
    if (!this.shown) return [];
    const currency = this.usage.currency || "USD";
    return [
      h("th", { scope: "col", title: "the smallest shape of this cluster that holds the workload's peak memory and compute" },
        "Recommended shape"),
      h("th", { scope: "col", class: "num wrap", title: "GPU-equivalents freed for the pods running now (per pod below)" },
        "Saves (GPU-eq)"),
      h("th", { scope: "col", class: "num wrap", title: `money per hour saved for the pods running now (${currency})` },
        `Saves (${currency}/h)`),
      h("th", { scope: "col", title: "history length and coverage, 0..1 (high >= 0.67, medium >= 0.34)" }, "Confidence"),
    ];
  }

  // The paragraph above the table: when the usage was read, and what it could not be matched to.
  intro(workloads) {
    if (this.error) {
      return h("p", { class: "note", id: "usage-note" }, `Recommendations unavailable: ${this.error}`);
    }
    if (!this.shown) return null;
    const bases = workloads.map((w) => `${w.kind}/${w.namespace}/${w.name}`);
    const listed = (key) => bases.some((base) => ownedBy(key, base));
    const elsewhere = this.usage.recommendations.filter((r) => !listed(r.key)).length;
    return h("p", { class: "muted", id: "usage-note" }, `Recommendations from GPU usage up to ${timestamp(this.usage.at)}. `,
      elsewhere ? `${plural(elsewhere, "recommendation")} for workloads not listed here (bare pods, finished Jobs): ` : "",
      elsewhere ? h("code", {}, "kgwe recommend") : null);
  }

  cells(workload) {
    if (!this.shown) return [];
    const base = `${workload.kind}/${workload.namespace}/${workload.name}`;
    const found = this.usage.recommendations.filter((r) => ownedBy(r.key, base));
    const waiting = (this.usage.withoutEnoughHistory || []).filter((key) => ownedBy(key, base));
    if (!found.length) {
      const text = waiting.length ? "not enough history" : "no usage seen";
      return [h("td", { class: "muted", dataset: { field: "recommended" } }, text),
        ...["saved", "hourlySaved"].map((field) => h("td", { class: "num", dataset: { field } }, DASH)),
        h("td", { dataset: { field: "confidence" } }, DASH)];
    }
    const currency = this.usage.currency || "USD";
    const lines = (render) => found.map((r) => h("span", { class: "line", dataset: { key: r.key } },
      partOf(r.key, base) ? h("span", { class: "muted" }, `${partOf(r.key, base)}: `) : null, render(r)));
    return [
      h("td", { dataset: { field: "recommended" } }, lines((r) => [
        h("span", { class: "value" }, r.recommended.shape),
        h("span", { class: "muted small detail" }, r.change ? `asks ${r.asks.shape}` : "as asked")]),
      waiting.map((key) => h("span", { class: "line muted" }, `${partOf(key, base)}: not enough history`))),
      h("td", { class: "num", dataset: { field: "saved" } }, lines((r) => [
        h("span", { class: "value" }, String(r.saved.gpuEquivalents)),
        h("span", { class: "muted small detail" }, `${r.saved.gpuEquivalentsPerPod} per pod`)])),
      h("td", { class: "num", dataset: { field: "hourlySaved" } }, lines((r) =>
        h("span", { class: "value" }, r.saved.hourly === null ? DASH : money(r.saved.hourly, currency)))),
      h("td", { dataset: { field: "confidence" } }, lines((r) =>
        h("span", { class: "value" }, `${r.confidenceLevel} (${r.confidence.toFixed(2)})`))),
    ];
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Nodes: /api/v1/nodes `utilisation` on each node and type (present only where a Prometheus is configured).

export function hasUtilisation(data) {
  return Object.prototype.hasOwnProperty.call(data, "utilisationAt");
}

function gpuEq(value) {
  return String(Math.round(value * 1000) / 1000);
}

// Memory in GiB to one decimal: the header says the unit, the cell only the number.
export function memoryGiB(mib) {
  return (mib / 1024).toFixed(1);
}

// The two columns: busy beside allocated (both GPU-equivalents), and GPU memory used (GiB).
export const UTILISATION_COLUMNS = [
  { key: "busy", label: "Busy / allocated (GPU-eq)", numeric: true, wrap: true,
    value: (n) => (n.utilisation ? n.utilisation.busyGpuEquivalents : -1),
    title: "GPU-equivalents busy (engine activity in the newest usage window; an upper estimate) beside those " +
      "allocated to pods; sorted by busy" },
  { key: "memoryUsed", label: "Memory used (GiB)", numeric: true, wrap: true,
    value: (n) => (n.utilisation ? n.utilisation.memoryUsedMib : -1),
    title: "GPU memory the node's pods used in the newest usage window" },
];

const UNKNOWN_TITLE = "no usage for this node in the newest window (no pod held GPUs, or no exporter runs there)";

// The cells of one utilisation document (a node's, a type's, or a sum); null: unknown, not idle. Rows without GPUs
// (`gpus` false) have nothing to be unknown about.
export function utilisationCells(utilisation, gpus = true) {
  if (!gpus) return UTILISATION_COLUMNS.map((c) => h("td", { class: "num", dataset: { field: c.key } }, DASH));
  if (!utilisation) {
    return UTILISATION_COLUMNS.map((c) => h("td", { class: "num muted", title: UNKNOWN_TITLE, dataset: { field: c.key } },
      "unknown"));
  }
  return [
    h("td", { class: "num", dataset: { field: "busy" } },
      h("span", { class: "value", dataset: { kind: "busy" } }, gpuEq(utilisation.busyGpuEquivalents)), " / ",
      h("span", { class: "value", dataset: { kind: "allocated" } }, gpuEq(utilisation.allocatedGpuEquivalents))),
    h("td", { class: "num", dataset: { field: "memoryUsed" } },
      h("span", { class: "value" }, memoryGiB(utilisation.memoryUsedMib))),
  ];
}

// Nodes added up: only those with a known utilisation count, and the cell says how many that is.
export function summedUtilisation(nodes) {
  const known = nodes.filter((n) => n.utilisation);
  if (!known.length) return null;
  const sum = (field) => known.reduce((total, n) => total + n.utilisation[field], 0);
  return { busyGpuEquivalents: sum("busyGpuEquivalents"), allocatedGpuEquivalents: sum("allocatedGpuEquivalents"),
    memoryUsedMib: sum("memoryUsedMib"), nodesWithUsage: known.length };
}

export function utilisationNote(data) {
  const at = data.utilisationAt;
  return h("p", { class: "muted", id: "utilisation-note" }, at === null ?
    "Utilisation: the usage table has not been read from Prometheus yet." :
    `Utilisation in the usage window ending ${timestamp(new Date(at * 1000).toISOString())}; ` +
    "\"unknown\" where no pod held GPUs then or no exporter runs.");
}

// ---------------------------------------------------------------------------------------------------------------
// Idle GPUs: /api/v1/idle, pods holding GPUs that stayed below rightsizing.idleBelow for rightsizing.idleFor.

// The idle document, or { missing } where no Prometheus is configured (404: the page says how to set one up).
export async function idleOrMissing() {
  try {
    const doc = await getJSON("idle");
    // "data as of": the newest usage window the list was worked out from.
    return { ...doc, generatedAt: doc.at };
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) return { missing: error.message };
    throw error;
  }
}

// When the pod's GPUs went idle: the newest window's end less the idle stretch.
export function idleSince(at, idleHours) {
  const end = Date.parse(at);
  return Number.isNaN(end) ? null : new Date(end - idleHours * 3600 * 1000).toISOString().replace(".000Z", "Z");
}

// Costliest first: the pods whose idle GPUs cost the most an hour lead; ties by pod.
function byCost(a, b) {
  const cost = (row) => (row.hourlyCost === null ? -1 : Number(row.hourlyCost));
  return cost(b) - cost(a) || `${a.namespace}/${a.pod}`.localeCompare(`${b.namespace}/${b.pod}`);
}

export function idleView(doc) {
  const title = h("h1", {}, "Idle GPUs");
  if (doc.missing) {
    return [title, h("p", { class: "empty", id: "idle-note" }, "Idle GPUs are found in GPU usage read from Prometheus: ",
      "set ", h("code", {}, "usage.prometheus.url"), " (docs/usage.md). ", doc.missing)];
  }
  const currency = doc.currency || "USD";
  const rows = [...doc.idle].sort(byCost);
  return [title,
    h("p", { class: "muted", id: "idle-note" }, `Pods that hold GPUs now and whose GPUs all stayed below the idle `,
      `threshold (rightsizing.idleBelow) for rightsizing.idleFor, in GPU usage up to ${timestamp(doc.at)}. `,
      rows.length ? [h("span", { dataset: { field: "pods" } }, plural(rows.length, "pod")), " hold ",
        h("span", { dataset: { field: "gpuEquivalents" } }, String(doc.gpuEquivalents)), " idle GPU-equivalents costing ",
        h("span", { dataset: { field: "hourlyCost" } }, money(doc.hourlyCost, currency)), " an hour."] : ""),
    rows.length ? h("div", { class: "table-wrap" }, h("table", { class: "idle", id: "idle" },
      h("thead", {}, h("tr", {},
        h("th", { scope: "col" }, "Pod"),
        h("th", { scope: "col" }, "Tenant"),
        h("th", { scope: "col" }, "GPU type"),
        h("th", { scope: "col", class: "num" }, "GPUs"),
        h("th", { scope: "col", class: "num", title: "a GPU 1, a MIG slice its compute slices / 7" }, "GPU-eq"),
        h("th", { scope: "col", title: "when its GPUs went idle (the newest usage window less the idle stretch)" },
          "Idle since"),
        h("th", { scope: "col", class: "num" }, "Idle for"),
        h("th", { scope: "col", class: "num", title: "the highest engine activity of its GPUs while idle" },
          "Highest activity"),
        h("th", { scope: "col", class: "num", title: `what the pod's GPUs cost an hour (${currency})` },
          `Cost (${currency}/h)`))),
      h("tbody", {}, rows.map((row) => idleRow(row, doc.at, currency))))) :
      h("p", { class: "empty" }, "No idle GPUs."),
  ];
}

function idleRow(row, at, currency) {
  const since = idleSince(at, row.idleHours);
  return h("tr", { dataset: { pod: `${row.namespace}/${row.pod}` } },
    h("th", { scope: "row" }, row.pod, h("span", { class: "muted small detail" }, ` ${row.namespace}`),
      h("span", { class: "muted small line" }, row.workload), row.node ? h("span", { class: "muted small line" },
        `on ${row.node}`) : null),
    h("td", { dataset: { field: "tenant" } }, row.tenant),
    h("td", {}, h("code", {}, row.acceleratorType)),
    h("td", { class: "num", dataset: { field: "gpus" } }, String(row.gpus)),
    h("td", { class: "num", dataset: { field: "gpuEquivalents" } }, String(row.gpuEquivalents)),
    h("td", { dataset: { field: "since" } }, since ? h("time", { datetime: since }, timestamp(since)) : DASH),
    h("td", { class: "num", dataset: { field: "idleHours" } }, `${row.idleHours} h`),
    h("td", { class: "num", dataset: { field: "activity" } }, `${(row.highestEngineActivity * 100).toFixed(1)} %`),
    h("td", { class: "num", dataset: { field: "hourlyCost" } },
      row.hourlyCost === null ? DASH : money(row.hourlyCost, currency)));
}
