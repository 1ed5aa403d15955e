// Countersign chat page: what a preview read, what the plan will write and what changed since
// the person looked, as a person reads them. The server words them (`shown` on the preview reply
// and on the plan: shown_reads.py); only the clock (the browser's zone) and the currency's
// format are done here. Nothing here prints JSON.
"use strict";

// plan id → the `shown` the server sent with its preview (or its plan document): readsView
// keeps it, writesView and the changes of a stale preview use it
const shownOf = {};
// the changes list of the card being built: changesView runs before readsView in card(), which
// then names each changed read's owner and currency (both run in one synchronous card() call)
let pendingChanges = null;

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})$/;
const MONEY = /(price|total|amount|budget)/;

function fmt(iso, opts) {
  try { return new Intl.DateTimeFormat(undefined, opts).format(new Date(iso)); } catch (e) { return String(iso); }
}
const clock = (iso) => fmt(iso, { hour: "2-digit", minute: "2-digit" });
const day = (iso) => fmt(iso, { weekday: "short", day: "numeric", month: "short" });
const dayKey = (iso) => fmt(iso, { year: "numeric", month: "2-digit", day: "2-digit" });

function instant(iso) {
  // an instant in the person's clock, with its day ("Mon 23 Nov, 14:00")
  return `${day(iso)}, ${clock(iso)}`;
}

function stretch(start, end, sameDayAs) {
  // "14:00–14:45"; with the day when it is not the day of `sameDayAs`
  const lead = sameDayAs && dayKey(start) === dayKey(sameDayAs) ? "" : `${day(start)}, `;
  const tail = dayKey(start) === dayKey(end) ? clock(end) : instant(end);
  return `${lead}${clock(start)}–${tail}`;
}

const cap = (text) => text.charAt(0).toUpperCase() + text.slice(1);

function money(amount, currency) {
  if (amount == null) return "—";
  if (!currency) return String(amount);
  try {
    return new Intl.NumberFormat(undefined, { style: "currency", currency }).format(Number(amount));
  } catch (e) { return `${amount} ${currency}`; }
}

function pair(v) {
  // a busy or free stretch as [start, end] or {start, end}; null when it is not one
  if (Array.isArray(v) && v.length === 2 && ISO.test(v[0]) && ISO.test(v[1])) return { start: v[0], end: v[1] };
  if (v && typeof v === "object" && ISO.test(v.start || "") && ISO.test(v.end || "")) return { start: v.start, end: v.end };
  return null;
}

function words(v, field, currency) {
  // any value in words: instants in the person's clock, amounts with the currency, lists as
  // "a, b", objects as "k: v; …" — never JSON
  if (v == null) return "none";
  if (typeof v === "boolean") return v ? "yes" : "no";
  if (typeof v === "string" && ISO.test(v)) return instant(v);
  if (MONEY.test(field || "") && (typeof v === "number" || (typeof v === "string" && /^-?\d+(\.\d+)?$/.test(v)))) return money(v, currency);
  if (Array.isArray(v)) {
    if (!v.length) return "none";
    if (v.every(pair)) return v.map((p) => stretch(pair(p).start, pair(p).end, pair(v[0]).start)).join(", ");
    return v.map((x) => words(x, field, currency)).join(", ");
  }
  if (typeof v === "object") {
    if ("$ref" in v) return String(v.$ref).startsWith("gates.") ? "what you pick at the gate below" : `what step ${String(v.$ref).split(".")[1]} finds`;
    return Object.entries(v).map(([k, x]) => `${k.replaceAll("_", " ")}: ${words(x, k, currency)}`).join("; ");
  }
  return String(v);
}

// ---- what was read ------------------------------------------------------------------------------
function strip(item) {
  // a day strip: the window as a bar, busy stretches hatched and labelled, free ones plain; the
  // same in words for screen readers (role img + its label), so colour is never the only cue
  const w = item.window;
  if (!w) return null;
  const lo = Date.parse(w.start), hi = Date.parse(w.end);
  if (!(hi > lo) || hi - lo > 2 * 86400000) return null;
  const taken = item.kind === "free" ? gaps(w, item.free || []) : item.busy || [];
  const marks = [...taken.map((b) => [item.kind === "free" ? "taken" : "busy", b]), ...(item.free || []).map((f) => ["free", f])];
  const said = marks.sort((a, b) => Date.parse(a[1].start) - Date.parse(b[1].start))
    .map(([k, s]) => `${k} ${stretch(s.start, s.end, w.start)}`).join("; ");
  const bar = el("div", { class: "strip", role: "img", "aria-label": `${item.label}, ${stretch(w.start, w.end)}: ${said || "nothing read"}` });
  Object.assign(bar.style, { position: "relative", height: "1.4rem", border: "1px solid #888", borderRadius: "0.25rem", background: "#f0fdf4", margin: "0.2rem 0", overflow: "hidden" });
  for (const [kind, s] of marks) {
    const a = Math.max(lo, Date.parse(s.start)), b = Math.min(hi, Date.parse(s.end));
    if (b <= a) continue;
    const seg = el("span", { class: `seg ${kind}`, "aria-hidden": "true", title: `${kind} ${stretch(s.start, s.end, w.start)}` });
    Object.assign(seg.style, { position: "absolute", top: "0", bottom: "0", left: `${(100 * (a - lo)) / (hi - lo)}%`, width: `${(100 * (b - a)) / (hi - lo)}%`, fontSize: "0.7rem", lineHeight: "1.4rem", textAlign: "center", overflow: "hidden", whiteSpace: "nowrap", color: "#1b1b1b" });
    seg.style.background = kind !== "free" ? "repeating-linear-gradient(135deg, #9ca3af 0 4px, #e5e7eb 4px 8px)" : "#bbf7d0";
    seg.textContent = kind;
    bar.append(seg);
  }
  const ends = el("div", { class: "meta strip-ends", "aria-hidden": "true" }, el("span", {}, instant(w.start)),
    el("span", {}, dayKey(w.start) === dayKey(w.end) ? clock(w.end) : instant(w.end)));
  Object.assign(ends.style, { display: "flex", justifyContent: "space-between" });
  return el("div", {}, bar, ends);
}

