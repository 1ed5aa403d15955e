// Countersign chat page: the plan's steps as a picture — a DAG: steps that can run side by side
// drawn side by side, a gate as a diamond, a write with a pen and a double border, a read with a
// dashed one, arrows from each step to the steps that wait for it (inline SVG, redrawn when the
// card's width changes). At phone width it stacks (arrows on the left). The picture is an ordered
// list: each step says in words what it does, what it waits for and its status (not by colour).
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
let dagCount = 0;

function levels(graph) {
  const level = {};
  for (const s of graph) level[s.step] = 1 + Math.max(0, ...s.after.map((a) => level[a] || 0));
  const rows = {};
  for (const s of graph) (rows[level[s.step]] ||= []).push(s);
  return Object.keys(rows).sort((a, b) => a - b).map((k) => rows[k]);
}

function owner(plan, user) {
  // whose calendar or mailbox: "your" for the person asking, else the name before the @
  const me = String((plan.intent && plan.intent.user_id) || "");
  if (typeof user !== "string" || !user) return "the";
  if (user === me || user === me.split("@")[0]) return "your";
  const name = user.split("@")[0];
  return `${name.charAt(0).toUpperCase()}${name.slice(1)}'s`;
}

function gateName(gateId) {
  // "gate-A" → "Gate A"
  const g = String(gateId || "gate").replace(/[-_]+/g, " ");
  return g.charAt(0).toUpperCase() + g.slice(1);
}

const STEP_WORDS = {
  list_free_busy: (s, plan) => `Read ${owner(plan, s.args.user)} calendar`,
  find_overlap: () => "Find the times everyone is free",
  search: (s) => (typeof s.args.query === "string" ? `Search the shop for “${s.args.query}”` : "Search the shop"),
  rank_offers: (s) => `Shortlist the offers within the budget${typeof s.args.max_price === "string" ? ` (${s.args.max_price})` : ""}`,
  view_cart: () => "Read the cart as the shop has it",
  add_to_cart: () => "Add what you pick to the cart",
  purchase: (s) => `Check out${typeof s.args.max_total === "string" ? ` (at most ${s.args.max_total})` : ""}`,
  find_slots: (s) => `Watch for a free appointment${typeof s.args.consulate === "string" ? ` at ${s.args.consulate}` : ""}`,
  book_slot: () => "Book the slot you pick",
  create_event: (s, plan) => `Create the event in ${owner(plan, s.args.user)} calendar`,
  send: (s, plan) => { const o = owner(plan, s.args.to); return o === "your" ? "Mail you" : o === "the" ? "Send a mail" : `Mail ${o.slice(0, -2)}`; },
};

function stepWords(s, plan) {
  // a step in words: "Read Bob's calendar", "Gate A: you approve", "Create the event …"
  if (s.gate_id) return `${gateName(s.gate_id)}: you approve`;
  const say = STEP_WORDS[s.call];
  if (say) { try { return say(s, plan); } catch (e) { /* an unexpected argument: say it plainly below */ } }
  return `${s.role}: ${String(s.call).replaceAll("_", " ")}`;
}

function stepKind(s) {
  if (s.gate_id) return "gate";
  if (s.role === "Booker" || s.role === "Notifier") return "write";
  if (s.role === "Fetcher" || s.role === "Watcher") return "read";
  return "compute";
}

const KIND_BADGE = { gate: "◆ gate", write: "✎ writes", read: "◌ reads", compute: "∑ works out" };
const STATE_WORDS = { pending: "not started", running: "running…", succeeded: "✓ done", failed: "✗ failed", unknown: "? unknown", skipped: "– skipped", cancelled: "– cancelled" };

function stateWord(status) { return STATE_WORDS[status] || String(status || "not started"); }

function svgEl(tag, attrs) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  return node;
}

function stepNode(plan, s, row, col, words) {
  const kind = stepKind(s);
  const waits = s.after.length
    ? `; waits for ${s.after.map((a) => `step ${a} (${words[a]})`).join(" and ")}`
    : "; waits for nothing";
  const node = el("li", { class: `step ${kind}`, id: `step-${plan.plan_id}-${s.step}`, "data-status": "pending",
    "data-kind": kind, style: `--row:${row};--col:${col}` });
  if (kind === "gate") {
    const shape = svgEl("svg", { class: "shape", viewBox: "0 0 100 100", preserveAspectRatio: "none", "aria-hidden": "true", focusable: "false" });
    shape.append(svgEl("polygon", { points: "50,1 99,50 50,99 1,50", "vector-effect": "non-scaling-stroke" }));
    node.append(shape);
  }
  node.append(
    el("span", { class: "badge" }, KIND_BADGE[kind]),
    el("span", { class: "what" }, `${s.step}. ${words[s.step]}`),
    el("span", { class: "tech" }, `${s.uses}.${s.call}`),
    el("span", { class: "sr-only" }, waits),
    el("span", { class: "state" }, stateWord("pending")));
  return node;
}

