// Countersign chat page: what a preview read, what the plan will write and what changed since
// the person looked, as a person reads them.
"use strict";

function changesView(changes) {
  // a stale preview: what moved since the person looked, before they approve again
  const ul = el("ul", { class: "changes" });
  for (const c of changes) {
    for (const [field, [before, after]] of Object.entries(c.changed)) {
      ul.append(el("li", {}, `step ${c.step} · ${field}: `, el("del", {}, shown(before)), " → ", el("ins", {}, shown(after))));
    }
  }
  return [el("h3", {}, "What changed since you looked"), ul];
}

function readsView(doc, preview, reads) {
  const out = [];
  if (Object.keys(reads).length) {
    out.push(el("h3", {}, "What was read"));
    for (const [n, got] of Object.entries(reads)) out.push(el("pre", {}, `step ${n}: ${JSON.stringify(got)}`));
  }
  return out;
}

function writesView(plan) {
  const out = [];
  const writes = plan.graph.filter((s) => s.role === "Booker" || s.role === "Notifier");
  if (writes.length) {
    out.push(el("h3", {}, "What will be written"));
    const ul = el("ul");
    for (const s of writes) {
      const args = Object.entries(s.args).map(([k, v]) => `${k}: ${shown(v)}`).join("; ");
      ul.append(el("li", {}, `${s.uses}.${s.call} — ${args}`));
    }
    out.push(ul);
  }
  return out;
}
