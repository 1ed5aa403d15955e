// Countersign chat page: the preview card (its steps, what was read, what will be written, what
// changed), its status line and its event stream. Loaded before chat.js; no build step.
"use strict";

function shown(value) {
  if (value && typeof value === "object" && "$ref" in value) {
    // a gate's choice, or what an earlier step finds (a watcher's slot)
    return String(value.$ref).startsWith("gates.") ? "(what you pick at the gate below)" : `(what step ${String(value.$ref).split(".")[1]} finds)`;
  }
  // anything else in words (reads.js), never JSON: what a write returned, what a gate shows
  return typeof value === "string" ? value : words(value);
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
  if (understood && understood.length) {
    understoodOf[plan.plan_id] = understood;  // a fresh preview of this plan shows it again
    box.append(understoodList(understood, plan.plan_id));
  }
  box.append(dagView(plan));
  if (changes && changes.length) box.append(...changesView(changes));
  const evidence = doc.evidence || [];
  if (evidence.length) box.append(evidenceList(doc, evidence));
  const reads = (preview && preview.normalized && preview.normalized.steps) || {};
  box.append(...readsView(doc, preview, reads), ...writesView(plan));
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
      if (!s || s.dataset.state !== "final") note(plan.plan_id, "cancelled: nothing more of it runs");
    } catch (e) { note(plan.plan_id, `refused: ${e.message}`); stop.disabled = false; }
  } }, "Cancel plan");
  box.append(el("p", {}, stop));
  if (doc.workflow_id) box.append(temporalLink(doc.workflow_id));
  revisionsOf(plan.plan_id, box).catch(() => {});
  return box;
}

// what each plan was understood as (chat.js understoodList), by plan id
const understoodOf = {};

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
  for (const b of box.querySelectorAll("button.cancel")) b.disabled = true;  // nothing left to stop
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

async function lookAgain(doc, changes) {
  // the world moved between the preview and the write: show what changed, preview afresh, and
  // ask again (nothing was written; the earlier approval is spent)
  const planId = doc.plan.plan_id;
  const fresh = await api("POST", `/v1/plans/${planId}/preview`);
  const old = document.querySelector(`section.card[data-plan="${planId}"]`);
  const box = card(doc, fresh, changes, understoodOf[planId]);
  if (old) old.replaceWith(box); else say("assistant", box);
  note(planId, "The world changed since you looked (above): this is a fresh preview; nothing was written. Approve again if it is still what you want.");
  await resumeAt(planId, box);
  // the focus goes to the decision asked again: the gate's picked choice (or its first button),
  // once the gate has its choices — not to the first checkbox of the card (the evidence)
  const open = box.querySelector("fieldset[data-gate]:not([disabled])");
  if (open) { await open.ready; focusGate(open); }
}

