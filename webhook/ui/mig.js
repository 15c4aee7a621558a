// MIG layouts that follow demand (SPEC 11, docs/mig.md): /api/v1/mig-plan, per MIGStrategy the nodes it selects,
// each with its layout now and the one planned, why, and whether KGWE would apply it.
import { DASH, h, plural } from "./dom.js";

// {"1g.10gb": 7, "3g.40gb": 1} as one line per profile: "7× 1g.10gb" (the count and profile kept as data).
function layout(counts) {
  const entries = Object.entries(counts || {});
  if (!entries.length) return h("span", { class: "muted" }, "no instances");
  return entries.map(([profile, count]) => h("span", { class: "line", dataset: { profile, count: String(count) } },
    `${count}× ${profile}`));
}

// Whether the plan would be applied: only a change, only in mode apply (the leader then sets the label once no
// pod holding GPUs is bound to the node; the chart must allow it: webhook.migApply.enabled).
export function applyText(strategy, node) {
  if (node.action !== "change") return "no: nothing to change";
  if (strategy.mode !== "apply") return "no: mode recommend (shown only)";
  return `yes: nvidia.com/mig.config=${node.config}`;
}

const ACTIONS = { change: "change", keep: "keep", skip: "skip" };

function nodeRow(strategy, node) {
  const applied = applyText(strategy, node);
  return h("tr", { class: node.action === "change" ? "change" : null, dataset: { node: node.node } },
    h("th", { scope: "row" }, node.node),
    h("td", {}, h("code", {}, node.acceleratorType)),
    h("td", { class: "num" }, String(node.gpus)),
    h("td", { dataset: { field: "current" } }, layout(node.current),
      node.currentConfig ? h("code", { class: "small line", title: "nvidia.com/mig.config now" }, node.currentConfig) : null),
    h("td", { dataset: { field: "planned" } }, node.action === "change" ? [layout(node.planned),
      h("code", { class: "small line", title: "the mig-parted config the plan names" }, node.config)] :
      h("span", { class: "muted" }, DASH)),
    h("td", { dataset: { field: "action" } }, node.action === "change" ?
      h("span", { class: "badge warn" }, ACTIONS.change) : ACTIONS[node.action] || node.action),
    h("td", { dataset: { field: "reason" } }, node.reason,
      node.serves.length ? h("span", { class: "muted small line" }, "for ",
        node.serves.map((s) => `${s.who} (${s.profile})`).join(", ")) : null),
    h("td", { dataset: { field: "apply" } }, applied));
}

function strategySection(strategy) {
  const heading = h("h2", {}, `MIGStrategy ${strategy.name}`,
    strategy.mode ? h("span", { class: "badge" }, `mode ${strategy.mode}`) : null);
  if (strategy.problem) {
    return h("section", { class: "strategy", dataset: { strategy: strategy.name } }, heading,
      h("p", { class: "error", role: "alert" }, strategy.problem));
  }
  return h("section", { class: "strategy", dataset: { strategy: strategy.name } }, heading,
    h("p", { class: "muted" }, strategy.mode === "apply" ?
      "Mode apply: the leader sets nvidia.com/mig.config on each node planned to change, once no pod holding GPUs " +
      `is bound to it, at most once per ${strategy.rebalanceInterval || "10m"} (the chart must allow it: ` +
      "webhook.migApply.enabled). KGWE never evicts." :
      "Mode recommend: the plan is shown, nothing is labelled.",
    strategy.minUtilization > 0 ? ` A node is re-laid only when what is wanted fills at least ` +
      `${Math.round(strategy.minUtilization * 100)}% of its slices.` : ""),
    strategy.nodes.length ? h("div", { class: "table-wrap" }, h("table", { class: "mig-plan" },
      h("thead", {}, h("tr", {}, ["Node", "GPU type", "GPUs", "Layout now", "Planned", "Action", "Why",
        "Applied"].map((label) => h("th", { scope: "col", class: label === "GPUs" ? "num" : null }, label)))),
      h("tbody", {}, strategy.nodes.map((node) => nodeRow(strategy, node))))) :
      h("p", { class: "empty" }, "It selects no MIG-capable node."));
}

export function migPlanView(doc) {
  const strategies = doc.strategies || [];
  const unserved = doc.unserved || [];
  return [
    h("h1", {}, "MIG plan"),
    h("p", { class: "muted", id: "mig-note" }, "Per node a MIGStrategy selects, the MIG layout that best serves the pods ",
      "waiting for slices and the workloads recommended onto them, as a configuration of NVIDIA's MIG manager. ",
      `Usage: ${doc.usage || "not read"}. The mig-parted file of the planned configs: `, h("code", {}, "kgwe mig-plan -o yaml"),
      "."),
    strategies.length ? strategies.map(strategySection) :
      h("p", { class: "empty" }, "No MIGStrategy (docs/mig.md)."),
    unserved.length ? h("section", { id: "unserved" }, h("h2", {}, `Wanted, served by no node (${plural(unserved.length,
      "want")})`), h("table", { class: "unserved" },
      h("thead", {}, h("tr", {}, ["Who", "Source", "Profiles", "Slices"].map((label) =>
        h("th", { scope: "col", class: label === "Slices" ? "num" : null }, label)))),
      h("tbody", {}, unserved.map((want) => h("tr", { dataset: { who: want.who } },
        h("th", { scope: "row" }, want.who), h("td", {}, want.source), h("td", {}, want.options.join(", ")),
        h("td", { class: "num" }, String(want.slices))))))) : null,
  ];
}
