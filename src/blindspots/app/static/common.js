// Shared helpers: JSON calls with the session's CSRF token, messages, sign-out.
"use strict";
const BS = (() => {
  const csrf = () => (document.querySelector('meta[name="csrf-token"]') || {}).content || "";
  let pending = 0;
  function setPending(d) {
    pending += d;
    document.body.dataset.pending = String(pending);
  }
  async function api(method, url, body, opts = {}) {
    const headers = { "X-CSRF-Token": csrf() };
    let payload = body;
    if (body !== undefined && !(body instanceof FormData)) {
      headers["Content-Type"] = "application/json";
      payload = JSON.stringify(body);
    }
    setPending(1);
    try {
      const r = await fetch(url, { method, headers, body: payload, credentials: "same-origin" });
      const text = await r.text();
      let data = null;
      try { data = text ? JSON.parse(text) : null; } catch (e) { data = { detail: text }; }
      if (r.status === 401) { location.href = "/signin"; throw new Error("signed out"); }
      if (!r.ok) {
        const msg = (data && data.detail) ? data.detail : r.statusText;
        if (!opts.quiet) flash(`${r.status}: ${msg}`, true);
        const err = new Error(msg); err.status = r.status; throw err;
      }
      return data;
    } finally { setPending(-1); }
  }
  function flash(msg, isError = false) {
    const el = document.getElementById("flash");
    if (!el) return;
    el.textContent = msg;
    el.className = "flash" + (isError ? " error" : "");
    el.hidden = false;
    clearTimeout(flash._t);
    flash._t = setTimeout(() => { el.hidden = true; }, isError ? 8000 : 2500);
  }
  function q(params) { return new URLSearchParams(params).toString(); }
  function typing(e) {
    const t = e.target;
    return t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT");
  }
  document.addEventListener("DOMContentLoaded", () => {
    document.body.dataset.pending = "0";
    const so = document.getElementById("signout");
    if (so) so.addEventListener("click", async () => {
      try { await api("POST", "/api/signout"); } finally { location.href = "/signin"; }
    });
  });
  return { api, flash, q, typing, csrf };
})();
