// Shared helpers: JSON calls with the session's CSRF token, messages, sign-out, and the outbox
// that keeps every answer (in this browser's localStorage) until the server acknowledges it.
"use strict";
const BS = (() => {
  const meta = (name) => (document.querySelector(`meta[name="${name}"]`) || {}).content || "";
  const csrf = () => meta("csrf-token");
  let inflight = 0;
  // data-pending = requests in flight + answers not yet acknowledged: 0 means everything is saved.
  function updatePending() {
    if (document.body) document.body.dataset.pending = String(inflight + outbox.count());
  }
  function setPending(d) { inflight += d; updatePending(); }

  // opts.quiet: no message on errors; opts.keepPage: no redirect to /signin on 401 (the outbox
  // keeps its answers and waits for a new sign-in instead).
  async function api(method, url, body, opts = {}) {
    const headers = { "X-CSRF-Token": csrf() };
    let payload = body;
    if (body !== undefined && !(body instanceof FormData)) {
      headers["Content-Type"] = "application/json";
      payload = JSON.stringify(body);
    }
    setPending(1);
    try {
      let r;
      try {
        r = await fetch(url, { method, headers, body: payload, credentials: "same-origin" });
      } catch (e) {
        const err = new Error("the server cannot be reached (network)"); err.status = 0;
        if (!opts.quiet) flash(err.message, true);
        throw err;
      }
      const text = await r.text().catch(() => "");
      let data = null;
      try { data = text ? JSON.parse(text) : null; } catch (e) { data = { detail: text.slice(0, 300) }; }
      if (r.status === 401 && !opts.keepPage) { location.href = "/signin"; }
      if (!r.ok) {
        const msg = (data && data.detail) ? data.detail : r.statusText;
        if (!opts.quiet) flash(`${r.status}: ${msg}`, true);
        const err = new Error(msg); err.status = r.status; throw err;
      }
      return data;
    } finally { setPending(-1); }
  }

  // ---- the outbox ---------------------------------------------------------------------------
  // Answers are sent one after another in the order given (an undo never overtakes its answer),
  // retried with backoff while the server cannot take them (network down, 5xx, 429, signed out),
  // and dropped only when acknowledged (2xx) or rejected for good (another 4xx: the page is told
  // and goes back to that answer). Every route they go to replaces an earlier answer, so sending
  // one twice (a reload while it was in flight) is harmless.
  const outbox = (() => {
    // One record per tab ({beat, items}, the tab's id kept in sessionStorage so a reload is the
    // same tab): two tabs never overwrite each other's answers. A record whose tab stopped beating
    // (closed) is adopted by the next page of this user that loads or checks.
    const prefix = () => `bs-outbox:${meta("bs-user") || "anonymous"}:`;
    let tab = "";
    try {
      tab = sessionStorage.getItem("bs-tab") || Math.random().toString(36).slice(2);
      sessionStorage.setItem("bs-tab", tab);
    } catch (e) { tab = Math.random().toString(36).slice(2); }
    const key = () => prefix() + tab;
    const STALE_MS = 10000;
    let items = [], stored = true, sending = false, held = false, started = false, timer = null, retryAt = 0, lastError = "", authError = false;
    const handlers = { ack: [], reject: [] };
    function read(k) {
      const rec = JSON.parse(localStorage.getItem(k) || "null");
      return rec && Array.isArray(rec.items) ? rec : { beat: 0, items: [] };
    }
    function adopt() {
      let found = 0;
      try {
        for (let i = localStorage.length - 1; i >= 0; i--) {
          const k = localStorage.key(i);
          if (!k || !k.startsWith(prefix()) || k === key()) continue;
          const rec = read(k);
          if (Date.now() - rec.beat < STALE_MS) continue;  // that tab is still open
          items.push(...rec.items); found += rec.items.length;
          localStorage.removeItem(k);
        }
      } catch (e) { /* storage unreadable: nothing to adopt */ }
      return found;
    }
    function load() {
      try { items = read(key()).items; } catch (e) { items = []; stored = false; }
      adopt();
    }
    function save() {
      try {
        if (items.length) localStorage.setItem(key(), JSON.stringify({ beat: Date.now(), items }));
        else localStorage.removeItem(key());
        stored = true;
      } catch (e) { stored = false; }
      render();
    }
    setInterval(() => {  // heartbeat while this tab holds answers; pick up a closed tab's
      if (adopt()) { save(); if (!held || started) flush(); } else if (items.length) save();
    }, 3000);
    const retryable = (s) => s === 0 || s === 401 || s === 403 || s === 408 || s === 425 || s === 429 || s >= 500;
    function add(kind, url, body) {
      items.push({ uid: `${Date.now()}-${Math.random().toString(36).slice(2)}`, kind, url, body, tries: 0, at: Date.now() });
      save();
      flush();
    }
    function schedule(tries) {
      const wait = Math.min(30000, 1000 * 2 ** Math.min(tries - 1, 5)) * (0.8 + 0.4 * Math.random());
      retryAt = Date.now() + wait;
      clearTimeout(timer);
      timer = setTimeout(flush, wait);
    }
    async function flush() {
      started = true;
      if (sending || !items.length) { render(); return; }
      sending = true; clearTimeout(timer); retryAt = 0;
      try {
        while (items.length) {
          const e = items[0];
          let res;
          try {
            res = await api("POST", e.url, e.body, { quiet: true, keepPage: true });
          } catch (err) {
            if (retryable(err.status)) {
              e.tries += 1; authError = err.status === 401 || err.status === 403;
              lastError = err.status ? `${err.status}: ${err.message}` : err.message;
              save(); schedule(e.tries); return;
            }
            items.shift(); save();
            handlers.reject.forEach((f) => f(e, err));
            continue;
          }
          items.shift(); lastError = ""; authError = false; save();
          handlers.ack.forEach((f) => f(e, res));
        }
      } finally { sending = false; render(); }
    }
    let tick = null;
    function render() {
      updatePending();
      if (document.body) document.body.dataset.unsent = String(items.length);
      document.querySelectorAll("[data-unsent-count]").forEach((el) => {
        el.textContent = items.length ? `${items.length} unsaved` : ""; el.hidden = !items.length;
      });
      const bar = document.getElementById("outbox");
      if (!bar) return;
      // A banner only once an answer is late (failed once, or 1.5 s old): no flicker per key press.
      const late = items.length && (items[0].tries > 0 || Date.now() - items[0].at > 1500);
      bar.hidden = !late;
      clearInterval(tick); tick = null;
      if (!items.length) return;
      if (!late) { tick = setInterval(render, 500); return; }
      const n = items.length, s = n === 1 ? "answer is" : "answers are";
      const wait = retryAt ? Math.max(0, Math.ceil((retryAt - Date.now()) / 1000)) : 0;
      const why = authError ? "you are signed out or your session changed: sign in again (another tab), then reload this page"
        : (lastError === "the server cannot be reached (network)" ? "the server cannot be reached"
          : (lastError || "waiting for the server"));
      bar.querySelector(".outbox-text").textContent =
        `⚠ ${n} ${s} not saved yet — ${why}. ` +
        (stored ? "Kept in this browser (safe to reload); sent when the server is back"
          : "This browser cannot store them: keep this page open until they are sent") +
        (wait ? ` · next try in ${wait} s` : "");
      tick = setInterval(render, 1000);
    }
    return {
      add, flush, count: () => items.length,
      pending: (kind) => items.filter((e) => !kind || e.kind === kind),
      onAck: (f) => handlers.ack.push(f), onReject: (f) => handlers.reject.push(f),
      load, render,
      // A page that shows answers calls hold() when its script runs and flush() once it has put
      // the unsent answers on screen (so none is acknowledged before it has read them).
      hold: () => { held = true; }, held: () => held,
    };
  })();

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
  // Keys go to the page unless a text field has the focus (a slider or button must not eat them).
  const TEXT_INPUTS = new Set(["text", "password", "search", "number", "email", "url", "tel"]);
  function typing(e) {
    const t = e.target;
    if (!t || !t.tagName) return false;
    if (t.tagName === "INPUT") return TEXT_INPUTS.has((t.type || "text").toLowerCase());
    return t.tagName === "TEXTAREA" || t.tagName === "SELECT" || t.isContentEditable;
  }
  outbox.load();
  document.addEventListener("DOMContentLoaded", () => {
    document.body.dataset.pending = "0";
    const so = document.getElementById("signout");
    if (so) so.addEventListener("click", async () => {
      try { await api("POST", "/api/signout"); } finally { location.href = "/signin"; }
    });
    const retry = document.querySelector("#outbox button");
    if (retry) retry.addEventListener("click", () => outbox.flush());
    window.addEventListener("online", () => outbox.flush());
    outbox.render();
    // Pages register their handlers while loading; replay what an earlier visit left unsent.
    if (!outbox.held()) setTimeout(() => outbox.flush(), 0);
  });
  return { api, flash, q, typing, csrf, outbox };
})();
