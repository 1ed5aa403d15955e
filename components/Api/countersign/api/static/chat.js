// Countersign chat page: talk to POST /v1/intents, show each plan as a preview card, approve or
// reject its gates, follow its event stream. Plain JavaScript, served by the app; no build step.
// The card lives in card.js (its steps drawn by dag.js, its reads and writes by reads.js), its
// gates in gates.js, its evidence in evidence.js; those load first (pages.CHAT_SCRIPTS).
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

const LABELS = { max_price: "Budget", window_start: "From", window_end: "Until", duration_min: "Duration" };

function localInput(iso) {
  // a UTC instant as a datetime-local field shows it (the person's clock)
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) return String(iso);
  const p = (n) => String(n).padStart(2, "0");
  return `${at.getFullYear()}-${p(at.getMonth() + 1)}-${p(at.getDate())}T${p(at.getHours())}:${p(at.getMinutes())}`;
}

function plainItem(planId, entity) {
  // an entity as "What I understood" lists it, for a card shown without that list (its page)
  const known = (understoodOf[planId] || []).find((u) => u.entity === entity);
  if (known) return known;
  const doc = docs[planId];
  const value = doc ? (doc.plan.intent.entities || {})[entity] : undefined;
  const type = entity.endsWith("_min") ? "integer" : entity.startsWith("window_") ? "datetime" : "string";
  const edit = type === "datetime" ? localInput(value) : value && typeof value === "object" && "amount" in value ? value.amount : value;
  return { entity, label: LABELS[entity] || entity.replaceAll("_", " "), type, value, edit };
}

function changeEntity(planId, entity, anchor, button) {
  // change one entity of a plan the way "What I understood" does (openEdit: a revision to
  // approve again): on the card's own line for it when the card lists it, else next to ``button``
  const box = document.querySelector(`section.card[data-plan="${planId}"]`);
  const line = box && box.querySelector(`section.understood li[data-entity="${entity}"]`);
  const change = line && line.querySelector("button.change");
  if (change) {
    line.scrollIntoView({ block: "nearest" });
    openEdit(line, plainItem(planId, entity), planId, change);
    return;
  }
  openEdit(anchor, plainItem(planId, entity), planId, button);
}

// the conversation waiting for an answer (a question asked), kept across a reload of the page
const OPEN_KEY = "countersign.open-conversation";

function remember(conversationId) {
  try {
    if (conversationId) sessionStorage.setItem(OPEN_KEY, conversationId);
    else sessionStorage.removeItem(OPEN_KEY);
  } catch (e) { /* no session storage: a reload starts afresh */ }
}

async function resume() {
  // after a reload: the open conversation's messages since its last plan or refusal, and the
  // question it asks, come back; the next message answers it (GET /v1/conversations/{id})
  let id = null;
  try { id = sessionStorage.getItem(OPEN_KEY); } catch (e) { return; }
  if (!id) return;
  const conv = await api("GET", `/v1/conversations/${encodeURIComponent(id)}`).catch(() => null);
  const turns = (conv && conv.turns) || [];
  const last = turns[turns.length - 1];
  if (!last || last.role !== "assistant" || !last.reply || !last.reply.needs) { remember(null); return; }
  let from = 0;
  turns.forEach((t, i) => { if (t.reply && (t.reply.plan_id || t.reply.refusal)) from = i + 1; });
  for (const t of turns.slice(from)) {
    if (t.role === "person") say("person", t.text);
    else if (t.reply && t.reply.needs) say("assistant", ...questions(t.reply.needs, t.reply.understood));
  }
  conversation = conv.conversation_id;
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
    remember(reply.needs && !reply.plan ? conversation : null);
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
  else resume().catch(() => remember(null));
  loadPlans();
  input.focus();
});
