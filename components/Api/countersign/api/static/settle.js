// Countersign chat page: an execute that was cut short (n8n or the API died mid-write). The
// server's reconciler settles it from evidence when it can (nothing is shown then); when it
// cannot, the execute ends "unknown" and the card says what is known of each write and offers
// "Finish" (send the missing writes — offered only once no write is unknown) and/or "Undo"
// (compensate what was done). Reads GET /v1/plans/{id}/settlement, acts with POST
// /v1/plans/{id}/finish or /undo. Uses chat.js's api() and el() and card.js's note() when it
// runs; no build step.
"use strict";

const SETTLED_WORDS = {
  done: "done",
  unknown: "not known whether it happened",
  failed: "not done",
  pending: "not sent yet",
  compensated: "undone",
  in_progress: "being sent",
};
const OFFER_LABELS = { finish: "Finish: send what is missing", undo: "Undo what was done" };

async function showSettlement(planId) {
  const box = document.querySelector(`section.card[data-plan="${planId}"]`);
  if (!box) return;
  const s = await api("GET", `/v1/plans/${planId}/settlement`);
  const old = box.querySelector(".settlement");
  if (old) old.remove();
  if (!["needs_attention", "unknown"].includes(s.status)) return;
  const rows = Object.entries(s.writes).map(([step, st]) =>
    el("li", { "data-step": step, "data-settled": st }, `step ${step}: ${SETTLED_WORDS[st] || st}`));
  const fs = el("fieldset", { class: "settlement", "aria-label": "run cut short" },
    el("legend", {}, "This run was cut short"),
    el("p", { class: "meta" }, s.reason || "Some writes could not be confirmed."),
    el("ul", {}, ...rows));
  const said = el("p", { class: "meta", role: "status" });
  const buttons = s.offers.map((what) => el("button", { type: "button", "data-offer": what, onclick: async () => {
    for (const b of buttons) b.disabled = true;
    try {
      const r = await api("POST", `/v1/plans/${planId}/${what}`);
      said.textContent = `${what}: ${r.status}`;
      note(planId, `finished: ${r.status === "undone" ? "undone" : r.status}`, "final");
      if (r.status !== "needs_attention") fs.dataset.done = "1";
    } catch (e) {
      said.textContent = e.message;
      for (const b of buttons) b.disabled = false;
    }
  } }, what === "undo" && !Object.values(s.writes).includes("done")
    ? "Stop here (nothing was done; check the unknown with the provider)"
    : OFFER_LABELS[what] || what));
  if (!buttons.length) said.textContent = "Nothing can be done from here yet; the server keeps trying to settle it.";
  fs.append(...buttons, said);
  box.append(fs);
}

function watchCutShort() {
  // the card's status line says "finished: unknown" when an execute ended without knowing
  // every write (card.js follows the event stream); a plan page asks once for its card
  const asked = new Set();
  const look = () => {
    for (const line of document.querySelectorAll('[id^="status-"]')) {
      const planId = line.id.slice("status-".length);
      const cardShown = document.querySelector(`section.card[data-plan="${planId}"]`);
      const mine = document.body.dataset.plan === planId;
      if (cardShown && !asked.has(planId) && (line.textContent === "finished: unknown" || mine)) {
        asked.add(planId);
        showSettlement(planId).catch(() => asked.delete(planId));
      }
    }
  };
  new MutationObserver(look).observe(document.body, { subtree: true, childList: true, characterData: true });
  look();
}

document.addEventListener("DOMContentLoaded", watchCutShort);
