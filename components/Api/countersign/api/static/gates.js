// Countersign chat page: a card's gates — the choices the server offers, Approve / Reject, a
// watcher's "Start watching", a later gate opening. Loaded before chat.js; no build step.
"use strict";

function choices(doc, reads) {
  // a gate that picks one of the slots a read found (meeting), or one of the shortlisted items
  const minutes = (doc.plan.intent.entities || {}).duration_min || 30;
  for (const out of Object.values(reads)) {
    if (out && Array.isArray(out.slots) && out.slots.length && out.slots[0].id) {
      // appointment slots a watcher found (visa): pick one by its id
      return out.slots.map((s) => ({ label: s.at ? `${instant(s.at)} (${zone() || "your clock"})` : s.id, title: s.at ? `${s.at} (${s.id})` : s.id, value: { slot: { id: s.id } } }));
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
      : `When the watcher finds something, you choose from it and decide ${g.gate_id}.`),
    becauseOf(g) || "");
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
    holder.append(...nothingOffered(doc, holder));
    approve.disabled = true;
  } else {
    approve.disabled = false;
  }
}

function amountShown(doc, entity) {
  // an amount as the card's "What I understood" shows it ("2.00 EUR"), else as the plan holds it
  const u = (understoodOf[doc.plan.plan_id] || []).find((x) => x.entity === entity);
  if (u && u.shown) return u.shown;
  const v = (doc.plan.intent.entities || {})[entity];
  return v && typeof v === "object" && "amount" in v ? `${v.amount}${v.currency ? ` ${v.currency}` : ""}` : String(v);
}

function nothingOffered(doc, holder) {
  // an empty shortlist, or no free time: say why there is nothing to approve, and offer the
  // change that could give something (the same edit as "What I understood": chat.js changeEntity)
  const ents = doc.plan.intent.entities || {};
  const planId = doc.plan.plan_id;
  const offer = (entity, label) => {
    const b = el("button", { type: "button", class: "change-limit", "data-entity": entity }, label);
    b.addEventListener("click", () => changeEntity(planId, entity, holder, b));
    return b;
  };
  if ("max_price" in ents) {
    return [el("p", { class: "nothing", role: "status" },
      `Nothing in the shop is within your budget of ${amountShown(doc, "max_price")}: there is nothing to approve here. A larger budget may find something.`),
    el("p", {}, offer("max_price", "Change the budget"))];
  }
  if ("window_start" in ents || "duration_min" in ents) {
    const span = ents.window_start && ents.window_end ? ` between ${when(ents.window_start, ents.window_end)}` : "";
    return [el("p", { class: "nothing", role: "status" },
      `There is no free ${ents.duration_min ? `${ents.duration_min}-minute ` : ""}time for everyone${span}: there is nothing to approve here. Another window or a shorter meeting may fit.`),
    el("p", {}, ...[["window_start", "Change the window's start"], ["window_end", "Change the window's end"], ["duration_min", "Change the duration"]]
      .filter(([e]) => e in ents).flatMap(([e, label]) => [offer(e, label), " "]))];
  }
  return [el("p", { class: "nothing", role: "status" }, "Nothing was offered to choose from: there is nothing to approve here. Ask again with other limits.")];
}

function focusGate(fs) {
  // the decision a gate asks: its picked choice, else its first button that can be pressed
  const target = fs.querySelector("input[type=radio]:checked") || fs.querySelector("input:not([disabled]), button:not([disabled])");
  if (target) target.focus();
}

function becauseOf(g) {
  // why the policy puts this gate here (its rules, signed in the plan: GLOBAL_SPEC §9)
  const because = Array.isArray(g.args && g.args.because) ? g.args.because : [];
  if (!because.length) return null;
  return el("p", { class: "meta because" }, "Gate because: ",
    because.map((b) => `${b.because} (step${b.steps.length > 1 ? "s" : ""} ${b.steps.join(", ")})`).join("; "), ".");
}

function gate(doc, g, reads) {
  const planId = doc.plan.plan_id;
  const options = [];
  const fs = el("fieldset", { "aria-label": `gate ${g.gate_id}`, "data-gate": g.gate_id }, el("legend", {}, `Approve ${g.gate_id}?`));
  const why = becauseOf(g);
  if (why) fs.append(why);
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
        // the event stream may have said it first: note never goes back from a final state
        note(planId, ENDED.includes(run.status) ? `finished: ${run.status}` : `execute: ${run.status}${run.waiting_gate ? ` (next: ${run.waiting_gate})` : ""}`);
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
  // ``ready``: settled once the gate shows its choices (the focus waits for it)
  fs.ready = Promise.resolve();
  if (needsChoice(doc, g.gate_id)) {
    approve.disabled = true;
    fs.ready = fillChoices(doc, g, reads, holder, approve, options).catch(() => {});
  }
  return fs;
}
