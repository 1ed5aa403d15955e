// Countersign chat page: the plan's steps as a picture (which can run side by side, where the
// gates are, which steps write).
"use strict";

function levels(graph) {
  const level = {};
  for (const s of graph) level[s.step] = 1 + Math.max(0, ...s.after.map((a) => level[a] || 0));
  const rows = {};
  for (const s of graph) (rows[level[s.step]] ||= []).push(s);
  return Object.keys(rows).sort((a, b) => a - b).map((k) => rows[k]);
}

function dagView(plan) {
  const dag = el("div", { class: "dag", "aria-label": "steps, in the order they can run" });
  for (const row of levels(plan.graph)) {
    dag.append(el("div", { class: "level" }, ...row.map((s) =>
      el("span", { class: "step", id: `step-${plan.plan_id}-${s.step}`, "data-status": "pending" },
        `${s.step}. ${s.role} · ${s.uses}.${s.call}${s.gate_id ? ` · ${s.gate_id}` : ""}`))));
  }
  return dag;
}
