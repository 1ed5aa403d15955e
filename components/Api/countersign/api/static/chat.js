// Countersign chat page: talk to POST /v1/intents, show each plan as a preview card, approve or
// reject its gates, follow its event stream. Plain JavaScript, served by the app; no build step.
"use strict";

const csrf = () => (document.cookie.match(/(?:^|; )cs_csrf=([^;]*)/) || [])[1] || "";
let conversation = null;
let lastConversation = null;  // the conversation of the last plan (a revision goes there)

async function api(method, path, body) {
  const r = await fetch(path, {
    method,
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf() },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await r.json().catch(() => ({}));
  if (!r.ok) {
    const err = new Error(data.detail || data.title || `HTTP ${r.status}`);
    err.code = data.code;
    err.problem = data;
    throw err;
  }
  return data;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function say(role, ...content) {
  const log = document.getElementById("log");
  const m = el("div", { class: `msg ${role}`, role: "article" }, ...content);
  log.append(m);
  m.scrollIntoView({ block: "end" });
  return m;
}

function levels(graph) {
  const level = {};
  for (const s of graph) level[s.step] = 1 + Math.max(0, ...s.after.map((a) => level[a] || 0));
  const rows = {};
  for (const s of graph) (rows[level[s.step]] ||= []).push(s);
  return Object.keys(rows).sort((a, b) => a - b).map((k) => rows[k]);
}

function shown(value) {
  if (value && typeof value === "object" && "$ref" in value) {
    // a gate's choice, or what an earlier step finds (a watcher's slot)
    return String(value.$ref).startsWith("gates.") ? "(what you pick at the gate below)" : `(what step ${String(value.$ref).split(".")[1]} finds)`;
  }
  return typeof value === "string" ? value : JSON.stringify(value);
}

function card(doc, preview, changes, understood) {
  const plan = doc.plan;
  const box = el("section", { class: "card", "aria-label": `plan ${plan.plan_id}`, "data-plan": plan.plan_id });
  box.append(
    el("h2", {}, plan.intent.intent.replaceAll("_", " ")),
    el("p", { class: "meta" },
      `plan ${plan.plan_id} · hash ${doc.plan_hash.slice(0, 12)}… · signed by key ${doc.signature.pubkey_id} · `,
      el("a", { href: `/plans/${plan.plan_id}` }, "open this card"), " · ",
      el("a", { href: `/v1/plans/${plan.plan_id}/receipts`, download: `receipts-${plan.plan_id}.json`,
        title: "every gate decision, signed; check it offline with: countersign receipts verify FILE" },
        "Download approval receipts")),
  );
  if (understood && understood.length) box.append(understoodList(understood, plan.plan_id));
  const dag = el("div", { class: "dag", "aria-label": "steps, in the order they can run" });
  for (const row of levels(plan.graph)) {
    dag.append(el("div", { class: "level" }, ...row.map((s) =>
      el("span", { class: "step", id: `step-${plan.plan_id}-${s.step}`, "data-status": "pending" },
        `${s.step}. ${s.role} · ${s.uses}.${s.call}${s.gate_id ? ` · ${s.gate_id}` : ""}`))));
  }
  box.append(dag);
  if (changes && changes.length) {
    // a stale preview: what moved since the person looked, before they approve again
    box.append(el("h3", {}, "What changed since you looked"));
    const ul = el("ul", { class: "changes" });
    for (const c of changes) {
      for (const [field, [before, after]] of Object.entries(c.changed)) {
        ul.append(el("li", {}, `step ${c.step} · ${field}: `, el("del", {}, shown(before)), " → ", el("ins", {}, shown(after))));
      }
    }
    box.append(ul);
  }
  const evidence = doc.evidence || [];
  if (evidence.length) box.append(evidenceList(doc, evidence));
  const reads = (preview && preview.normalized && preview.normalized.steps) || {};
  if (Object.keys(reads).length) {
    box.append(el("h3", {}, "What was read"));
    for (const [n, out] of Object.entries(reads)) box.append(el("pre", {}, `step ${n}: ${JSON.stringify(out)}`));
  }
  const writes = plan.graph.filter((s) => s.role === "Booker" || s.role === "Notifier");
  if (writes.length) {
    box.append(el("h3", {}, "What will be written"));
    const ul = el("ul");
    for (const s of writes) {
      const args = Object.entries(s.args).map(([k, v]) => `${k}: ${shown(v)}`).join("; ");
      ul.append(el("li", {}, `${s.uses}.${s.call} — ${args}`));
    }
    box.append(ul);
  }
  // the first gate is decided on the preview; a later gate (shopping's gate-B) opens when the
  // writes before it are done, showing what they did (the cart and its total)
  docs[plan.plan_id] = doc;
  // a durable plan (a watcher) starts first; its gate opens when the watcher finds something
  const durable = plan.graph.some((s) => s.mode === "durable");
  if (ENDED.includes(doc.status)) {
    // an ended plan (completed, cancelled from here or from the Temporal UI, …) offers nothing
    box.append(el("p", { class: "meta ended" }, `This plan is ${doc.status}: there is nothing left to start or approve.`));
  } else {
    if (durable) box.append(starter(doc));
    const startGate = durable ? startGateOf(plan) : null;
    plan.graph.filter((s) => s.gate_id && s.gate_id !== startGate).forEach((g, i) => box.append(i === 0 && !durable ? gate(doc, g, reads) : later(doc, g)));
  }
  const status = el("p", { class: "meta", role: "status", "aria-live": "polite", id: `status-${plan.plan_id}` });
  box.append(status);
  const stop = el("button", { type: "button", class: "cancel", onclick: async () => {
    stop.disabled = true;
    try {
      await api("POST", `/v1/plans/${plan.plan_id}/cancel`);
      for (const b of box.querySelectorAll("button")) b.disabled = true;
      const s = document.getElementById(`status-${plan.plan_id}`);
      if (!s || !s.textContent.startsWith("finished")) note(plan.plan_id, "cancelled: nothing more of it runs");
    } catch (e) { note(plan.plan_id, `refused: ${e.message}`); stop.disabled = false; }
  } }, "Cancel plan");
  box.append(el("p", {}, stop));
  if (doc.workflow_id) box.append(temporalLink(doc.workflow_id));
  return box;
}

// plan statuses after which nothing is decided any more (the API folds them from the event log)
const ENDED = ["completed", "failed", "cancelled", "rejected", "expired", "refused"];

function closeCard(planId) {
  // the plan ended: its gates and its "Start watching" offer nothing any more
  const box = document.querySelector(`section.card[data-plan="${planId}"]`);
  if (!box) return;
  for (const fs of box.querySelectorAll("fieldset[data-gate], fieldset.starter")) {
    fs.disabled = true;
    fs.setAttribute("aria-disabled", "true");
  }
}

function when(start, end) {
  // a slot in the person's own clock ("Wed 25 Nov, 14:30 – 15:00"); the UTC instants are in
  // the option's title and data attributes
  try {
    const day = new Intl.DateTimeFormat(undefined, { weekday: "short", day: "numeric", month: "short" });
    const hm = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" });
    return `${day.format(new Date(start))}, ${hm.format(new Date(start))} – ${hm.format(new Date(end))} (${zone() || "local time"})`;
  } catch (e) { return `${start} → ${end}`; }
}

function choices(doc, reads) {
  // a gate that picks one of the slots a read found (meeting), or one of the shortlisted items
  const minutes = (doc.plan.intent.entities || {}).duration_min || 30;
  for (const out of Object.values(reads)) {
    if (out && Array.isArray(out.slots) && out.slots.length && out.slots[0].id) {
      // appointment slots a watcher found (visa): pick one by its id
      return out.slots.map((s) => ({ label: s.at ? `${new Date(s.at).toLocaleString()} (${s.id})` : s.id, title: s.at || s.id, value: { slot: { id: s.id } } }));
    }
    if (out && Array.isArray(out.slots)) {
      return out.slots.map((s) => {
        const end = new Date(new Date(s.start).getTime() + minutes * 60000).toISOString();
        return { label: when(s.start, end), title: `${s.start} → ${end}`, value: { start: s.start, end } };
      });
    }
    if (out && Array.isArray(out.shortlist)) {
      return out.shortlist.map((o) => ({ label: `${o.title || o.item} — ${o.price}${o.total && o.total !== o.price ? ` (total ${o.total})` : ""}`, value: { item: o.item } }));
    }
  }
  return [];
}

const docs = {};

function needsChoice(doc, gateId) {
  // a gate needs a choice when a step's arguments refer to it (``gates.<gate>.choice``)
  return doc.plan.graph.some((s) => JSON.stringify(s.args).includes(`"gates.${gateId}.choice`));
}

function startGateOf(plan) {
  // a watcher that holds what it finds has two gates after its Watcher: the first guards the
  // hold and the mail with the card's link, and is approved by starting the watcher
  const watch = plan.graph.find((s) => s.role === "Watcher");
  const gates = plan.graph.filter((s) => s.gate_id && watch && s.step > watch.step);
  return gates.length >= 2 ? gates[0].gate_id : null;
}

function starter(doc) {
  const planId = doc.plan.plan_id;
  const startGate = startGateOf(doc.plan);
  const guarded = startGate ? doc.plan.graph.find((s) => s.gate_id === startGate).args.summary : "";
  const fs = el("fieldset", { "aria-label": "start watching", class: "starter", "data-start-gate": startGate || "" }, el("legend", {}, "Start watching?"),
    el("p", { class: "meta" }, startGate
      ? `Runs on Temporal until it finds something or its budget ends. Starting approves ${startGate} (${guarded}): when a slot appears it is held for you and you get a mail with a link to this card; nothing is booked before you approve it, and the hold is released if you reject it or do not decide in time.`
      : "Runs on Temporal until it finds something or its budget ends; nothing is booked before you approve what it found."));
  const go = el("button", { type: "button", onclick: async () => {
    go.disabled = true;
    try {
      const tokens = {};
      if (startGate) tokens[startGate] = (await api("POST", `/v1/plans/${planId}/gates/${startGate}/approve`, {})).token;
      const run = await api("POST", `/v1/plans/${planId}/execute`, { tokens });
      note(planId, `watching (${run.workflow_id})`);
      if (run.workflow_id) showRun(planId, run.workflow_id);
      follow(planId);
    } catch (e) { note(planId, `refused: ${e.message}`); go.disabled = false; }
  } }, "Start watching");
  fs.append(go);
  return fs;
}

async function openFound(planId, found) {
  // the watcher found something: gate-A opens with it as the choices
  const doc = docs[planId];
  const box = document.querySelector(`section.card[data-plan="${planId}"]`);
  if (!doc || !box) return;
  const g = doc.plan.graph.filter((s) => s.gate_id).pop();  // the gate that books what was found
  const spot = g && box.querySelector(`fieldset[data-gate="${g.gate_id}"][disabled]`);
  if (!spot) return;
  const fs = gate(doc, g, { found });
  fs.insertBefore(el("p", {}, "The watcher found this; pick one and approve to book it:"), fs.children[1]);
  spot.replaceWith(fs);
  note(planId, "found: waiting for your approval");
}

function later(doc, g) {
  const before = doc.plan.graph.filter((s) => s.gate_id && s.step < g.step).map((s) => s.gate_id).join(", ");
  return el("fieldset", { "aria-label": `gate ${g.gate_id}`, "data-gate": g.gate_id, disabled: "" },
    el("legend", {}, `${g.gate_id} (later)`),
    el("p", { class: "meta" }, before && !doc.plan.graph.some((s) => s.role === "Watcher")
      ? `After ${before}: you will see what was done and decide ${g.gate_id}.`
      : `When the watcher finds something, you choose from it and decide ${g.gate_id}.`));
}

async function openGate(planId, gateId) {
  // a later gate is waiting: show what the writes before it did, then Approve / Reject
  const doc = docs[planId];
  const box = document.querySelector(`section.card[data-plan="${planId}"]`);
  const spot = box && box.querySelector(`fieldset[data-gate="${gateId}"][disabled]`);
  if (!doc || !spot) return;
  const shownDoc = await api("GET", `/v1/plans/${planId}`);
  const done = shownDoc.steps.filter((s) => s.role === "Booker" && s.status === "succeeded" && s.output);
  const g = doc.plan.graph.find((s) => s.gate_id === gateId);
  const fs = gate(doc, g, {});
  const review = el("ul", { class: "review" });
  for (const s of done) {
    const out = Object.entries(s.output).filter(([k]) => !["sandbox", "notice", "status"].includes(k)).map(([k, v]) => `${k}: ${shown(v)}`).join("; ");
    review.append(el("li", {}, `step ${s.step} · ${s.uses}.${s.call} — ${out}`));
  }
  // what the provider holds now, read afresh after those writes (the whole cart as the shop
  // reports it): this, not the plan's idea of it, is what the gate approves
  const wrote = new Set(done.map((s) => s.step));
  for (const s of shownDoc.steps.filter((x) => x.role === "Fetcher" && x.output && x.step < g.step)) {
    const after = (doc.plan.graph.find((x) => x.step === s.step) || { after: [] }).after;
    if (!after.some((a) => wrote.has(a))) continue;
    const lines = Array.isArray(s.output.lines) ? s.output.lines.map((l) => `${l.item} × ${l.quantity} at ${l.unit_price}`).join(", ") : "";
    const total = s.output.cart_total || s.output.total;
    review.append(el("li", {}, `step ${s.step} · ${s.uses}.${s.call} — now: ${lines || shown(s.output)}${total ? `; total ${total}` : ""}`));
  }
  const guarded = doc.plan.graph.filter((s) => s.after.includes(g.step) || (s.step > g.step && (s.role === "Booker" || s.role === "Notifier")));
  fs.insertBefore(el("div", {}, el("p", {}, "Done so far:"), review,
    el("p", {}, `Approving ${gateId} runs: ${guarded.map((s) => `${s.uses}.${s.call}`).join(", ")}.`)), fs.children[1]);
  spot.replaceWith(fs);
  const first = fs.querySelector("button");
  if (first) first.focus();
}

async function approveGate(planId, gateId, choice) {
  // a watcher that has just found something may not be waiting for the decision yet (its
  // update is refused for a moment): try again briefly before saying so
  for (let i = 0; ; i++) {
    try { return await api("POST", `/v1/plans/${planId}/gates/${gateId}/approve`, { choice }); }
    catch (e) {
      if (e.code !== "durable_update_refused" || i >= 20) throw e;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}

function labelled(doc, reads, value) {
  // how a choice the server offers reads to a person: a slot in their clock, an offer with its price
  const local = choices(doc, reads).find((o) => JSON.stringify(o.value) === JSON.stringify(value));
  if (local) return local;
  if (value && value.start && value.end) return { label: when(value.start, value.end), title: `${value.start} → ${value.end}`, value };
  return { label: shown(value), value };
}

async function fillChoices(doc, g, reads, holder, approve, options) {
  // the choices are the ones the server accepts for this gate (derived from the signed plan and
  // what the preview read): the card offers those and nothing else
  const planId = doc.plan.plan_id;
  let offered = [];
  try {
    const now = await api("GET", `/v1/plans/${planId}`);
    const mine = (now.gates || []).find((x) => x.gate_id === g.gate_id);
    offered = (mine && mine.choices && mine.choices.options) || [];
  } catch (e) { offered = []; }
  offered.forEach((o, i) => {
    const shownAs = labelled(doc, reads, o.value);
    options.push(shownAs);
    const id = `choice-${planId}-${g.gate_id}-${i}`;
    holder.append(el("div", {},
      el("input", Object.assign({ type: "radio", name: `choice-${planId}-${g.gate_id}`, id, value: String(i),
        "data-choice": JSON.stringify(o.value) }, i === 0 ? { checked: "" } : {})),
      el("label", Object.assign({ for: id }, shownAs.title ? { title: shownAs.title } : {}), shownAs.label)));
  });
  if (!offered.length) {
    holder.append(el("p", { class: "meta", role: "status" }, "Nothing was offered to choose from (for example nothing within the budget, or no free time in the window): there is nothing to approve here. Ask again with other limits."));
    approve.disabled = true;
  } else {
    approve.disabled = false;
  }
}

function gate(doc, g, reads) {
  const planId = doc.plan.plan_id;
  const options = [];
  const fs = el("fieldset", { "aria-label": `gate ${g.gate_id}`, "data-gate": g.gate_id }, el("legend", {}, `Approve ${g.gate_id}?`));
  const holder = el("div", { class: "choices" });
  fs.append(holder);
  const approve = el("button", { type: "button", onclick: async () => {
    approve.disabled = reject.disabled = true;
    const picked = fs.querySelector("input[type=radio]:checked");
    const choice = picked ? options[Number(picked.value)].value : null;
    try {
      const tok = await approveGate(planId, g.gate_id, choice);
      follow(planId);
      if (!tok.durable) {
        const run = await api("POST", `/v1/plans/${planId}/execute`, { tokens: { [g.gate_id]: tok.token } });
        const s = document.getElementById(`status-${planId}`);
        if (!s || !s.textContent.startsWith("finished")) {  // the event stream may have said it first
          note(planId, run.status === "completed" ? "finished: completed" : `execute: ${run.status}${run.waiting_gate ? ` (next: ${run.waiting_gate})` : ""}`);
        }
        if (run.workflow_id) showRun(planId, run.workflow_id);
        if (run.status === "waiting" && run.waiting_gate) await openGate(planId, run.waiting_gate);
      } else {
        note(planId, `sent to ${tok.durable.workflow_id}`);
        showRun(planId, tok.durable.workflow_id);
      }
    } catch (e) {
      if (e.code === "stale_world") { await lookAgain(doc, e.problem.changes || []); return; }
      note(planId, `refused: ${e.message}`);
      approve.disabled = reject.disabled = false;
    }
  } }, "Approve");
  const reject = el("button", { type: "button", onclick: async () => {
    approve.disabled = reject.disabled = true;
    try { await api("POST", `/v1/plans/${planId}/gates/${g.gate_id}/reject`, {}); note(planId, `${g.gate_id} rejected: nothing it guards will run`); }
    catch (e) { note(planId, `refused: ${e.message}`); }
  } }, "Reject");
  fs.append(el("div", {}, approve, " ", reject));
  if (needsChoice(doc, g.gate_id)) {
    approve.disabled = true;
    fillChoices(doc, g, reads, holder, approve, options);
  }
  return fs;
}

async function lookAgain(doc, changes) {
  // the world moved between the preview and the write: show what changed, preview afresh, and
  // ask again (nothing was written; the earlier approval is spent)
  const planId = doc.plan.plan_id;
  const fresh = await api("POST", `/v1/plans/${planId}/preview`);
  const old = document.querySelector(`section.card[data-plan="${planId}"]`);
  const box = card(doc, fresh, changes);
  if (old) old.replaceWith(box); else say("assistant", box);
  note(planId, "The world changed since you looked (above): this is a fresh preview; nothing was written. Approve again if it is still what you want.");
  const first = box.querySelector("fieldset input, fieldset button");
  if (first) first.focus();
}

function temporalLink(workflowId) {
  const ui = document.body.dataset.temporalUi;
  const label = `durable run ${workflowId}`;
  if (!ui) return el("p", { class: "meta run" }, label);
  return el("p", { class: "meta run" },
    el("a", { href: `${ui}/${encodeURIComponent(workflowId)}`, target: "_blank", rel: "noopener" }, `${label} in the Temporal UI`));
}

// the fields of a write's result a person cares about (a provider's answer says much more)
const SAID = ["accepted", "response", "uid", "href", "order_id", "total", "booking_id", "message"];

async function showDone(planId) {
  // what the writes returned (the event created, each mail sent), from the plan's stored results
  const doc = await api("GET", `/v1/plans/${planId}`);
  const box = document.querySelector(`section.card[data-plan="${planId}"]`);
  const done = doc.steps.filter((s) => (s.role === "Booker" || s.role === "Notifier") && s.output != null);
  if (!box || !done.length || box.querySelector(".done")) return;
  const ul = el("ul", { class: "done" });
  for (const s of done) {
    const out = Object.entries(s.output).filter(([k]) => SAID.includes(k)).map(([k, v]) => `${k}: ${shown(v)}`).join("; ");
    ul.append(el("li", {}, `step ${s.step} · ${s.uses}.${s.call} · ${s.status}${out ? ` — ${out}` : ""}`));
  }
  box.querySelector(`#status-${planId}`).before(el("h3", {}, "What was done"), ul);
}

function showRun(planId, workflowId) {
  const box = document.querySelector(`section.card[data-plan="${planId}"]`);
  if (box && !box.querySelector(".run")) box.append(temporalLink(workflowId));
}

function note(planId, text) {
  const s = document.getElementById(`status-${planId}`);
  if (s) s.textContent = text;
}

const following = new Set();
function follow(planId) {
  if (following.has(planId)) return;
  following.add(planId);
  const src = new EventSource(`/v1/plans/${planId}/events`);
  const mark = (ev) => {
    const e = JSON.parse(ev.data);
    const map = { step_started: "running", step_finished: "succeeded", step_failed: "failed", step_unknown: "unknown" };
    if (e.step && map[ev.type]) {
      const node = document.getElementById(`step-${planId}-${e.step}`);
      if (node) node.dataset.status = map[ev.type];
    }
    if (ev.type === "handed_off" && e.details && e.details.workflow_id) showRun(planId, e.details.workflow_id);
    if (ev.type === "gate_waiting" && e.op) openGate(planId, e.op).catch(() => {});
    if (ev.type === "watcher_polled") {
      if (e.status === "found" && e.details && e.details.found) openFound(planId, e.details.found);
      else note(planId, `watching: checked, nothing yet (${e.ts || ""})`);
    }
    if (ev.type === "execute_finished" || ev.type === "durable_finished") {
      loadPlans();
      if (e.status === "waiting") { note(planId, "waiting for your next decision"); return; }
      closeCard(planId);
      note(planId, `finished: ${e.status}`);
      showDone(planId).catch(() => {});
    }
  };
  for (const kind of ["step_started", "step_finished", "step_failed", "step_unknown", "execute_finished", "durable_finished", "gate_approved", "handed_off", "gate_waiting", "watcher_polled"]) {
    src.addEventListener(kind, mark);
  }
}

function evidenceList(doc, evidence) {
  // what ContextRAG gave the planner (its hash is signed in the plan): tick items and re-plan
  // without them (POST /v1/plans/{id}/replan — a revision; the earlier plan stays as it was)
  const planId = doc.plan.plan_id;
  const box = el("fieldset", { class: "evidence", "aria-label": "evidence used" },
    el("legend", {}, "Evidence used (from your preferences, history and consent)"));
  const boxes = evidence.map((e, i) => {
    const id = `ev-${planId}-${i}`;
    const tick = el("input", { type: "checkbox", id, value: e.source_ref });
    box.append(el("div", {}, tick, " ", el("label", { for: id },
      `${e.type} · ${e.key}: ${shown(e.value)} (confidence ${e.confidence}, from ${e.source_ref})`)));
    return tick;
  });
  const go = el("button", { type: "button", class: "replan", onclick: async () => {
    const drop = boxes.filter((b) => b.checked).map((b) => b.value);
    if (!drop.length) { note(planId, "tick the evidence to leave out first"); return; }
    go.disabled = true;
    try {
      const reply = await api("POST", `/v1/plans/${planId}/replan`, { drop });
      if (reply.plan) say("assistant", `Planned again without ${drop.join(", ")}. Nothing is written until you approve.`, card(reply, reply.preview));
      else if (reply.needs) say("assistant", `Without that: ${reply.needs.map((n) => n.question).join(" ")}`);
    } catch (e) { note(planId, `re-plan refused: ${e.message}`); }
    go.disabled = false;
    loadPlans();
  } }, "Drop selected and re-plan");
  box.append(el("p", {}, go));
  return box;
}

function showPlan(reply) {
  // a plan (or a revision of one) as a card, with what was understood
  const lead = reply.revises
    ? `This revises ${reply.revises.plan_id} (changed: ${reply.revises.changed.join(", ")}); starting it stops the earlier one. Nothing is written until you approve.`
    : "Here is what I would do. Nothing is written until you approve.";
  say("assistant", lead, card(reply, reply.preview, null, reply.understood));
}

function questions(needs, understood) {
  // each question names what is missing and why; what was heard but not taken, and what WAS
  // understood, are shown with it (the server words both: understood.py)
  const out = needs.map((n) => el("p", { class: "ask" }, n.ask || n.question,
    n.heard_shown ? el("span", { class: "meta heard" }, ` (I heard: ${n.heard_shown})`) : ""));
  if (understood && understood.length) {
    out.push(el("p", { class: "meta" }, "What I understood so far:"),
      el("ul", { class: "understood", "aria-label": "what I understood so far" },
        ...understood.map((u) => el("li", { "data-entity": u.entity }, u.line))));
  }
  return out;
}

function editedValue(u, input) {
  // the edit field's text as the value the plan takes (the registry type the server names)
  const raw = input.type === "checkbox" ? input.checked : input.value.trim();
  if (u.type === "boolean") return Boolean(raw);
  if (u.type === "integer") { const n = Number.parseInt(raw, 10); if (Number.isNaN(n)) throw new Error("give a whole number"); return n; }
  if (u.type === "number") { const n = Number(raw); if (Number.isNaN(n)) throw new Error("give a number"); return n; }
  if (u.type === "datetime") {
    const at = new Date(raw);  // the person's local time, as the field shows it
    if (Number.isNaN(at.getTime())) throw new Error("give a date and time");
    return at.toISOString().replace(/\.\d{3}Z$/, "Z");
  }
  if (u.type === "list") return raw.split(",").map((x) => x.trim()).filter(Boolean);
  if (u.value && typeof u.value === "object" && "amount" in u.value) return { ...u.value, amount: raw };
  if (u.value && typeof u.value === "object") { try { return JSON.parse(raw); } catch (e) { return raw; } }
  return raw;
}

function editField(u, id, noteId) {
  const attrs = { id, "aria-describedby": noteId };
  if (u.type === "boolean") return el("input", Object.assign(attrs, { type: "checkbox" }, u.edit ? { checked: "" } : {}));
  const type = { integer: "number", number: "number", datetime: "datetime-local", email: "email" }[u.type] || "text";
  return el("input", Object.assign(attrs, { type, value: u.edit == null ? "" : String(u.edit) }));
}

function understoodList(items, planId) {
  // what was understood, each with the words it came from; "Change" edits one, and the change
  // makes a NEW plan (POST /v1/plans/{id}/revise — a revision to approve again), said before it happens
  const box = el("section", { class: "understood", "aria-label": "what I understood" }, el("h3", {}, "What I understood"));
  const ul = el("ul", { class: "understood" });
  for (const u of items) {
    const li = el("li", { "data-entity": u.entity }, el("span", { class: "line" }, u.line), " ");
    const change = el("button", { type: "button", class: "change", "aria-label": `Change ${u.label}` }, "Change");
    change.addEventListener("click", () => openEdit(li, u, planId, change));
    li.append(change);
    ul.append(li);
  }
  box.append(ul);
  return box;
}

function openEdit(li, u, planId, change) {
  if (li.querySelector("form")) return;
  const id = `edit-${planId}-${u.entity}`;
  const noteId = `${id}-note`;
  const input = editField(u, id, noteId);
  const status = el("span", { class: "meta", role: "status" });
  const close = () => { form.remove(); change.disabled = false; change.focus(); };
  const form = el("form", { class: "edit", "aria-label": `change ${u.label}` },
    el("p", { class: "meta note", id: noteId }, "Changing this makes a new plan; you will approve again."),
    el("label", { for: id }, `${u.label}${u.entity.endsWith("_min") ? " (minutes)" : ""}${u.entity.endsWith("_s") ? " (seconds)" : ""}${u.type === "list" ? " (separated by commas)" : ""} `), input, " ",
    el("button", { type: "submit" }, "Make a new plan"), " ",
    el("button", { type: "button", class: "keep", onclick: close }, "Keep it"), " ", status);
  form.addEventListener("keydown", (ev) => { if (ev.key === "Escape") { ev.preventDefault(); close(); } });
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    let value;
    try { value = editedValue(u, input); } catch (e) { status.textContent = e.message; input.focus(); return; }
    for (const b of form.querySelectorAll("button")) b.disabled = true;
    try {
      const reply = await api("POST", `/v1/plans/${planId}/revise`, { entities: { [u.entity]: value } });
      close();
      if (reply.plan) showPlan(reply);
      else if (reply.needs) say("assistant", ...questions(reply.needs, reply.understood));
    } catch (e) {
      status.textContent = `not changed: ${e.message}`;
      for (const b of form.querySelectorAll("button")) b.disabled = false;
    }
    loadPlans();
  });
  change.disabled = true;
  li.append(form);
  input.focus();
}

function zone() {
  try { return Intl.DateTimeFormat().resolvedOptions().timeZone || undefined; } catch (e) { return undefined; }
}

async function send(text) {
  say("person", text);
  try {
    // "change it to april" revises the last plan: it goes to that plan's conversation
    const revising = !conversation && lastConversation && /^\s*(please\s+)?(change|instead|make\s+it|move\s+it|switch)\b/i.test(text);
    const reply = await api("POST", "/v1/intents", { text, conversation_id: revising ? lastConversation : conversation, tz: zone() });
    conversation = reply.conversation_id || conversation;
    if (reply.refusal) {
      // an answer, never a plan: said plainly (not as an error); the conversation keeps nothing of it
      say("assistant", el("p", { class: "answer" }, reply.refusal.message));
    } else if (reply.plan) {
      showPlan(reply);
      lastConversation = conversation;
      conversation = null;
    } else if (reply.needs) {
      say("assistant", ...questions(reply.needs, reply.understood));
    } else if (reply.can_do) {
      say("assistant", `I can: ${reply.can_do.join("; ")}.`);
    }
  } catch (e) {
    say("assistant", `That did not work: ${e.message}`);
  }
  loadPlans();
}

async function loadPlans() {
  const list = document.getElementById("plans");
  if (!list) return;
  const page = await api("GET", "/v1/plans?limit=10").catch(() => ({ items: [] }));
  list.replaceChildren(...page.items.map((p) =>
    el("li", {}, el("a", { href: `/plans/${p.plan_id}` }, `${p.intent} · ${p.status} · ${p.created_at}`))));
}

async function showCard(planId) {
  const doc = await api("GET", `/v1/plans/${planId}`);
  const preview = await api("POST", `/v1/plans/${planId}/preview`).catch(() => null);
  say("assistant", card(doc, preview));
  for (const s of doc.steps) {
    const node = document.getElementById(`step-${planId}-${s.step}`);
    if (node) node.dataset.status = s.status;
  }
  follow(planId);
}

document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("say");
  const input = document.getElementById("text");
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const text = input.value.trim();
    if (text) { input.value = ""; send(text); }
  });
  const planId = document.body.dataset.plan;
  if (planId) showCard(planId).catch((e) => say("assistant", e.message));
  loadPlans();
  input.focus();
});
