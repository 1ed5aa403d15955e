// Countersign chat page: the evidence a plan used, and re-planning without some of it.
"use strict";

function evidenceWords(value) {
  // a JSON value as a person reads it: no braces, brackets or quotes (ContextRAG's `spoken`)
  if (value === null || value === undefined) return "none";
  if (typeof value === "boolean") return value ? "yes" : "no";
  if (Array.isArray(value)) return value.map(evidenceWords).join(", ") || "none";
  if (typeof value === "object") {
    const keys = Object.keys(value);
    if (keys.length === 2 && "start" in value && "end" in value) {
      return `${evidenceWords(value.start)}–${evidenceWords(value.end)}`;
    }
    return keys.map((k) => `${k.replaceAll("_", " ")} ${evidenceWords(value[k])}`).join("; ") || "none";
  }
  return String(value);
}

function evidenceSentence(e) {
  // the item's own sentence (Evidence.why); evidence of plans made before it existed gets one
  // from its type, key and value — never JSON
  const said = e.why || (() => {
    const name = String(e.key).replaceAll("_", " ").replaceAll(".", " ");
    const words = evidenceWords(e.value);
    switch (e.type) {
      case "preference": return `Your preference ${name}: ${words}.`;
      case "contact": return `${e.key} is in your contacts (${words}).`;
      case "history": return `Earlier, ${name}: ${words}.`;
      case "exemplar": return "A plan like this one was made before.";
      default: return `${name}: ${words}.`;
    }
  })();
  return said.replaceAll("{", "(").replaceAll("}", ")");
}

function evidenceList(doc, evidence) {
  // what ContextRAG gave the planner (its hash is signed in the plan), one sentence each: tick
  // items and re-plan without them (POST /v1/plans/{id}/replan — a revision; the earlier plan
  // stays as it was)
  const planId = doc.plan.plan_id;
  const box = el("fieldset", { class: "evidence", "aria-label": "evidence used" },
    el("legend", {}, "Evidence used — why each item is here"));
  const seen = new Map();
  const sentences = evidence.map((e) => {
    const s = evidenceSentence(e);
    seen.set(s, (seen.get(s) || 0) + 1);
    return s;
  });
  const counted = new Map();
  const boxes = evidence.map((e, i) => {
    const id = `ev-${planId}-${i}`;
    // labels stay unique: a repeated sentence is numbered
    let text = sentences[i];
    if (seen.get(text) > 1) {
      counted.set(text, (counted.get(text) || 0) + 1);
      text = `${text} (${counted.get(text)} of ${seen.get(text)})`;
    }
    const tick = el("input", { type: "checkbox", id, value: e.source_ref, "data-sentence": text });
    const sure = Math.round(Number(e.confidence) * 100);
    box.append(el("div", { class: "evidence-item" }, tick, " ", el("label", { for: id },
      text, " ", el("span", { class: "evidence-sure" }, `· ${sure} % sure`))));
    return tick;
  });
  const go = el("button", { type: "button", class: "replan", onclick: async () => {
    const picked = boxes.filter((b) => b.checked);
    const drop = picked.map((b) => b.value);
    if (!drop.length) { note(planId, "tick the evidence to leave out first"); return; }
    const without = picked.map((b) => b.dataset.sentence).join(" ");
    go.disabled = true;
    try {
      const reply = await api("POST", `/v1/plans/${planId}/replan`, { drop });
      if (reply.plan) say("assistant", `Planned again without: ${without} Nothing is written until you approve.`, card(reply, reply.preview));
      else if (reply.needs) say("assistant", `Without that: ${reply.needs.map((n) => n.question).join(" ")}`);
    } catch (e) { note(planId, `re-plan refused: ${e.message}`); }
    go.disabled = false;
    loadPlans();
  } }, "Drop selected and re-plan");
  box.append(el("p", {}, go));
  return box;
}
