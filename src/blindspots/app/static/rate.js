// Rate page: one key press per image; answers are saved in the background in order, and the
// next image is preloaded so the page never waits.
"use strict";
(() => {
  let items = [], round = null, idx = 0, done = 0, zoom = 1, overlayOn = true;
  const $ = (id) => document.getElementById(id);
  const img = (kind, id) => kind === "pool" ? `/api/images/pool?${BS.q({ id })}`
    : `/api/images/prediction?${BS.q({ round, id })}`;
  const preloaded = new Map();

  function preload(i) {
    if (i < 0 || i >= items.length) return;
    for (const k of ["pool", "pred"]) {
      const url = img(k, items[i].id);
      if (!preloaded.has(url)) { const im = new Image(); im.src = url; preloaded.set(url, im); }
    }
  }
  function progress() {
    $("progress").textContent = `${done} / ${items.length}`;
  }
  function show() {
    if (!items.length) { $("empty").hidden = false; $("rate-view").hidden = true; $("scale").hidden = true; return; }
    idx = Math.max(0, Math.min(idx, items.length - 1));
    const it = items[idx];
    $("img").src = img("pool", it.id);
    $("img2").src = img("pool", it.id);
    $("overlay").src = img("pred", it.id);
    $("overlay").hidden = !overlayOn;
    $("image-id").textContent = `#${idx + 1} ${it.id}`;
    document.querySelectorAll(".score").forEach((b) => b.classList.toggle("chosen", String(it.score) === b.dataset.score));
    document.body.dataset.index = String(idx);
    progress();
    preload(idx + 1); preload(idx + 2);
  }
  function applyZoom() {
    document.querySelectorAll(".pair .frame").forEach((f) => { f.style.setProperty("--zoom", zoom); });
  }
  function nextUnrated(from) {
    for (let i = from; i < items.length; i++) if (items[i].score === null) return i;
    for (let i = 0; i < from && i < items.length; i++) if (items[i].score === null) return i;
    return Math.min(from, items.length - 1);
  }
  // Answers go out one after another so an undo never overtakes its rating.
  let chain = Promise.resolve();
  function send(url, body, onOk, onErr) {
    chain = chain.then(() => BS.api("POST", url, body).then(onOk).catch(onErr || (() => {})));
    return chain;
  }
  function rate(score) {
    if (!items.length) return;
    const it = items[idx], was = it.score;
    if (was === null) done += 1;
    it.score = score;
    idx = nextUnrated(idx + 1);
    show();
    send("/api/ratings", { round, image_id: it.id, score },
      (r) => { done = r.done; progress(); $("saved").textContent = `saved ${it.id}`; },
      () => { it.score = was; if (was === null) done -= 1; progress(); });
  }
  function undo() {
    if (!items.length) return;
    // Go back to the last rated image before the current one and withdraw its answer.
    let j = idx;
    if (items[j].score === null) { j = idx - 1; while (j >= 0 && items[j].score === null) j--; }
    if (j < 0) return;
    const it = items[j];
    it.score = null; done = Math.max(0, done - 1); idx = j; show();
    send("/api/ratings/undo", { round, image_id: it.id }, (r) => { done = r.done; progress(); $("saved").textContent = `withdrawn ${it.id}`; });
  }
  document.addEventListener("keydown", (e) => {
    if (BS.typing(e) || e.ctrlKey || e.metaKey || e.altKey) return;
    const k = e.key;
    if (k >= "1" && k <= "5") { rate(Number(k)); e.preventDefault(); }
    else if (k === "o" || k === "O") { rate("ood"); e.preventDefault(); }
    else if (k === "ArrowRight") { idx += 1; show(); e.preventDefault(); }
    else if (k === "ArrowLeft") { idx -= 1; show(); e.preventDefault(); }
    else if (k === "u" || k === "U") { undo(); e.preventDefault(); }
    else if (k === "v" || k === "V") { overlayOn = !overlayOn; show(); }
    else if (k === "+" || k === "=") { zoom = Math.min(8, zoom * 1.25); applyZoom(); }
    else if (k === "-") { zoom = Math.max(0.25, zoom / 1.25); applyZoom(); }
  });
  document.addEventListener("DOMContentLoaded", async () => {
    document.querySelectorAll(".score").forEach((b) => b.addEventListener("click", () => {
      rate(b.dataset.score === "ood" ? "ood" : Number(b.dataset.score));
    }));
    $("toggle-overlay").addEventListener("click", () => { overlayOn = !overlayOn; show(); });
    $("zoom-in").addEventListener("click", () => { zoom = Math.min(8, zoom * 1.25); applyZoom(); });
    $("zoom-out").addEventListener("click", () => { zoom = Math.max(0.25, zoom / 1.25); applyZoom(); });
    const q = await BS.api("GET", "/api/ratings/queue");
    items = q.items; round = q.round; done = q.done;
    if (q.classes) {
      $("legend").replaceChildren(...q.classes.names.map((n, i) => {
        const s = document.createElement("span"); s.className = "chip";
        const sw = document.createElement("i"); sw.style.background = q.classes.palette[i];
        s.append(sw, n); return s;
      }));
    }
    idx = nextUnrated(0);
    applyZoom();
    show();
    document.body.dataset.ready = "1";
  });
})();
