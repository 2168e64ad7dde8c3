// Region page: one region of an image of S at a time, outlined over the image, the target's guess
// preselected. One key or click answers: Enter accepts the guess, 0-9 name a class, M says "mixed /
// unsure"; the page moves to the next open region by itself. Answers go to the outbox (common.js), kept
// in this browser until the server acknowledges them, as the rating and vote pages do.
"use strict";
(() => {
  BS.outbox.hold();
  const $ = (id) => document.getElementById(id);
  let items = [], classes = null, round = null, idx = 0;
  const find = (id, region) => items.find((x) => x.image_id === id && x.region === region);
  const open = () => items.findIndex((x) => x.answer === null);
  function progress() {
    $("progress").textContent = `${items.filter((x) => x.answer !== null).length} / ${items.length}`;
  }
  function show() {
    if (!items.length) { $("empty").hidden = false; $("region-view").hidden = true; return; }
    idx = Math.max(0, Math.min(idx, items.length - 1));
    const it = items[idx];
    const src = `/api/images/pool?${BS.q({ id: it.image_id })}`;
    if ($("img").getAttribute("src") !== src) $("img").src = src;
    $("outline").src = `/api/images/region?${BS.q({ round, id: it.image_id, region: it.region })}`;
    $("item").textContent = `${it.image_id} · region ${it.region}`;
    const box = $("choices"); box.replaceChildren();
    classes.names.forEach((name, k) => box.append(button(k, name, k < 10 ? String(k) : "", it)));
    box.append(button("mixed", "mixed / unsure", "M", it));
    $("region-view").hidden = false;
    $("finished").hidden = open() >= 0;
    progress();
    const nxt = items[idx + 1];
    if (nxt && nxt.image_id !== it.image_id) { const im = new Image(); im.src = `/api/images/pool?${BS.q({ id: nxt.image_id })}`; }
    document.body.dataset.index = String(idx);
    document.body.dataset.finished = open() >= 0 ? "0" : "1";
  }
  function button(label, name, key, it) {
    const b = document.createElement("button");
    b.className = "choice";
    if (label === it.guess) b.classList.add("preselected");
    if (label === it.answer) b.classList.add("chosen");
    b.dataset.label = String(label);
    if (label !== "mixed") {
      const sw = document.createElement("span"); sw.className = "swatch"; sw.style.background = classes.palette[label];
      b.append(sw);
    }
    b.append(name + (key ? ` (${key})` : "") + (label === it.guess ? " · guess, Enter" : ""));
    b.addEventListener("click", () => answer(label));
    return b;
  }
  function answer(label) {
    const it = items[idx];
    it.answer = label;
    BS.outbox.add("region", "/api/regions", { round, image_id: it.image_id, region: it.region, label });
    const nxt = items.findIndex((x, j) => j > idx && x.answer === null);
    const any = open();
    idx = nxt >= 0 ? nxt : (any >= 0 ? any : idx);
    show();
  }
  BS.outbox.onAck((e, r) => {
    if (e.kind !== "region") return;
    const it = find(e.body.image_id, e.body.region);
    if (it) it.confirmed = r.label;
    $("saved").textContent = `saved ${e.body.image_id} · region ${e.body.region}` + (r.image_done ? " · image done" : "");
  });
  BS.outbox.onReject((e, err) => {
    if (e.kind !== "region") return;
    BS.flash(`Answer for ${e.body.image_id} region ${e.body.region} was NOT saved — ${err.status}: ${err.message}`, true);
    const it = find(e.body.image_id, e.body.region);
    if (!it) return;
    it.answer = it.confirmed === undefined ? null : it.confirmed;
    idx = items.indexOf(it); show();
  });
  document.addEventListener("keydown", (e) => {
    if (BS.typing(e) || e.ctrlKey || e.metaKey || e.altKey || !items.length) return;
    const it = items[idx], k = e.key;
    if (k === "Enter" || k === " ") { e.preventDefault(); answer(it.guess); }
    else if (k >= "0" && k <= "9") { const c = Number(k); if (c < classes.names.length) answer(c); }
    else if (k === "m" || k === "M") answer("mixed");
    else if (k === "ArrowRight") { idx += 1; show(); }
    else if (k === "ArrowLeft") { idx -= 1; show(); }
  });
  document.addEventListener("DOMContentLoaded", async () => {
    const q = await BS.api("GET", "/api/regions/queue");
    round = q.round; classes = q.classes; items = q.items;
    items.forEach((x) => { if (x.answer !== null) x.confirmed = x.answer; });
    // Answers an earlier visit left unsent are still answers: show them, then send them.
    for (const e of BS.outbox.pending("region")) {
      const it = find(e.body.image_id, e.body.region);
      if (it) it.answer = e.body.label;
    }
    const first = open(); idx = first >= 0 ? first : 0;
    show(); BS.outbox.flush(); document.body.dataset.ready = "1";
  });
})();