function gaps(w, free) {
  // the stretches of the window that are not free for everyone (someone is busy)
  const out = [];
  let t = w.start;
  for (const f of [...free].sort((a, b) => Date.parse(a.start) - Date.parse(b.start))) {
    if (Date.parse(f.start) > Date.parse(t)) out.push({ start: t, end: f.start });
    if (Date.parse(f.end) > Date.parse(t)) t = f.end;
  }
  if (Date.parse(w.end) > Date.parse(t)) out.push({ start: t, end: w.end });
  return out;
}

function busyLine(item) {
  const w = item.window ? item.window.start : null;
  const busy = (item.busy || []).map((b) => stretch(b.start, b.end, w));
  const who = item.owner === "you" ? "You" : item.owner || cap(item.label);
  if (item.kind === "free") {
    const free = (item.free || []).map((f) => stretch(f.start, f.end, w));
    return `${item.label}: ${free.length ? free.join(", ") : "no time free for everyone"}`;
  }
  return `${who}: ${busy.length ? `busy ${busy.join(", ")}` : "free the whole time"}`;
}

function offersTable(item) {
  const cur = item.currency;
  const head = el("tr", {}, ...["Item", "Price", "Quantity", "Total"].map((h) => el("th", { scope: "col" }, h)));
  const num = (text) => { const td = el("td", { class: "num" }, text); td.style.textAlign = "right"; return td; };
  const rows = item.rows.map((r) => el("tr", {}, el("td", {}, r.title || r.item), num(money(r.price, cur)), num(String(r.quantity)), num(money(r.total, cur))));
  const table = el("table", { class: "offers" }, el("caption", {}, item.label), el("thead", {}, head), el("tbody", {}, ...rows));
  if (item.total != null) table.append(el("tfoot", {}, el("tr", {}, el("th", { scope: "row", colspan: "3" }, "Total"), num(money(item.total, cur)))));
  Object.assign(table.style, { borderCollapse: "collapse", margin: "0.25rem 0" });
  for (const cell of table.querySelectorAll("td, th")) Object.assign(cell.style, { padding: "0.15rem 0.6rem", borderBottom: "1px solid #ddd" });
  table.querySelector("caption").style.textAlign = "left";
  if (!item.rows.length) table.querySelector("tbody").append(el("tr", {}, el("td", { colspan: "4" }, "nothing")));
  return table;
}

function readItem(item) {
  // one read as a person reads it, by the kind the server gave it
  const li = el("li", { class: `read ${item.kind}`, "data-step": String(item.step) });
  if (item.kind === "busy" || item.kind === "free") {
    li.append(el("span", { class: "line" }, busyLine(item)));
    const bar = strip(item);
    if (bar) li.append(bar);
  } else if (item.kind === "offers") {
    li.style.listStyle = "none";
    li.append(offersTable(item));
  } else if (item.kind === "times") {
    const w = item.window ? ` (between ${day(item.window.start)} and ${day(item.window.end)})` : "";
    li.append(el("span", { class: "line" }, item.times.length ? `${item.label}${w}:` : `${item.line}${w}`));
    if (item.times.length) li.append(el("ul", {}, ...item.times.map((t) => el("li", {}, instant(t.at)))));
  } else if (item.kind === "fields" && item.rows.length) {
    li.append(el("span", { class: "line" }, `${item.label}:`), el("ul", {}, ...item.rows.map((r) => el("li", {}, `${r.field}: ${r.value}`))));
  } else {
    li.append(el("span", { class: "line" }, item.line || item.label));
  }
  return li;
}