async function resumeAt(planId, box) {
  // a fresh card starts at the first gate; a plan stale at a later gate (shopping's gate-B)
  // has passed the earlier ones: show the steps as they are and open the gate asked again
  const now = await api("GET", `/v1/plans/${planId}`).catch(() => null);
  if (!now) return;
  for (const s of now.steps || []) {
    const node = document.getElementById(`step-${planId}-${s.step}`);
    if (node) node.dataset.status = s.status;
  }
  const gates = now.gates || [];
  const next = gates.find((g) => g.status !== "passed");
  if (!next || next === gates[0]) return;
  for (const g of gates.filter((x) => x.status === "passed")) {
    const fs = box.querySelector(`fieldset[data-gate="${g.gate_id}"]`);
    if (fs) { fs.disabled = true; fs.setAttribute("aria-disabled", "true"); }
  }
  const spot = box.querySelector(`fieldset[data-gate="${next.gate_id}"]`);
  if (spot && !spot.disabled) spot.disabled = true;  // openGate replaces a waiting (disabled) one
  await openGate(planId, next.gate_id);
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

// the status line only moves forward: once a plan finished, failed, was cancelled or rejected,
// no earlier state ("sent to watch-…", "execute: running") is shown over it, whatever order the
// event stream and the HTTP replies arrive in. A state is "progress" or "final" (data-state).
const STATE_ORDER = { progress: 1, final: 2 };

function stateOf(text) {
  return /^(finished|cancelled)\b|^\S+ rejected:/.test(text) ? "final" : "progress";
}

function note(planId, text, state = stateOf(text)) {
  // says ``text`` on the plan's status line unless it already shows a later state; true if said
  const s = document.getElementById(`status-${planId}`);
  if (!s || (STATE_ORDER[state] || 0) < (STATE_ORDER[s.dataset.state] || 0)) return false;
  s.textContent = text;
  s.dataset.state = state;
  return true;
}

// a failed step in words (issue 26 §3): what the failure is (its class) and what follows (the
// policy's action) — from the plan's event stream (step_failure, step_retry, plan_revised)
const FAILURE_WORDS = {
  transient: "a passing error at the provider",
  rate_limited: "the provider asked us to slow down",
  auth: "the provider refused the sign-in",
  conflict: "it conflicts with something already there",
  validation: "the provider refused the request as it was",
  stale: "what it depends on changed since you looked",
  unknown_outcome: "it may or may not have happened",
  provider_down: "the provider could not be reached",
};
const ACTION_WORDS = {
  retry: "we try again",
  replan: "what was written is undone and the request is planned again: approve the new plan if it is still what you want",
  compensate: "what was written is undone",
  ask: "what was written is undone; it is over to you",
};
const ASK_WORDS = {
  auth: "sign in to the provider again, then ask again",
  validation: "change the request, then ask again",
  unknown_outcome: "check with the provider whether it happened; nothing is sent again until that is settled",
  transient: "we tried several times; try again later",
  provider_down: "we tried several times; try again when it is back",
  rate_limited: "the provider asked for a longer wait than we keep; try again later",
};

function failureSaid(e) {
  const d = e.details || {};
  const what = FAILURE_WORDS[d.class] || "it failed";
  const next = e.status === "ask" && d.class === "unknown_outcome" ? "it is over to you"
    : ACTION_WORDS[e.status] || e.status;
  const ask = e.status === "ask" ? ASK_WORDS[d.class] : null;
  const step = e.step ? `Step ${e.step}` : "A step";
  return `${step} failed: ${what}. Next: ${next}${ask ? ` — ${ask}` : ""}.`;
}

function showFailure(planId, e) {
  const box = document.querySelector(`section.card[data-plan="${planId}"]`);
  if (!box) return;
  const old = box.querySelector("p.failure");
  const line = el("p", { class: "meta failure", role: "status", "data-class": (e.details || {}).class || "" }, failureSaid(e));
  const d = e.details || {};
  const inner = /\((.*)\)$/.exec(e.reason || "");
  const said = d.status ? `the provider answered ${d.status}${d.retry_after_s != null ? `, asking us to wait ${d.retry_after_s} s` : ""}`
    : inner ? inner[1] : "";
  if (said) line.append(el("br"), el("span", { class: "why" }, `What the provider said: ${said}.`));
  if (old) old.replaceWith(line); else box.append(line);
}

function showRevisedAfterFailure(planId, e) {
  const d = e.details || {};
  const box = document.querySelector(`section.card[data-plan="${planId}"]`);
  if (!box || d.reason !== "failure" || !d.revised_by || box.querySelector("p.replanned")) return;
  box.append(el("p", { class: "meta replanned" }, "Planned again after the failure: ",
    el("a", { href: `/plans/${d.revised_by}` }, "open the new plan"), " (it needs your approval; the old one does not carry over)."));
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
    if (ev.type === "step_failure") showFailure(planId, e);
    if (ev.type === "step_retry") {
      const d = e.details || {};
      note(planId, `step ${e.step || ""}: ${FAILURE_WORDS[d.class] || "it failed"}; trying again in ${d.wait_s} s`);
    }
    if (ev.type === "plan_revised") showRevisedAfterFailure(planId, e);
    if (ev.type === "execute_finished" || ev.type === "durable_finished") {
      loadPlans();
      if (e.status === "waiting") { note(planId, "waiting for your next decision"); return; }
      closeCard(planId);
      note(planId, `finished: ${e.status}`);
      showDone(planId).catch(() => {});
    }
  };
  for (const kind of ["step_started", "step_finished", "step_failed", "step_unknown", "execute_finished", "durable_finished", "gate_approved", "handed_off", "gate_waiting", "watcher_polled", "step_failure", "step_retry", "plan_revised"]) {
    src.addEventListener(kind, mark);
  }
}

// the revisions this plan belongs to (GET /v1/plans/{id}/revisions): a tree of links, this one
// marked; opening another and changing it forks from there (an approval never carries over)
async function revisionsOf(planId, box) {
  const tree = await api("GET", `/v1/plans/${planId}/revisions`);
  if (!tree.root || !tree.root.revisions.length) return;
  const why = (n) => n.reason === "evidence_dropped" ? `without ${(n.dropped || []).join(", ") || "some evidence"}`
    : n.reason === "failure" ? `planned again: ${FAILURE_WORDS[(n.failure || {}).class] || "a step failed"}`
    : n.changed.length ? `changed ${n.changed.join(", ").replaceAll("_", " ")}` : "first plan";
  const item = (n) => {
    const label = `${why(n)} · ${n.status}`;
    const li = el("li", {}, n.current ? el("strong", { "aria-current": "page" }, `${label} (this plan)`)
      : el("a", { href: `/plans/${n.plan_id}` }, label));
    if (n.revisions.length) li.append(el("ul", {}, ...n.revisions.map(item)));
    return li;
  };
  box.append(el("details", { class: "revisions" }, el("summary", {}, "Revisions of this plan"),
    el("p", { class: "meta" }, "Open any of them to look again or change it from there; each is approved on its own."),
    el("ul", {}, item(tree.root))));
}