function drawEdges(holder, list, svg, plan) {
  // the arrows, from each step to the steps that wait for it, in the list's own coordinates
  const box = holder.getBoundingClientRect();
  if (!box.width) return;
  svg.setAttribute("width", box.width);
  svg.setAttribute("height", box.height);
  svg.setAttribute("viewBox", `0 0 ${box.width} ${box.height}`);
  for (const p of svg.querySelectorAll("path.edge")) p.remove();
  const at = {};
  for (const node of list.children) {
    const r = node.getBoundingClientRect();
    at[node.dataset.step] = { l: r.left - box.left, r: r.right - box.left, t: r.top - box.top, b: r.bottom - box.top };
  }
  // stacked: the phone-width layout (one grid column), not a chain that happens to be straight
  const stacked = getComputedStyle(list).gridTemplateColumns.trim().split(/\s+/).length === 1;
  const order = Object.keys(at);
  holder.classList.toggle("stacked", stacked);
  for (const s of plan.graph) {
    for (const a of s.after) {
      const from = at[a], to = at[s.step];
      if (!from || !to) continue;
      let d;
      if (stacked) {
        const bend = Math.min(26, 8 + 5 * Math.abs(order.indexOf(String(s.step)) - order.indexOf(String(a))));
        const y1 = (from.t + from.b) / 2, y2 = (to.t + to.b) / 2, x = from.l - 2;
        d = `M ${x} ${y1} C ${x - bend} ${y1}, ${x - bend} ${y2}, ${x} ${y2}`;
      } else {
        const x1 = (from.l + from.r) / 2, x2 = (to.l + to.r) / 2, y1 = from.b, y2 = to.t - 2, my = (y1 + y2) / 2;
        d = `M ${x1} ${y1} C ${x1} ${my}, ${x2} ${my}, ${x2} ${y2}`;
      }
      svg.append(svgEl("path", { class: "edge", d, "marker-end": `url(#${svg.dataset.arrow})`, "data-from": a, "data-to": s.step }));
    }
  }
}

function dagView(plan) {
  const rows = levels(plan.graph);
  // at least two slots wide: a step alone on its row is half the width, centred
  const widest = Math.max(2, ...rows.map((r) => r.length));
  const words = {};
  for (const s of plan.graph) words[s.step] = stepWords(s, plan);
  const list = el("ol", { class: "dag-steps", "aria-label": "the plan's steps, in the order they can run; each says what it waits for and its status",
    style: `--cols:${2 * widest}` });
  rows.forEach((row, r) => row.forEach((s, i) => {
    const node = stepNode(plan, s, r + 1, widest - row.length + 2 * i + 1, words);
    node.dataset.step = String(s.step);
    list.append(node);
  }));
  // the status in words, whoever sets data-status (the event stream, the card page)
  new MutationObserver((changes) => {
    for (const c of changes) {
      const state = c.target.querySelector && c.target.querySelector(":scope > .state");
      if (state) state.textContent = stateWord(c.target.dataset.status);
    }
  }).observe(list, { subtree: true, attributes: true, attributeFilter: ["data-status"] });
  const arrow = `dag-arrow-${++dagCount}`;
  const svg = svgEl("svg", { class: "edges", "aria-hidden": "true", focusable: "false", "data-arrow": arrow });
  const marker = svgEl("marker", { id: arrow, viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" });
  marker.append(svgEl("path", { d: "M 0 0 L 10 5 L 0 10 z" }));
  const defs = svgEl("defs");
  defs.append(marker);
  svg.append(defs);
  const holder = el("figure", { class: "dag" }, svg, list,
    el("figcaption", { class: "meta legend" }, "Side by side: can run at the same time. ◆ a gate waits for your approval; ✎ writes; ◌ only reads."));
  if (typeof ResizeObserver === "function") {
    const ro = new ResizeObserver(() => drawEdges(holder, list, svg, plan));
    ro.observe(holder);
    for (const node of list.children) ro.observe(node);
  }
  return holder;
}
