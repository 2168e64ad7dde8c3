// Rate page: one key press per image. Answers go to the outbox (common.js), which keeps them until
// the server acknowledges them; the page moves on at once and preloads the next images.
// A rejected answer (e.g. the round closed) brings the page back to that image with the reason.
// A finished queue stays finished: changing an answer means picking it under "Your answers".
"use strict";
(() => {
  BS.outbox.hold();
  let items = [], round = null, idx = -1, zoom = 1, overlayOn = true, opacity = 55, roundProgress = null;
  const byId = new Map();
  const $ = (id) => document.getElementById(id);
  const img = (kind, id) => kind === "pool" ? `/api/images/pool?${BS.q({ id })}`
    : `/api/images/prediction?${BS.q({ round, id })}`;
  const preloaded = new Map();
  const LABELS = { 1: "bad", 2: "poor", 3: "fair", 4: "good", 5: "excellent", ood: "out of domain" };
  const label = (s) => s === null ? "–" : `${s === "ood" ? "O" : s} ${LABELS[s] || ""}`.trim();

  function preload(i) {
    if (i < 0 || i >= items.length) return;
    for (const k of ["pool", "pred"]) {
      const url = img(k, items[i].id);
      if (!preloaded.has(url)) { const im = new Image(); im.src = url; preloaded.set(url, im); }
    }
  }
  const done = () => items.filter((x) => x.score !== null).length;
  const finished = () => items.length > 0 && idx < 0;
  function nextUnrated(from) {
    for (let i = from; i < items.length; i++) if (items[i].score === null) return i;
    for (let i = 0; i < from && i < items.length; i++) if (items[i].score === null) return i;
    return -1;  // every image has an answer: the queue is finished
  }
  function progress() {
    $("progress").textContent = `${done()} / ${items.length}`;
    const p = roundProgress;
    // The round's count (everyone): the same words as `blindspots status` and `round`.
    $("round-progress").textContent = p ? `round ${p.round}: ${p.counts}` : "";
    $("quota-warning").hidden = !(p && p.unreachable);
    $("quota-warning").textContent = p && p.unreachable ? `This round cannot finish as it is: ${p.advice}.` : "";
    const unsent = BS.outbox.pending("rating").length;
    if (finished()) {
      const left = p && p.complete < p.images;
      $("finished-text").textContent = `All ${items.length} images of round ${round} are rated by you. ` +
        (unsent ? `${unsent} answer(s) are not saved yet; they are sent as soon as the server takes them.`
          : "Every answer is saved. Thank you!") +
        (left ? ` The round still needs answers from others: ${p.counts}.` : "") +
        (p && p.next ? ` Every image of round ${p.round} has its ratings: the loop goes on with ${p.next}.` : "");
    }
  }
  function history() {
    const rated = items.map((x, i) => [x, i]).filter(([x]) => x.score !== null);
    $("history").hidden = !rated.length;
    $("history-count").textContent = String(rated.length);
    $("history-list").replaceChildren(...rated.map(([x, i]) => {
      const li = document.createElement("li"); li.value = i + 1;
      const b = document.createElement("button"); b.type = "button"; b.className = "linkish";
      b.textContent = `${x.id} — ${label(x.score)}${x.unsent ? " (not saved yet)" : ""}`;
      b.addEventListener("click", () => { idx = i; show(); window.scrollTo(0, 0); });
      if (i === idx) li.className = "current";
      li.append(b); return li;
    }));
  }
  function show() {
    const empty = !items.length;
    $("empty").hidden = !empty;
    $("finished").hidden = !finished();
    $("rate-view").hidden = empty || finished();
    $("scale").hidden = empty || finished();
    $("view-controls").hidden = empty || finished();
    document.body.dataset.finished = finished() ? "1" : "0";
    if (empty) { progress(); return; }
    if (finished()) { $("image-id").textContent = ""; $("changing").hidden = true; progress(); history(); return; }
    idx = Math.max(0, Math.min(idx, items.length - 1));
    const it = items[idx];
    // Until the new image is there, the old one is dimmed: never rate a picture that is gone.
    for (const [el, src] of [[$("img"), img("pool", it.id)], [$("img2"), img("pool", it.id)], [$("overlay"), img("pred", it.id)]]) {
      if (el.getAttribute("src") === src) continue;
      el.classList.add("loading");
      el.onload = el.onerror = () => el.classList.remove("loading");
      el.src = src;
    }
    $("overlay").hidden = !overlayOn;
    $("full-image").href = img("pool", it.id);
    $("full-pred").href = img("pred", it.id);
    $("image-id").textContent = `#${idx + 1} ${it.id}`;
    // An image that already has an answer: say so, so a key press is a deliberate change.
    $("changing").hidden = it.score === null;
    $("changing").textContent = it.score === null ? "" : `your answer: ${label(it.score)} — press a key to change it`;
    document.querySelectorAll(".score").forEach((b) => b.classList.toggle("chosen", String(it.score) === b.dataset.score));
    document.body.dataset.index = String(idx);
    progress(); history();
    preload(idx + 1); preload(idx + 2);
  }
  function applyView() {
    const pair = $("rate-view");
    pair.style.setProperty("--zoom", zoom);
    pair.style.setProperty("--overlay-opacity", String(opacity / 100));
    $("opacity").value = String(opacity);
  }
  // Zoom about each frame's centre (from the top-left corner, a portrait photo's zoom showed the letterbox).
  function setZoom(z) {
    const frames = [...document.querySelectorAll("#rate-view .frame")];
    const centres = frames.map((f) => [(f.scrollLeft + f.clientWidth / 2) / f.scrollWidth,
      (f.scrollTop + f.clientHeight / 2) / f.scrollHeight]);
    zoom = Math.max(1, Math.min(8, z)); applyView();
    frames.forEach((f, i) => {
      f.scrollLeft = centres[i][0] * f.scrollWidth - f.clientWidth / 2;
      f.scrollTop = centres[i][1] * f.scrollHeight - f.clientHeight / 2;
    });
  }
  function error(msg) {
    const el = $("answer-error");
    el.textContent = msg; el.hidden = !msg;
  }
  function rate(score) {
    if (!items.length) return;
    if (finished()) {
      BS.flash("The queue is finished: pick an image under “Your answers” to change its answer.");
      return;
    }
    const it = items[idx];
    it.score = score; it.unsent = (it.unsent || 0) + 1;
    error("");
    BS.outbox.add("rating", "/api/ratings", { round, image_id: it.id, score });
    idx = nextUnrated(idx + 1);
    show();
  }
  function undo() {
    if (!items.length) return;
    // The last rated image before the current one (on a finished queue: the last one).
    let j = finished() ? items.length - 1 : idx;
    if (items[j].score === null) { j -= 1; while (j >= 0 && items[j].score === null) j--; }
    if (j < 0) return;
    const it = items[j];
    it.score = null; it.unsent = (it.unsent || 0) + 1; idx = j;
    BS.outbox.add("rating", "/api/ratings/undo", { round, image_id: it.id });
    show();
  }
  BS.outbox.onAck((e, r) => {
    const it = e.kind === "rating" && e.body.round === round ? byId.get(e.body.image_id) : null;
    if (!it) return;
    it.unsent = Math.max(0, (it.unsent || 0) - 1);
    it.confirmed = e.url.endsWith("/undo") ? null : e.body.score;
    if (r && r.progress) roundProgress = r.progress;
    $("saved").textContent = `${e.url.endsWith("/undo") ? "withdrawn" : "saved"} ${e.body.image_id}`;
    progress(); history();
  });
  BS.outbox.onReject((e, err) => {
    if (e.kind !== "rating") return;
    const it = e.body.round === round ? byId.get(e.body.image_id) : null;
    const what = e.url.endsWith("/undo") ? "Undo" : `Answer ${label(e.body.score)}`;
    error(`${what} for ${e.body.image_id} was NOT saved — ${err.status}: ${err.message}`);
    if (!it) return;
    // Go back to that image with the answer the server holds.
    it.unsent = Math.max(0, (it.unsent || 0) - 1);
    if (!it.unsent) it.score = it.confirmed === undefined ? null : it.confirmed;
    idx = items.indexOf(it);
    show();
  });
  function step(d) {
    if (finished() || !items.length) return;  // a finished queue is left through "Your answers" only
    idx = Math.max(0, Math.min(items.length - 1, idx + d)); show();
  }
  document.addEventListener("keydown", (e) => {
    if (BS.typing(e) || e.ctrlKey || e.metaKey || e.altKey) return;
    const k = e.key;
    if (k >= "1" && k <= "5") { rate(Number(k)); e.preventDefault(); }
    else if (k === "o" || k === "O") { rate("ood"); e.preventDefault(); }
    else if (k === "ArrowRight") { step(1); e.preventDefault(); }
    else if (k === "ArrowLeft") { step(-1); e.preventDefault(); }
    else if (k === "u" || k === "U") { undo(); e.preventDefault(); }
    else if (k === "v" || k === "V") { overlayOn = !overlayOn; show(); }
    else if (k === "[") { opacity = Math.max(0, opacity - 10); applyView(); }
    else if (k === "]") { opacity = Math.min(100, opacity + 10); applyView(); }
    else if (k === "+" || k === "=") setZoom(zoom * 1.25);
    else if (k === "-") setZoom(zoom / 1.25);
    else if (k === "0") setZoom(1);
    else if ((k === "f" || k === "F") && idx >= 0 && items.length) window.open(img("pool", items[idx].id), "_blank");
  });
  // Drag to pan a zoomed image; both frames scroll together.
  function panning() {
    const frames = [...document.querySelectorAll("#rate-view .frame")];
    let drag = null, syncing = false;
    frames.forEach((f) => {
      f.addEventListener("mousedown", (e) => {
        if (e.button !== 0) return;
        drag = { f, x: e.clientX, y: e.clientY, l: f.scrollLeft, t: f.scrollTop }; e.preventDefault();
      });
      f.addEventListener("scroll", () => {
        if (syncing) return; syncing = true;
        frames.forEach((g) => { if (g !== f) { g.scrollLeft = f.scrollLeft; g.scrollTop = f.scrollTop; } });
        syncing = false;
      });
    });
    window.addEventListener("mousemove", (e) => {
      if (!drag) return;
      drag.f.scrollLeft = drag.l - (e.clientX - drag.x); drag.f.scrollTop = drag.t - (e.clientY - drag.y);
    });
    window.addEventListener("mouseup", () => { drag = null; });
  }
  document.addEventListener("DOMContentLoaded", async () => {
    document.querySelectorAll(".score").forEach((b) => b.addEventListener("click", () => {
      b.blur();  // Space/Enter must not rate the next image with this button again
      rate(b.dataset.score === "ood" ? "ood" : Number(b.dataset.score));
    }));
    $("toggle-overlay").addEventListener("click", () => { overlayOn = !overlayOn; show(); });
    $("zoom-in").addEventListener("click", () => setZoom(zoom * 1.25));
    $("zoom-out").addEventListener("click", () => setZoom(zoom / 1.25));
    $("zoom-fit").addEventListener("click", () => setZoom(1));
    $("opacity").addEventListener("input", (e) => { opacity = Number(e.target.value); applyView(); });
    $("opacity").addEventListener("change", (e) => e.target.blur());  // keys go back to rating
    panning();
    let q;
    try { q = await BS.api("GET", "/api/ratings/queue"); }
    catch (err) {
      error(`The queue could not be loaded (${err.message}). Reload the page to try again.`);
      BS.outbox.flush(); return;
    }
    items = q.items; round = q.round; roundProgress = q.progress || null;
    items.forEach((x) => { x.confirmed = x.score; x.unsent = 0; byId.set(x.id, x); });
    // Answers an earlier visit left unsent are still answers: show them, then send them.
    for (const e of BS.outbox.pending("rating")) {
      const it = e.body.round === round ? byId.get(e.body.image_id) : null;
      if (!it) continue;
      it.score = e.url.endsWith("/undo") ? null : e.body.score; it.unsent += 1;
    }
    if (q.classes) {
      $("legend").replaceChildren(...q.classes.names.map((n, i) => {
        const s = document.createElement("span"); s.className = "chip";
        const sw = document.createElement("i"); sw.style.background = q.classes.palette[i];
        s.append(sw, n); return s;
      }));
    }
    idx = nextUnrated(0);
    applyView();
    show();
    BS.outbox.flush();
    document.body.dataset.ready = "1";
  });
})();
