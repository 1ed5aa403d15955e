// Countersign preferences and consent page: GET/PUT /v1/memory/prefs, export, forget a subject.
// Plain JavaScript, served by the app; no build step.
"use strict";

const csrf = () => (document.cookie.match(/(?:^|; )cs_csrf=([^;]*)/) || [])[1] || "";

async function api(method, path, body) {
  const r = await fetch(path, {
    method,
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf() },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(data.detail || data.title || `HTTP ${r.status}`);
  return data;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

const status = (text) => { document.getElementById("memory-status").textContent = text; };

function parsed(text) {
  try { return JSON.parse(text); } catch (e) { return text; }  // a bare word is a string
}

async function save(body, done) {
  try { render(await api("PUT", "/v1/memory/prefs", body)); status(done); }
  catch (e) { status(`not saved: ${e.message}`); }
}

function render(state) {
  const rows = Object.entries(state.prefs).map(([k, v]) => {
    const input = el("input", { value: JSON.stringify(v), "aria-label": `value of ${k}` });
    return el("tr", {}, el("td", {}, k), el("td", {}, input), el("td", {},
      el("button", { type: "button", onclick: () => save({ prefs: { [k]: parsed(input.value) } }, `${k} saved`) }, "Save"),
      " ",
      el("button", { type: "button", onclick: () => save({ prefs: { [k]: null } }, `${k} removed`) }, "Remove")));
  });
  document.querySelector("#prefs tbody").replaceChildren(...rows);
  const items = Object.entries(state.consent).map(([purpose, granted]) => {
    const id = `consent-${purpose}`;
    const tick = el("input", { type: "checkbox", id });
    tick.checked = granted;
    tick.addEventListener("change", () => save({ consent: { [purpose]: tick.checked } },
      `${purpose}: ${tick.checked ? "granted" : "revoked"}`));
    return el("li", {}, tick, " ", el("label", { for: id }, purpose));
  });
  document.getElementById("consent").replaceChildren(...items);
}

document.addEventListener("DOMContentLoaded", async () => {
  document.getElementById("pref-add").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const key = document.getElementById("pref-key").value.trim();
    save({ prefs: { [key]: parsed(document.getElementById("pref-value").value.trim()) } }, `${key} saved`);
  });
  document.getElementById("consent-add").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const purpose = document.getElementById("consent-purpose").value.trim();
    save({ consent: { [purpose]: true } }, `${purpose}: granted`);
  });
  document.getElementById("forget-subject").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const subject = document.getElementById("subject").value.trim();
    try {
      const out = await api("POST", "/v1/memory/forget", { subject });
      const n = Object.values(out.deleted).reduce((a, b) => a + b, 0);
      status(`forgotten: ${n} rows, ${out.audit_rows_redacted} audit rows redacted`);
      render(await api("GET", "/v1/memory/prefs"));
    } catch (e) { status(`not forgotten: ${e.message}`); }
  });
  try { render(await api("GET", "/v1/memory/prefs")); } catch (e) { status(e.message); }
});