function plainReads(plan, reads) {
  // no `shown` from the server (an older reply): each read as "field: value" words
  return Object.entries(reads).map(([n, got]) => {
    const s = plan.graph.find((g) => String(g.step) === String(n));
    const rows = got && typeof got === "object" && !Array.isArray(got)
      ? Object.entries(got).filter(([k]) => k !== "status").map(([k, v]) => ({ field: k.replaceAll("_", " "), value: words(v, k) }))
      : [{ field: "value", value: words(got) }];
    return { step: Number(n), kind: "fields", label: s ? `${s.uses} ${s.call.replaceAll("_", " ")}` : `step ${n}`, rows };
  });
}

function readsView(doc, preview, reads) {
  const plan = doc.plan;
  const shown = (preview && preview.shown) || doc.shown || null;
  if (shown) shownOf[plan.plan_id] = shown;
  if (pendingChanges) {
    renderChanges(pendingChanges.ul, pendingChanges.changes, shownOf[plan.plan_id] || null);
    pendingChanges = null;
  }
  const items = shown ? shown.reads : plainReads(plan, reads || {});
  if (!items.length) return [];
  const zoneName = typeof zone === "function" ? zone() : undefined;
  const timed = items.some((i) => ["busy", "free", "times"].includes(i.kind));
  return [
    el("h3", {}, "What was read"),
    ...(timed ? [el("p", { class: "meta" }, `Times in your clock${zoneName ? ` (${zoneName})` : ""}.`)] : []),
    el("ul", { class: "reads" }, ...items.map(readItem)),
  ];
}

// ---- what will be written -----------------------------------------------------------------------
function plainWrites(plan) {
  return plan.graph.filter((s) => s.role === "Booker" || s.role === "Notifier").map((s) => ({
    steps: [s.step],
    text: `${s.uses} ${s.call.replaceAll("_", " ")}: ${Object.entries(s.args).map(([k, v]) => `${k.replaceAll("_", " ")}: ${words(v, k)}`).join("; ")}`,
  }));
}

function writesView(plan) {
  const shown = shownOf[plan.plan_id];
  const writes = shown ? shown.writes : plainWrites(plan);
  if (!writes.length) return [];
  const ul = el("ul", { class: "writes" });
  for (const w of writes) {
    const at = w.start && w.end ? `, ${stretch(w.start, w.end)}` : "";
    ul.append(el("li", { "data-steps": w.steps.join(" ") }, `${w.text}${at}`));
  }
  return [el("h3", {}, "What will be written"), ul];
}

// ---- what changed since the person looked ------------------------------------------------------
function keyed(list) {
  // a list of offers or cart lines by item (or id); null when it is not one
  if (!Array.isArray(list) || !list.every((x) => x && typeof x === "object" && !Array.isArray(x) && (x.item || x.id))) return null;
  return new Map(list.map((x) => [String(x.item || x.id), x]));
}

function listRows(field, before, after, currency) {
  // offers or lines that moved: one row per item and field that changed
  const was = keyed(before), now = keyed(after);
  if (!was || !now) return null;
  const rows = [];
  for (const k of new Set([...was.keys(), ...now.keys()])) {
    const a = was.get(k), b = now.get(k);
    const name = (b || a).title || k;
    const at = (x) => { const p = x.price ?? x.unit_price; return p == null ? "" : ` at ${money(p, currency)}`; };
    if (!a || !b) { rows.push({ field: name, old: a ? `offered${at(a)}` : "not offered", new: b ? `offered${at(b)}` : "gone" }); continue; }
    for (const f of new Set([...Object.keys(a), ...Object.keys(b)])) {
      if (JSON.stringify(a[f]) !== JSON.stringify(b[f])) rows.push({ field: `${name} · ${f.replaceAll("_", " ")}`, old: words(a[f], f, currency), new: words(b[f], f, currency) });
    }
  }
  return rows.length ? rows : null;
}

function changeRows(field, before, after, currency) {
  const label = field.replaceAll("_", " ");
  const listed = listRows(label, before, after, currency);
  if (listed) return listed;
  const say = (v) => (Array.isArray(v) && !v.length && /busy/.test(field) ? "free" : words(v, field, currency));
  return [{ field: label, old: say(before), new: say(after) }];
}

function renderChanges(ul, changes, shown) {
  ul.replaceChildren();
  for (const c of changes) {
    const read = shown && shown.reads.find((r) => r.step === c.step);
    const who = read ? read.label : `step ${c.step}`;
    const whose = cap(who);
    for (const [field, [before, after]] of Object.entries(c.changed || {})) {
      for (const row of changeRows(field, before, after, shown ? shown.currency : null)) {
        ul.append(el("li", {}, `${whose} · ${row.field}: `, el("del", {}, row.old), " → ", el("ins", {}, row.new)));
      }
    }
  }
}

function changesView(changes) {
  // a stale preview: what moved since the person looked, before they approve again (readsView,
  // run next for the same card, names each read's owner and the currency)
  const ul = el("ul", { class: "changes" });
  renderChanges(ul, changes, null);
  pendingChanges = { ul, changes };
  return [el("h3", {}, "What changed since you looked"), ul];
}
