// Countersign chat page: the evidence a plan used, and re-planning without some of it.
"use strict";

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
